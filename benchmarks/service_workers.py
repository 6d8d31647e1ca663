"""The HTTP service with one worker process against ``--workers N``, on the same 2wiki index, in one run (not a test).

For each worker count (1, then ``--workers``): a fresh copy of one 2wiki index (the default
settings: SAG2, dense on Milvus Lite, title; fused), ``hybridsag serve --workers W``, then the
mixed traffic of :mod:`benchmarks.service_load` (90% fused search, 8% ingest, 2% delete; seeded)
from 1 client and from 8 clients for ``--duration`` seconds each. Printed per worker count:
ops/s at 8 clients, search p50 at 1 client, search p95 at 8 clients and their ratio
(p95(8 clients) / p50(1 client)), and searches that returned a resource whose delete had been
acknowledged before they began (must be 0); then the ops/s ratio of N workers against 1 and the
load average of the machine before and after (it is shared: say so beside the numbers).

    python benchmarks/service_workers.py --work /tmp/service-workers [--workers 2] [--duration 20] \
        [--before-bin PATH]

``--before-bin``: a ``hybridsag`` command of the code before a change (a launcher of another
tree), measured first with one worker, so that one run holds the row's before and after; the
last line then compares the last run (N workers) with that one. Writes
``<work>/service_workers.json``. The launcher used for docs/benchmarks.md: ``git archive
<commit> | tar -x -C /tmp/main-src``, then an executable file (``#!`` this venv's python) that
points the editable install's finder at that tree before it imports the CLI::

    import sys
    import __editable___hybridsag_0_1_0_finder as finder
    finder.MAPPING.update({k: v.replace("/work/wt-workers", "/tmp/main-src")
                           for k, v in finder.MAPPING.items()})
    from hybridsag.cli import main
    sys.exit(main())
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import service_load  # noqa: E402
from service_load import (  # noqa: E402
    BIN,
    Log,
    Service,
    Traffic,
    build_base,
    load,
    pct,
    rss_mb,
    stale_hits,
)


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/shared/data/2wiki", help="BEIR folder (corpus, queries, qrels)")
    ap.add_argument("--work", default="/tmp/service-workers", help="work dir (index kept between runs)")
    ap.add_argument("--workers", type=int, default=2, help="the worker count set against 1")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per load phase")
    ap.add_argument("--clients", type=int, default=8, help="the loaded phase's clients")
    ap.add_argument("--port", type=int, default=8793)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--base", help="an index to copy (default: <work>/base, built when missing)")
    ap.add_argument(
        "--before-bin",
        help="a hybridsag command of the code before (e.g. a launcher of main's tree): measured "
        "first, with 1 worker, as the row's 'before'",
    )
    args = ap.parse_args()
    src, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = Path(args.base) if args.base else work / "base"
    results: dict[str, Any] = {"corpus": str(src), "duration_s": args.duration, "runs": []}
    built = build_base(base, src)
    if built is not None:
        results["index_build_s"] = built
    corpus = [json.loads(x) for x in (src / "corpus.jsonl").read_text().splitlines() if x.strip()]
    queries = [json.loads(x)["text"] for x in (src / "queries.jsonl").read_text().splitlines() if x.strip()]
    gold = sorted({line.split("\t")[1] for line in (src / "qrels.tsv").read_text().splitlines()[1:]})
    results["loadavg_before"] = loadavg()
    plan = [("before", Path(args.before_bin), 1)] if args.before_bin else []
    plan += [("after", BIN, 1), ("after", BIN, args.workers)]
    for code, binary, workers in plan:
        service_load.BIN = binary  # Service.start runs `<BIN> serve`
        data = work / f"data-{code}-{workers}"
        subprocess.run(["rm", "-rf", str(data)], check=True)
        subprocess.run(["cp", "-a", str(base), str(data)], check=True)
        traffic = Traffic(corpus, queries, gold, args.seed)  # the same traffic for each count
        # one worker: the default, unset (the code before has no such setting and refuses it)
        extra = {"HYBRIDSAG_SERVER__WORKERS": str(workers)} if workers > 1 else {}
        svc = Service(data, args.port, extra)
        ready_s = svc.start()
        assert svc.proc is not None
        asyncio.run(load(svc.url, 1, 3.0, Traffic(corpus, queries, [], args.seed + 1), Log()))
        run: dict[str, Any] = {
            "code": code, "workers": workers, "start_to_ready_s": round(ready_s, 1)
        }
        for clients in (1, args.clients):
            log = Log()
            wall = asyncio.run(load(svc.url, clients, args.duration, traffic, log))
            run[f"clients_{clients}"] = {
                "ops_per_s": round(log.done / wall, 2),
                "search_p50_ms": pct(log.ms["search"], 50),
                "search_p95_ms": pct(log.ms["search"], 95),
                "searches": len(log.ms["search"]),
                "errors": len(log.errors),
                "status": dict(sorted(log.status.items())),
                "stale_hits": stale_hits(log),
            }
        one, many = run["clients_1"], run[f"clients_{args.clients}"]
        run["p95_loaded_over_p50_single"] = round(many["search_p95_ms"] / one["search_p50_ms"], 2)
        run["parent_rss_mb"] = rss_mb(svc.proc.pid)
        svc.stop()
        results["runs"].append(run)
        print(json.dumps(run), flush=True)
    first, last = results["runs"][0], results["runs"][-1]
    key = f"clients_{args.clients}"
    results["ops_ratio_last_over_first"] = round(last[key]["ops_per_s"] / first[key]["ops_per_s"], 2)
    results["p95_last_over_p50_first"] = round(
        last[key]["search_p95_ms"] / first["clients_1"]["search_p50_ms"], 2
    )
    results["loadavg_after"] = loadavg()
    results["cpus"] = os.cpu_count()
    out = work / "service_workers.json"
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2))
    for run in results["runs"]:
        print(
            f"{run['code']} workers={run['workers']}: {run[key]['ops_per_s']} ops/s at {args.clients} clients, "
            f"search p50 {run['clients_1']['search_p50_ms']} ms at 1 client, p95 "
            f"{run[key]['search_p95_ms']} ms at {args.clients} = "
            f"{run['p95_loaded_over_p50_single']}x, stale hits "
            f"{run['clients_1']['stale_hits'] + run[key]['stale_hits']}"
        )
    print(
        f"ops/s at {args.clients} clients, last run over first: {results['ops_ratio_last_over_first']}x; "
        f"p95 at {args.clients} clients of the last over the first's 1-client p50: "
        f"{results['p95_last_over_p50_first']}x"
    )
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
