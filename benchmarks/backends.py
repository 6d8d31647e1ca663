"""Backend benchmark (not a test): recall and latency of the lexical paths on each store and
lexical backend, and the consistency race through two ``hybridsag serve`` replicas.

    .venv/bin/python benchmarks/backends.py --data /work/shared/data/2wiki
    .venv/bin/python benchmarks/backends.py --data /work/shared/data/cmrc2018 --limit 1000 \
        --backends sqlite,milvus --paths bm25,sag2,title
    .venv/bin/python benchmarks/backends.py --race-ops 2000 [--race-lexical milvus]

Part 1 (``--data``): ``hybridsag eval --paths P --json`` once per backend over the same set, the
dense path off (``embedding.model = none``): ``sqlite`` (FTS5 in the SQLite store),
``postgres`` (the store and its tsvector rows on a fresh PostgreSQL database) and ``milvus``
(the SQLite store with ``lexical.backend = milvus``: Milvus full-text search on Milvus Lite).
It prints R@2/5/10 and the p50/p95 query latency of each path.

Part 2 (``--race-ops N``): a throwaway PostgreSQL and a Milvus Lite server (``milvus-lite
server``), two service processes on them (with ``--race-lexical milvus`` their lexical index is
on that Milvus too), and ``tests/consistency_race.run_race`` over both (4 writers, one search
loop per replica, a reconcile through either replica every 0.5 s), then one reconcile; it
reports the operations, the searches, the visibility violations (searches that returned a
resource deleted before they began) and what the last reconcile's plan still finds.

The PostgreSQL server comes from the machine's binaries (``tests/pgserver.py``). Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.pgserver import new_database, start_postgres  # noqa: E402


def eval_backend(
    data: Path,
    out: Path,
    store_url: str | None,
    *,
    lexical: str = "fts5",
    paths: str = "bm25,title",
    limit: int | None = None,
) -> dict[str, Any]:
    """``hybridsag eval`` over ``data`` with the store on SQLite or at ``store_url`` and the
    lexical index on ``lexical``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["HYBRIDSAG_EMBEDDING__MODEL"] = "none"
    env["HYBRIDSAG_DATA_DIR"] = str(out / "data")
    env["HYBRIDSAG_LEXICAL__BACKEND"] = lexical
    if store_url:
        env["HYBRIDSAG_STORE__URL"] = store_url
    cmd = [str(ROOT / ".venv" / "bin" / "hybridsag"), "eval", "--data", str(data), "--paths",
           paths, "--json", "-q", "--out", str(out / "eval")]
    if limit:
        cmd += ["--limit", str(limit)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    report = json.loads(proc.stdout)
    rows = {}
    for path, figures in report["paths"].items():
        rows[path] = {k: figures.get(k) for k in ("recall@2", "recall@5", "recall@10", "p50_ms", "p95_ms")}
    return {"paths": rows, "index": report.get("index")}


def race(ops: int, base: Path, pg_url: str, lexical: str = "fts5") -> dict[str, Any]:
    from tests.consistency_race import run_race, summarize
    from tests.integration.test_replicas import Replica, _start, _stop
    from tests.milvusliteserver import start_milvus_lite_server

    lite_dir = base / "lite"
    lite_dir.mkdir(parents=True)
    lite, lite_uri = start_milvus_lite_server(lite_dir)
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[Replica] = []
    try:
        for name in ("one", "two"):
            proc, url = _start(base / name / "data", pg_url, lite_uri, "race", lexical=lexical)
            procs.append(proc)
            clients.append(Replica(url))
        turn = iter(range(10**9))

        def reconcile() -> dict[str, Any]:
            return clients[next(turn) % 2].client.reconcile(dry_run=False, force=True)

        result = run_race(None, replicas=clients, reconcile=reconcile, operations=ops,
                          writers=4, reconcile_interval_s=0.5)
        last = clients[0].client.reconcile(dry_run=False, force=True)
        after = clients[1].client.reconcile(dry_run=True)
        return {
            "summary": summarize(result),
            "visibility_violations": len(result.visibility_violations()),
            "search_errors": len(result.search_errors),
            "reconcile_errors": len(result.reconcile_errors),
            "last_reconcile_before": last["counts_before"],
            "plan_after": after["counts_before"] if "counts_before" in after else after,
        }
    finally:
        for client in clients:
            client.close()
        for proc in procs:
            _stop(proc)
        lite.terminate()
        lite.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an eval set (corpus.jsonl, queries.jsonl, qrels.tsv)")
    parser.add_argument("--backends", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres, milvus (lexical on Milvus)")
    parser.add_argument("--paths", default="bm25,title", help="the paths to evaluate")
    parser.add_argument("--limit", type=int, default=None, help="first N questions")
    parser.add_argument("--race-ops", type=int, default=0, help="operations of the replica race")
    parser.add_argument("--race-lexical", default="fts5", choices=("fts5", "milvus"),
                        help="lexical.backend of the race's replicas")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hybridsag-pgbench-"))
    pg_dir = Path(tempfile.mkdtemp(prefix="hybridsag-pgbench-server-"))  # its own: root runs it as postgres
    server = start_postgres(pg_dir)
    out: dict[str, Any] = {}
    try:
        for name in args.backends.split(",") if args.data else ():
            url = new_database(server) if name == "postgres" else None
            lexical = "milvus" if name == "milvus" else "fts5"
            out[name] = eval_backend(args.data, base / name, url, lexical=lexical,
                                     paths=args.paths, limit=args.limit)
        if args.race_ops:
            out["race"] = race(args.race_ops, base / "race", new_database(server),
                               args.race_lexical)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
