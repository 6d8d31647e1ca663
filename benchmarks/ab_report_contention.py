"""How much clients hammering an experiment's report cost another tenant's searches (not a test).

Serves ``samples/corpus`` with ``hybridsag serve`` (a process of its own, ``embedding.model =
"none"``): the guide as tenant ``a``, the reference as tenant ``b``, one split experiment with
``--impressions`` searches of each tenant under it and a click on every other one. Then tenant
``b``'s plain searches one after another (``--searches`` of them), first alone, then while
``--clients`` threads fetch the report (``GET /v1/experiments/split/report`` with tenant ``a``'s
read token, and every other call the chart) as fast as they are answered; with ``--churn`` a
further thread keeps adding tenant ``a``'s clicks meanwhile (a new event invalidates a cached
report). Prints one JSON object: ``b``'s search p50/p95 (ms) per phase and the report calls
made.

    python benchmarks/ab_report_contention.py --work /tmp/ab-contention [--port 18210]

Timings depend on the machine (and on what else runs on it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "hybridsag"
ADMIN = "bench-admin-token-0123456789"
TOKEN_A = "bench-tenant-a-token-0123456789"
TOKEN_B = "bench-tenant-b-token-0123456789"
EXPERIMENT = {
    "name": "split",
    "mode": "split",
    "arms": [{"name": "lexical", "paths": ["bm25"]}, {"name": "judged", "paths": ["sag2", "title"]}],
}
QUERIES = ["ReActAgent", "install on Linux", "release notes", "E-1234", "configuration", "agents"]


def pct(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return round(values[0], 2) if values else None
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 2)


def env_of(data_dir: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    tokens = [
        {"token": TOKEN_A, "role": "read", "tenant": "a", "name": "a"},
        {"token": TOKEN_B, "role": "read", "tenant": "b", "name": "b"},
    ]
    env.update(
        HYBRIDSAG_DATA_DIR=str(data_dir),
        HYBRIDSAG_EMBEDDING__MODEL="none",
        HYBRIDSAG_SERVER__PORT=str(port),
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_SERVER__TOKENS=json.dumps(tokens),
        HYBRIDSAG_SERVER__RECONCILER="false",
        HYBRIDSAG_AB__EXPERIMENTS=json.dumps([EXPERIMENT]),
    )
    return env


def build(data_dir: Path, env: dict[str, str]) -> None:
    for tenant, folder in (("a", "guide"), ("b", "reference")):
        subprocess.run(
            [str(BIN), "index", str(ROOT / "samples" / "corpus" / folder), "--tenant", tenant, "--no-prune", "-q"],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("the service did not get ready")


def seed(url: str, impressions: int) -> None:
    for token, tenant in ((TOKEN_A, "a"), (TOKEN_B, "b")):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            for i in range(impressions):
                query = f"{QUERIES[i % len(QUERIES)]} {tenant}{i % 40}"
                body = c.post("/v1/search", json={"query": query, "user": f"{tenant}-u{i}"}).json()
                if i % 2 == 0 and body.get("results"):
                    c.post("/v1/feedback", json={"query_id": body["query_id"], "position": 1})


def b_searches(url: str, n: int) -> list[float]:
    ms = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN_B}"}, timeout=60) as c:
        for i in range(n):
            t0 = time.perf_counter()
            r = c.post("/v1/search", json={"query": QUERIES[i % len(QUERIES)], "top_k": 5})
            ms.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
    return ms


def hammer(url: str, stop: threading.Event, calls: list[tuple[int, float]]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN_A}"}, timeout=120) as c:
        i = 0
        while not stop.is_set():
            what = "chart" if i % 2 else "report"
            t0 = time.perf_counter()
            r = c.get(f"/v1/experiments/split/{what}")
            calls.append((r.status_code, (time.perf_counter() - t0) * 1000))
            i += 1


def churn(url: str, stop: threading.Event, count: list[int]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN_A}"}, timeout=60) as c:
        qid = c.post("/v1/search", json={"query": "ReActAgent", "user": "churn"}).json()["query_id"]
        while not stop.is_set():
            c.post("/v1/feedback", json={"query_id": qid, "position": 1})
            count[0] += 1
            time.sleep(0.1)


def phase(url: str, n: int, clients: int, with_churn: bool) -> dict[str, Any]:
    stop = threading.Event()
    calls: list[tuple[int, float]] = []
    churned = [0]
    threads = [threading.Thread(target=hammer, args=(url, stop, calls)) for _ in range(clients)]
    if with_churn:
        threads.append(threading.Thread(target=churn, args=(url, stop, churned)))
    for t in threads:
        t.start()
    time.sleep(1.0 if threads else 0.0)
    try:
        ms = b_searches(url, n)
    finally:
        stop.set()
        for t in threads:
            t.join()
    statuses: dict[str, int] = {}
    for status, _ in calls:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    out: dict[str, Any] = {"b_search_p50_ms": pct(ms, 50), "b_search_p95_ms": pct(ms, 95)}
    if clients:
        out["report_calls"] = statuses
        out["report_call_p50_ms"] = pct([m for _, m in calls], 50)
    if with_churn:
        out["clicks_added"] = churned[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--port", type=int, default=18210)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--impressions", type=int, default=150)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--churn", action="store_true")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    data_dir = args.work / "data"
    data_dir.mkdir(parents=True)
    env = env_of(data_dir, args.port)
    build(data_dir, env)
    url = f"http://127.0.0.1:{args.port}"
    with open(args.work / "service.log", "wb") as log:
        proc = subprocess.Popen([str(BIN), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(url, proc)
        seed(url, args.impressions)
        b_searches(url, 20)  # warm
        result = {
            "alone": phase(url, args.searches, 0, False),
            f"{args.clients}_report_clients": phase(url, args.searches, args.clients, False),
        }
        if args.churn:
            result[f"{args.clients}_report_clients_and_new_clicks"] = phase(
                url, args.searches, args.clients, True
            )
        result["written_under_ab"] = sorted(
            str(p.relative_to(data_dir)) for p in (data_dir / "ab").rglob("*") if p.is_file()
        ) if (data_dir / "ab").exists() else []
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
