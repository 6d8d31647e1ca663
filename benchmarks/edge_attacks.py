"""The attacks of issue 40, rerun at a small scale against ``hybridsag serve`` (not a test).

Each attack runs against a fresh service (the real CLI, a process of its own, lexical only so
that no model loads; tokens: ``a`` and ``b`` write tokens of tenants a and b, ``r`` a read
token of tenant b). Printed, and written to ``<work>/edge_attacks.json``:

- ``bomb``: tenant A uploads through the folder sync (``PUT /v1/sync/files``) a DOCX
  decompression bomb (a few hundred KB unpacking to ``--bomb-mb`` MB; refused by its packing
  ratio) and then a DOCX whose conversion is long (``--slow-paragraphs`` paragraphs of random
  words, which python-docx takes tens of seconds over: the sandbox's wall time and memory
  bound it), while tenant B sends one small write every 0.25 s: B's latencies (p50, max) at
  rest and during A's uploads, A's answers, and the service's peak RSS. Then SIGTERM during a
  slow conversion: seconds until the service exits, against ``server.shutdown_timeout_s``.
- ``manifests``: ``--clients`` clients of A loop ``--manifest-files``-entry manifests
  (``POST /v1/sync``) for ``--duration`` s while B writes: B's p50 and max.
- ``trickle``: ``--connections`` connections declaring ``Content-Length: 60000`` and sending 2
  bytes every 3 s: without a token (how many are still open after 10 s and 30 s), and with a
  valid one (how many after their deadline, ``body_timeout_s`` + 60000 / min_body_bytes_per_s).
- ``bodies``: ``--bodies`` concurrent 10 MiB search bodies from the read token: how many were
  refused (429: ``server.max_body_memory_bytes``) and the service's peak RSS above its rest.

    python benchmarks/edge_attacks.py --work /tmp/edge-attacks [--only bomb,manifests,trickle,bodies]

``--bin``: the ``hybridsag`` command to run (default: this venv's), e.g. a launcher of the code
before a change (see ``benchmarks/service_workers.py`` for how to make one), for a before row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.docxsupport import bomb_docx, slow_docx  # noqa: E402

BIN = Path(sys.executable).parent / "hybridsag"
ADMIN = "edge-bench-admin-token-0123456789"
TOKENS = {
    "a": "edge-bench-a-write-token-0123456789",
    "b": "edge-bench-b-write-token-0123456789",
    "r": "edge-bench-b-read-token-0123456789",
}
TOKEN_SETTINGS = [
    {"token": TOKENS["a"], "role": "write", "tenant": "a", "name": "a"},
    {"token": TOKENS["b"], "role": "write", "tenant": "b", "name": "b"},
    {"token": TOKENS["r"], "role": "read", "tenant": "b", "name": "r"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """``hybridsag serve`` on a fresh data dir."""

    def __init__(self, work: Path, name: str, binary: Path, **env: str) -> None:
        self.data = work / name / "data"
        shutil.rmtree(self.data.parent, ignore_errors=True)
        self.data.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
        base.update(
            HYBRIDSAG_DATA_DIR=str(self.data), HYBRIDSAG_SERVER__PORT=str(self.port),
            HYBRIDSAG_SERVER__TOKEN=ADMIN, HYBRIDSAG_SERVER__TOKENS=json.dumps(TOKEN_SETTINGS),
            HYBRIDSAG_SERVER__RECONCILER="false", HYBRIDSAG_EMBEDDING__MODEL="none", **env,
        )  # fmt: skip
        log = open(self.data.parent / "serve.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen([str(binary), "serve"], env=base, stdout=log, stderr=log)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}: {self.data.parent}/serve.log")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the service did not get ready")
            time.sleep(0.1)

    def client(self, who: str, timeout: float = 300) -> httpx.Client:
        token = ADMIN if who == "admin" else TOKENS[who]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def rss_mb(self) -> tuple[float, float]:
        """(current, peak) resident memory of the service process and its children, MB."""
        now = peak = 0.0
        for pid in [self.proc.pid, *children(self.proc.pid)]:
            try:
                fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            except (OSError, ValueError):
                continue
            now += int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
            peak += int(fields.get("VmHWM", "0 kB").split()[0]) / 1024
        return round(now, 1), round(peak, 1)

    def stop(self) -> float:
        """SIGTERM; seconds until the process exits."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return round(time.monotonic() - t0, 1)


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out + [g for c in out for g in children(c)]


class Writes:
    """Tenant B's single writes, one every ``every_s``, in a thread: their latencies (ms)."""

    def __init__(self, service: Service, every_s: float = 0.25) -> None:
        self.service, self.every_s = service, every_s
        self.ms: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with self.service.client("b", timeout=600) as c:
            n = 0
            while not self.stop.is_set():
                n += 1
                t0 = time.perf_counter()
                r = c.post("/v1/resources", json=[{"_id": f"b/{n}", "text": f"B's write {n}"}])
                self.ms.append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    self.errors.append(f"{r.status_code}: {r.text[:200]}")
                self.stop.wait(self.every_s)

    def finish(self) -> dict[str, Any]:
        self.stop.set()
        self.thread.join(600)
        return summary(self.ms) | {"errors": self.errors[:5], "failed": len(self.errors)}


def summary(ms: list[float]) -> dict[str, Any]:
    if not ms:
        return {"n": 0}
    ordered = sorted(ms)
    return {
        "n": len(ms), "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "max_ms": round(max(ms), 1), "over_1s": sum(1 for x in ms if x > 1000),
    }  # fmt: skip


def at_rest(service: Service, seconds: float = 10.0) -> dict[str, Any]:
    w = Writes(service)
    time.sleep(seconds)
    return w.finish()


# -- bomb ---------------------------------------------------------------------------------------


def upload(service: Service, name: str, data: bytes) -> dict[str, Any]:
    params = {"root": "/srv/a", "path": name, "sha256": hashlib.sha256(data).hexdigest()}
    t0 = time.perf_counter()
    with service.client("a", timeout=900) as c:
        try:
            r = c.put("/v1/sync/files", params=params, content=data,
                      headers={"Content-Type": "application/octet-stream"})  # fmt: skip
            answer = {"status": r.status_code, "errors": (r.json().get("errors") if r.status_code == 200 else r.text[:300])}
        except httpx.HTTPError as exc:
            answer = {"status": None, "errors": repr(exc)}
    return {"bytes": len(data), "seconds": round(time.perf_counter() - t0, 1), **answer}


def attack_bomb(work: Path, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(work, "bomb", binary, HYBRIDSAG_SERVER__SHUTDOWN_TIMEOUT_S=str(args.shutdown_s))
    out: dict[str, Any] = {"rss_mb_at_rest": service.rss_mb()[0], "b_at_rest": at_rest(service)}
    bomb, slow = bomb_docx(args.bomb_mb), slow_docx(args.slow_paragraphs)
    out["bomb_unpacked_mb"] = args.bomb_mb
    for name, data in (("bomb.docx", bomb), ("slow.docx", slow)):
        w = Writes(service)
        a = upload(service, name, data)
        out[name] = {"a": a, "b_during": w.finish(), "rss_mb_peak": service.rss_mb()[1]}
    # SIGTERM while a slow conversion runs
    answered: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: answered.append(upload(service, "slow2.docx", slow_docx(args.slow_paragraphs + 1))))
    t.start()
    time.sleep(3)
    out["sigterm_during_conversion"] = {"exit_s": service.stop(), "shutdown_timeout_s": args.shutdown_s}
    t.join(600)
    out["sigterm_during_conversion"]["a"] = answered[0] if answered else None
    return out


# -- manifests ----------------------------------------------------------------------------------


def attack_manifests(work: Path, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(work, "manifests", binary)
    out: dict[str, Any] = {"b_at_rest": at_rest(service)}
    manifest = {
        "root": "/srv/a",
        "files": [
            {"path": f"d{i // 1000}/f{i}.md", "size": 100 + i, "mtime_ns": 1, "sha256": hashlib.sha256(b"%d" % i).hexdigest()}
            for i in range(args.manifest_files)
        ],
    }
    body = json.dumps(manifest).encode()
    stop = threading.Event()
    done: list[float] = []

    def loop() -> None:
        with service.client("a", timeout=600) as c:
            while not stop.is_set():
                t0 = time.perf_counter()
                r = c.post("/v1/sync", content=body, headers={"Content-Type": "application/json"})
                if r.status_code == 200:
                    done.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(2)
    w = Writes(service)
    time.sleep(args.duration)
    out["b_during"] = w.finish()
    stop.set()
    for t in threads:
        t.join(600)
    out["manifests"] = {"answered": len(done), "bytes": len(body), "files": args.manifest_files,
                        "clients": args.clients, "p50_s": round(statistics.median(done), 2) if done else None}  # fmt: skip
    service.stop()
    return out


# -- trickle ------------------------------------------------------------------------------------


def trickle(service: Service, n: int, token: str | None, watch_s: list[float]) -> dict[str, int]:
    head = ["POST /v1/search HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            "Content-Length: 60000"]  # fmt: skip
    if token:
        head.append(f"Authorization: Bearer {token}")
    raw = ("\r\n".join(head) + "\r\n\r\n").encode()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", service.port))
        s.sendall(raw)
        s.setblocking(False)
        socks.append(s)
    open_ = set(range(n))
    t0 = time.monotonic()
    counts: dict[str, int] = {}
    next_send = t0
    for mark in sorted(watch_s):
        while time.monotonic() - t0 < mark:
            if time.monotonic() >= next_send:
                for i in list(open_):
                    try:
                        socks[i].send(b"  ")
                    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                        pass
                next_send = time.monotonic() + 3.0
            for i in list(open_):
                try:
                    if socks[i].recv(65536) == b"":
                        open_.discard(i)
                except BlockingIOError:
                    pass
                except (ConnectionResetError, BrokenPipeError):
                    open_.discard(i)
            time.sleep(0.05)
        counts[f"open_after_{mark:g}s"] = len(open_)
    for s in socks:
        s.close()
    return counts


def attack_trickle(work: Path, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(work, "trickle", binary)
    out = {
        "connections": args.connections,
        "no_token": trickle(service, args.connections, None, [10, 30]),
        "valid_token": trickle(service, min(args.connections, 50), ADMIN, [10, 40]),
    }
    service.stop()
    return out


# -- bodies -------------------------------------------------------------------------------------


def attack_bodies(work: Path, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    service = Service(work, "bodies", binary)
    rest = service.rss_mb()[0]
    ids = [f"id-{i:08d}-" + "x" * 900 for i in range(10_000)]
    body = json.dumps({"query": "x", "filters": {"resource_ids": ids}}).encode()
    statuses: list[int] = []

    def send() -> None:
        with service.client("r", timeout=600) as c:
            r = c.post("/v1/search", content=body, headers={"Content-Type": "application/json"})
            statuses.append(r.status_code)

    threads = [threading.Thread(target=send) for _ in range(args.bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    out = {"bodies": args.bodies, "body_mb": round(len(body) / 2**20, 2), "statuses": sorted(statuses),
           "rss_mb_at_rest": rest, "rss_mb_peak": service.rss_mb()[1]}  # fmt: skip
    service.stop()
    return out


ATTACKS = {"bomb": attack_bomb, "manifests": attack_manifests, "trickle": attack_trickle, "bodies": attack_bodies}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--bin", type=Path, default=BIN)
    p.add_argument("--only", default=",".join(ATTACKS))
    p.add_argument("--bomb-mb", type=int, default=60)
    p.add_argument("--slow-paragraphs", type=int, default=2000)
    p.add_argument("--shutdown-s", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--manifest-files", type=int, default=50_000)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--bodies", type=int, default=6)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"bin": str(args.bin), "loadavg_before": os.getloadavg()}
    for name in args.only.split(","):
        print(f"== {name}", flush=True)
        results[name] = ATTACKS[name](args.work, args.bin, args)
        print(json.dumps(results[name], indent=1), flush=True)
    results["loadavg_after"] = os.getloadavg()
    (args.work / "edge_attacks.json").write_text(json.dumps(results, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()
