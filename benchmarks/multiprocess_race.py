"""Multi-process race at many operations (not a test): the long run of
tests/integration/test_multiprocess_race.py.

    .venv/bin/python benchmarks/multiprocess_race.py [--writers 2] [--ops 1000] [--seed 7]

``--writers`` writer processes (``--ops`` ingests and deletes each) and one searcher process
start at the same instant on a new data dir whose vectors live on one ``milvus-lite server``
(``tests/multiprocess_race.run_process_race``); then one reconcile in this process. Prints one
JSON object: the race's summary (operations by kind, searches, failed operations and searches,
stale results, seconds), the last reconcile's counts and the orphans an independent check
(``tests/consistency_support.check_consistent``) still finds (must be 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hybridsag.consistency import Reconciler  # noqa: E402
from hybridsag.search import HybridSearch  # noqa: E402
from hybridsag.settings import MilvusSettings  # noqa: E402

from tests.consistency_support import (  # noqa: E402
    check_consistent,
    clear_env,
    make_settings,
    shared_embedder,
)
from tests.liteserver import start_lite_server  # noqa: E402
from tests.multiprocess_race import run_process_race  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=2)
    ap.add_argument("--ops", type=int, default=1000, help="operations per writer process")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--work", type=Path, help="work folder (default: a new temp folder)")
    args = ap.parse_args(argv)
    clear_env()
    work = args.work or Path(tempfile.mkdtemp(prefix="mprace-"))
    server = start_lite_server(work / "milvus")
    out: dict[str, Any] = {"work_dir": str(work), "writers": args.writers, "ops": args.ops}
    try:
        data_dir = work / "data"
        result = run_process_race(data_dir, server.uri, work / "race", writers=args.writers,
                                  ops=args.ops, seed=args.seed, timeout_s=3600.0)
        out["race"] = result.summary()
        settings = make_settings(data_dir).model_copy(
            update={"milvus": MilvusSettings(uri=server.uri)}
        )
        with HybridSearch(settings, embedder=shared_embedder()) as hs:
            report = Reconciler(hs.components).run(force=True)
            out["reconcile_ok"] = report["ok"]
            out["reconcile_counts_before"] = report["counts_before"]
            out["reconcile_counts_after"] = report["counts_after"]
            problems = check_consistent(hs)
            out["orphans_after_reconcile"] = len(problems)
            out["orphan_examples"] = problems[:5]
    finally:
        server.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
