"""A live index under a running service (not a test): edit-to-searchable latency of a watched
folder, the watcher's idle CPU, and the cost of syncing an unchanged folder.

Builds a folder of ``--files`` Markdown files (2wiki passages from ``/work/shared/data``, or any
BEIR ``corpus.jsonl`` given with ``--corpus``: ``# title`` and the text, 30 files a folder) and
serves it with ``hybridsag serve --watch DIR`` (a process of its own; the embedded default,
Milvus Lite and the packaged model, unless ``--lexical``). Once the first index is done:

- **single edits**: ``--edits`` times, one file gets a new sentence with a word found nowhere
  else; the time from the write to the first search (bm25, top 1) that answers that file;
- **a burst**: ``--burst`` files rewritten at once (a ``git checkout``), each with a word of its
  own; per file, the time from its write to the search answering it, for a random sample of 8
  (4 threads polling 2 each); the time until the service has applied every change (its events
  counted and its queue empty: every file is then checked to answer); and the service's own lag
  histogram (``hybridsag_watch_lag_seconds``, event seen to committed) over the burst;
- **idle CPU**: the service process's CPU seconds (user + system, ``/proc/PID/stat``) over
  ``--idle-s`` seconds of nothing happening, and with ``--baseline`` the same for a service of
  the same index without ``--watch``;
- **an unchanged folder synced** (``ServiceClient.sync_folder``, what ``hybridsag --server URL
  index DIR`` calls): its requests and bytes sent, the uploads the service counted, the time.

Prints one JSON object (also written to ``--out``).

    python benchmarks/live_index.py --work /tmp/live-index [--lexical] [--port 18810]

Timings depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from hybridsag.client import ServiceClient

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "bench-admin-token-0123456789"
DEFAULT_CORPUS = Path("/work/shared/data/2wiki/corpus.jsonl")


def pct(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return round(values[0], 3) if values else None
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


def build_folder(folder: Path, corpus: Path, n: int) -> list[str]:
    """``n`` Markdown files of the corpus' passages; their paths relative to ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)
    rels = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            if not doc.get("title") or not doc.get("text"):
                continue
            i = len(rels)
            rel = f"part{i // 30:02d}/doc-{i:04d}.md"
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {doc['title']}\n\n{doc['text']}\n", encoding="utf-8")
            rels.append(rel)
            if len(rels) == n:
                break
    return rels


def start(data_dir: Path, port: int, lexical: bool, watch: Path | None, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env.update(
        HYBRIDSAG_DATA_DIR=str(data_dir),
        HYBRIDSAG_SERVER__PORT=str(port),
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_SERVER__RECONCILER="false",
        HYBRIDSAG_SERVER__READY_CACHE_S="0",
    )
    if lexical:
        env["HYBRIDSAG_EMBEDDING__MODEL"] = "none"
    args = [sys.executable, "-m", "hybridsag.cli", "serve"]
    if watch is not None:
        args += ["--watch", str(watch)]
    with log.open("wb") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_for(probe: Any, what: str, bound_s: float = 1800.0, every_s: float = 0.02) -> float:
    """Poll ``probe()`` until true; the seconds it took."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < bound_s:
        if probe():
            return time.perf_counter() - t0
        time.sleep(every_s)
    raise SystemExit(f"{what}: not within {bound_s} s")


def ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise SystemExit(f"the service exited with {proc.returncode}")
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(url: str) -> dict[str, Any]:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    out: dict[str, Any] = {"lag_buckets": {}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "hybridsag_watch_lag_seconds_bucket":
                out["lag_buckets"][float(s.labels["le"])] = s.value
            elif s.name == "hybridsag_http_requests_total" and s.labels.get("endpoint") == "/v1/sync/files":
                out["puts"] = out.get("puts", 0) + s.value
            elif s.name in ("hybridsag_watch_events_total", "hybridsag_watch_batches_total"):
                out[s.name] = out.get(s.name, 0) + s.value
            elif s.name == "hybridsag_watch_queue":
                out["queue"] = s.value
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The ``q`` quantile of the observations between two scrapes of a histogram, read as
    Prometheus' histogram_quantile does (linear within a bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    if not total:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return round(lower + (bound - lower) * (rank - below) / max(count - below, 1e-9), 3)
        lower, below = bound, count
    return None


def found(c: ServiceClient, word: str, rel: str) -> bool:
    results = c.search(word, top_k=1, paths=["bm25"], explain=False)["results"]
    return bool(results) and results[0]["resource_id"] == rel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="a scratch folder (emptied)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--files", type=int, default=600)
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--baseline", action="store_true", help="also measure a service without --watch idle")
    ap.add_argument("--lexical", action="store_true", help="embedding.model = none (no dense path)")
    ap.add_argument("--port", type=int, default=18810)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    folder = args.work / "docs"
    rels = build_folder(folder, args.corpus, args.files)
    url = f"http://127.0.0.1:{args.port}"
    rng = random.Random(24)
    result: dict[str, Any] = {
        "files": len(rels),
        "bytes": sum((folder / r).stat().st_size for r in rels),
        "embedding": "none" if args.lexical else "default",
    }
    t0 = time.perf_counter()
    proc = start(args.work / "data", args.port, args.lexical, folder, args.work / "serve.log")
    try:
        wait_for(lambda: ready(url, proc), "ready", every_s=0.2)
        with ServiceClient(url, token=ADMIN, timeout=600) as c:
            def first_index_done() -> bool:
                checks = c.ready()["checks"]
                return "first index" not in checks["sources"] and checks["store"].startswith(f"ok: {len(rels)} resources")

            wait_for(first_index_done, "the first index", every_s=0.2)
            result["first_index_s"] = round(time.perf_counter() - t0, 2)

            singles = []
            for k in range(args.edits):
                rel = rng.choice(rels)
                word = f"liveedit{k}q{rng.randrange(10**6)}"
                with (folder / rel).open("a", encoding="utf-8") as fh:
                    fh.write(f"\nThe {word} marker was added.\n")
                written = time.perf_counter()
                wait_for(lambda: found(c, word, rel), f"edit {k}")
                singles.append(time.perf_counter() - written)
            result["single_edit_s"] = {"p50": pct(singles, 50), "p95": pct(singles, 95), "n": len(singles)}

            before = metrics(url)
            chosen = rng.sample(rels, min(args.burst, len(rels)))
            words: dict[str, str] = {}
            written_at: dict[str, float] = {}
            burst_start = time.perf_counter()
            for i, rel in enumerate(chosen):
                word = f"burstword{i}q{rng.randrange(10**6)}"
                text = (folder / rel).read_text(encoding="utf-8")
                (folder / rel).write_text(text + f"\nBranch two adds {word} here.\n", encoding="utf-8")
                words[rel] = word
                written_at[rel] = time.perf_counter()
            result["burst_write_s"] = round(time.perf_counter() - burst_start, 3)
            sample = rng.sample(chosen, min(8, len(chosen)))
            latency: dict[str, float] = {}

            def follow(rels_: list[str]) -> None:
                # each thread polls its own files in turn, so a file is seen within a few
                # searches of becoming searchable
                with ServiceClient(url, token=ADMIN, timeout=600) as own:
                    todo = list(rels_)
                    while todo:
                        for rel in list(todo):
                            if found(own, words[rel], rel):
                                latency[rel] = time.perf_counter() - written_at[rel]
                                todo.remove(rel)

            threads = [
                threading.Thread(target=follow, args=(sample[i::4],)) for i in range(min(4, len(sample)))
            ]
            for th in threads:
                th.start()

            def drained() -> bool:
                m = metrics(url)
                seen = m["hybridsag_watch_events_total"] - before["hybridsag_watch_events_total"]
                return seen >= len(chosen) and m["queue"] == 0

            wait_for(drained, "the burst applied")
            all_done = time.perf_counter() - burst_start
            for th in threads:
                th.join()
            missing = [rel for rel in chosen if not found(c, words[rel], rel)]  # checked after
            result["burst"] = {
                "files": len(chosen),
                "sample_p50_s": pct(list(latency.values()), 50),
                "sample_p95_s": pct(list(latency.values()), 95),
                "sample": len(latency),
                "all_applied_s": round(all_done, 3),
                "not_searchable_after": len(missing),
            }
            after = metrics(url)
            result["burst"]["server_lag_p50_s"] = bucket_quantile(before["lag_buckets"], after["lag_buckets"], 0.5)
            result["burst"]["server_lag_p95_s"] = bucket_quantile(before["lag_buckets"], after["lag_buckets"], 0.95)
            result["burst"]["batches"] = after["hybridsag_watch_batches_total"] - before["hybridsag_watch_batches_total"]

            time.sleep(2)  # let the last batch's log lines and metrics settle
            cpu0, w0 = cpu_seconds(proc.pid), time.perf_counter()
            time.sleep(args.idle_s)
            cpu1, w1 = cpu_seconds(proc.pid), time.perf_counter()
            result["idle_watched"] = {"cpu_s": round(cpu1 - cpu0, 3), "wall_s": round(w1 - w0, 1)}

            puts = metrics(url).get("puts", 0)
            t = time.perf_counter()
            report = c.sync_folder(folder)
            result["unchanged_sync"] = {
                **report["sync"],
                "seconds": round(time.perf_counter() - t, 3),
                "uploads_counted_by_the_service": metrics(url).get("puts", 0) - puts,
                "unchanged": report["unchanged"],
                "indexed": report["indexed"],
                "pruned": len(report["pruned"]),
            }
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    if args.baseline:
        base = start(args.work / "data", args.port, args.lexical, None, args.work / "serve-baseline.log")
        try:
            wait_for(lambda: ready(url, base), "baseline ready", every_s=0.2)
            time.sleep(2)
            cpu0, w0 = cpu_seconds(base.pid), time.perf_counter()
            time.sleep(args.idle_s)
            cpu1, w1 = cpu_seconds(base.pid), time.perf_counter()
            result["idle_unwatched"] = {"cpu_s": round(cpu1 - cpu0, 3), "wall_s": round(w1 - w0, 1)}
        finally:
            base.terminate()
            base.wait(timeout=120)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
