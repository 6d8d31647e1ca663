"""Load, consistency and crash benchmark of the HTTP service (not a test).

Mixed traffic (90% search, 8% ingest, 2% delete) from an httpx async driver at 1, 8 and 32
concurrent clients against a 2wiki index served by ``hybridsag serve``; per phase: throughput,
p50/p95/p99 per operation, each retrieval path's server-side p50/p95, 429s, errors and the
server's memory. Then a reconcile (orphans must be 0) and the check that no search returned a
resource whose delete had been acknowledged before the search began. Then SIGKILL in the middle
of 8-client load and a restart (time to ready), ``--crashes`` times (2); then the reconciler's
plan of what the crashes left, its apply, a second plan (it must be clean), and the check that
every acknowledged ingest is there and every acknowledged delete is gone.
Last, a CLI search through the warm service against a cold in-process CLI search.

    python benchmarks/service_load.py --work /tmp/service-bench [--duration 30]

Writes ``<work>/service_load.json`` (``--out``) and prints it. ``--server-env`` passes settings to
the service (e.g. tighter ``server.search_concurrency``/``search_queue``); ``--phases-only``
skips the crash and CLI parts. Deterministic traffic
(seeded); timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "hybridsag"
TOKEN = "bench-admin-token-0123456789"
ORPHANS = ("orphan_vectors", "orphan_chunks", "orphan_fts_rows", "tombstoned_leftovers", "stale_versions")


def build_base(base: Path, src: Path) -> float | None:
    """Index ``src/corpus.jsonl`` into the data dir ``base`` unless it holds an index already;
    the seconds the build took, or None when there was nothing to build."""
    if (base / "hybridsag.sqlite3").exists():
        return None
    t0 = time.monotonic()
    subprocess.run(
        [str(BIN), "--data-dir", str(base), "index", "--jsonl", str(src / "corpus.jsonl"), "-q"],
        check=True,
    )
    return round(time.monotonic() - t0, 1)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 2)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 2)


def rss_mb(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


@dataclass
class Log:
    """What the clients saw: latencies per op, statuses, acknowledged writes, search results."""

    ms: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "ingest": [], "delete": []})
    path_ms: dict[str, list[float]] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    acked_ingest: dict[str, float] = field(default_factory=dict)
    acked_delete: dict[str, float] = field(default_factory=dict)
    searches: list[tuple[float, list[str]]] = field(default_factory=list)
    done: int = 0


class Traffic:
    def __init__(self, corpus: list[dict[str, Any]], queries: list[str], gold: list[str], seed: int):
        self.corpus, self.queries, self.rng = corpus, queries, random.Random(seed)
        self.delete_pool = list(gold)
        self.rng.shuffle(self.delete_pool)
        self.n = 0

    def next(self, client: int) -> tuple[str, Any]:
        roll = self.rng.random()
        if roll < 0.90:
            return "search", self.rng.choice(self.queries)
        if roll < 0.98 or not self.delete_pool:
            self.n += 1
            doc = self.rng.choice(self.corpus)
            return "ingest", {"_id": f"bench/{client}/{self.n}", "title": doc["title"], "text": doc["text"]}
        return "delete", self.delete_pool.pop()


async def client_loop(i: int, http: httpx.AsyncClient, traffic: Traffic, log: Log, stop: float) -> None:
    while time.monotonic() < stop:
        op, arg = traffic.next(i)
        t0 = time.monotonic()
        try:
            if op == "search":
                r = await http.post("/v1/search", json={"query": arg, "top_k": 10})
            elif op == "ingest":
                r = await http.post("/v1/resources", json=[arg])
            else:
                r = await http.delete(f"/v1/resources/{arg}")
        except httpx.HTTPError as exc:
            log.errors.append(f"{op}: {type(exc).__name__}")
            if isinstance(exc, httpx.ConnectError):
                return
            continue
        t1 = time.monotonic()
        key = f"{op} {r.status_code}"
        log.status[key] = log.status.get(key, 0) + 1
        if r.status_code == 429:
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
            continue
        if r.status_code >= 500:
            log.errors.append(f"{op}: HTTP {r.status_code}")
            continue
        log.ms[op].append((t1 - t0) * 1000)
        log.done += 1
        if op == "search" and r.status_code == 200:
            body = r.json()
            log.searches.append((t0, [x["resource_id"] for x in body["results"]]))
            for key_ms, v in body["timings"].items():
                if key_ms.endswith("_ms") and key_ms not in ("total_ms", "fusion_ms"):
                    log.path_ms.setdefault(key_ms[:-3], []).append(v)
        elif op == "ingest" and r.status_code == 200:
            log.acked_ingest[arg["_id"]] = t1
            log.acked_delete.pop(arg["_id"], None)
        elif op == "delete" and r.status_code == 200:
            log.acked_delete[arg] = t1


async def load(url: str, clients: int, seconds: float, traffic: Traffic, log: Log) -> float:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120, limits=limits
    ) as http:
        t0 = time.monotonic()
        stop = t0 + seconds
        await asyncio.gather(*(client_loop(i, http, traffic, log, stop) for i in range(clients)))
        return time.monotonic() - t0


def stale_hits(log: Log) -> int:
    """Searches that returned a resource whose delete was acknowledged before they began."""
    bad = 0
    for started, ids in log.searches:
        bad += sum(1 for rid in ids if rid in log.acked_delete and log.acked_delete[rid] < started)
    return bad


class Service:
    def __init__(self, data: Path, port: int, extra_env: dict[str, str]) -> None:
        self.data, self.port, self.url = data, port, f"http://127.0.0.1:{port}"
        self.extra_env = extra_env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
        env.update(
            HYBRIDSAG_DATA_DIR=str(self.data),
            HYBRIDSAG_SERVER__TOKEN=TOKEN,
            HYBRIDSAG_SERVER__PORT=str(self.port),
            HYBRIDSAG_SERVER__RECONCILER="false",
        )
        env.update(self.extra_env)
        t0 = time.monotonic()
        log = open(self.data.parent / "serve.log", "ab")  # noqa: SIM115 - kept for the process
        self.proc = subprocess.Popen([str(BIN), "serve"], env=env, stdout=log, stderr=log)
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}; see serve.log")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(120)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        r = httpx.request(
            method, f"{self.url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=600, **kw
        )
        return r.status_code, r.json()


def timed_cli(args: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        subprocess.run([str(BIN), *args], env=env, check=True, stdout=subprocess.DEVNULL)
        times.append((time.monotonic() - t0) * 1000)
    return round(statistics.median(times), 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/shared/data/2wiki", help="BEIR folder (corpus, queries, qrels)")
    ap.add_argument("--work", default="/tmp/service-bench", help="work dir (index kept between runs)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds per load phase")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument(
        "--server-env", action="append", default=[], metavar="KEY=VALUE",
        help="a setting for the service, e.g. HYBRIDSAG_SERVER__SEARCH_CONCURRENCY=2 (repeat)",
    )
    ap.add_argument("--phases-only", action="store_true", help="skip the crash and CLI parts")
    ap.add_argument("--crashes", type=int, default=2, help="SIGKILLs under 8-client load, each restarted")
    ap.add_argument("--out", default="service_load.json", help="result file name in --work")
    args = ap.parse_args()
    extra_env = dict(pair.split("=", 1) for pair in args.server_env)
    src, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base"
    data = work / "data"
    results: dict[str, Any] = {
        "corpus": str(src), "duration_s": args.duration, "server_env": extra_env
    }
    built = build_base(base, src)
    if built is not None:
        results["index_build_s"] = built
    subprocess.run(["rm", "-rf", str(data)], check=True)
    subprocess.run(["cp", "-a", str(base), str(data)], check=True)

    corpus = [json.loads(x) for x in (src / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = [json.loads(x)["text"] for x in (src / "queries.jsonl").read_text().splitlines() if x.strip()]
    gold = sorted({line.split("\t")[1] for line in (src / "qrels.tsv").read_text().splitlines()[1:]})
    traffic = Traffic(corpus, queries, gold, args.seed)

    svc = Service(data, args.port, extra_env)
    results["cold_start_to_ready_s"] = round(svc.start(), 2)
    assert svc.proc is not None
    results["rss_idle_mb"] = rss_mb(svc.proc.pid)
    all_logs: list[Log] = []
    phases = []
    for clients in [int(c) for c in args.clients.split(",")]:
        log = Log()
        wall = asyncio.run(load(svc.url, clients, args.duration, traffic, log))
        all_logs.append(log)
        phases.append(
            {
                "clients": clients,
                "ops_per_s": round(log.done / wall, 1),
                "searches_per_s": round(len(log.ms["search"]) / wall, 1),
                "latency_ms": {
                    op: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95), "p99": pct(v, 99)}
                    for op, v in log.ms.items()
                },
                "path_ms": {p: {"p50": pct(v, 50), "p95": pct(v, 95)} for p, v in sorted(log.path_ms.items())},
                "status": dict(sorted(log.status.items())),
                "errors": len(log.errors),
                "error_kinds": sorted(set(log.errors))[:10],
                "stale_hits": stale_hits(log),
                "rss_mb": rss_mb(svc.proc.pid),
            }
        )
        print(json.dumps(phases[-1]), flush=True)
    results["phases"] = phases
    _, plan = svc.call("POST", "/v1/reconcile", json={})
    results["after_load_plan"] = plan["counts_before"]
    results["after_load_orphans"] = sum(plan["counts_before"].get(k, 0) for k in ORPHANS)

    if args.phases_only:
        svc.stop()
        (work / args.out).write_text(json.dumps(results, indent=2))
        print(json.dumps(results, indent=2))
        return 0

    # CLI latency: a warm client search through the service
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env_client = {**env, "HYBRIDSAG_SERVER__URL": svc.url, "HYBRIDSAG_SERVER__CLIENT_TOKEN": TOKEN}
    q = queries[0]
    results["cli_warm_client_search_ms"] = timed_cli(["search", q, "-k", "5"], env_client, 7)

    # SIGKILL in the middle of 8-client load, then restart (--crashes times), then check
    crashes = []
    crash_logs: list[Log] = []
    for _ in range(args.crashes):
        crash_log = Log()
        crash_logs.append(crash_log)

        async def crash() -> None:
            task = asyncio.ensure_future(load(svc.url, 8, args.duration, traffic, crash_log))
            await asyncio.sleep(args.duration / 2)
            assert svc.proc is not None
            svc.proc.send_signal(signal.SIGKILL)
            await task

        asyncio.run(crash())
        svc.proc.wait(60)
        crashes.append(
            {
                "acked_ingests": len(crash_log.acked_ingest),
                "acked_deletes": len(crash_log.acked_delete),
                "stale_hits": stale_hits(crash_log),
                "restart_to_ready_s": round(svc.start(), 2),
            }
        )
    _, plan = svc.call("POST", "/v1/reconcile", json={})
    results["crash"] = {"runs": crashes, "plan_after_restarts": plan["counts_before"]}
    _, applied = svc.call("POST", "/v1/reconcile", json={"apply": True, "force": True})
    results["crash"]["after_apply"] = applied["counts_after"]
    _, again = svc.call("POST", "/v1/reconcile", json={})
    results["crash"]["plan_after_apply"] = again["counts_before"]
    acked_in = {rid for lg in [*all_logs, *crash_logs] for rid in lg.acked_ingest}
    acked_del = {rid for lg in [*all_logs, *crash_logs] for rid in lg.acked_delete}
    lost = [rid for rid in sorted(acked_in - acked_del) if svc.call("GET", f"/v1/resources/{rid}")[0] != 200]
    back = [rid for rid in sorted(acked_del) if svc.call("GET", f"/v1/resources/{rid}")[0] != 404]
    results["crash"]["acked_ingests_lost"] = len(lost)
    results["crash"]["acked_deletes_back"] = len(back)
    results["crash"]["checked"] = {"ingests": len(acked_in - acked_del), "deletes": len(acked_del)}
    results["rss_end_mb"] = rss_mb(svc.proc.pid)
    svc.stop()

    # the cold CLI: every call imports torch and loads the model
    results["cli_cold_search_ms"] = timed_cli(["--data-dir", str(data), "search", q, "-k", "5"], env, 3)
    out = work / args.out
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
