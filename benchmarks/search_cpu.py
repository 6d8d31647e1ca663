#!/usr/bin/env python3
"""CPU time of a warm fused search, where it goes, and its peers measured in the same process.

Indexes a BEIR-style set in passage mode into ``--index`` when that folder holds no store yet
(passage vectors through the embedding cache under ``--cache``, as ``hybridsag eval`` keeps
them), opens it with the default settings (the default paths, fused), runs ``--warmup``
searches, then measures ``--searches`` more with ``time.process_time()`` (the process's CPU
time, every thread of it: the paths run in the search's pool). The breakdown times the parts
of each search the same way: ``paths`` (``Searcher.run_paths``; in a tree before the search
package's read side, :meth:`HybridSearch.run_paths`), ``rows`` (the chunk and resource rows
the search's own thread reads: ``Store.chunks``, ``Store.resources`` and, in a tree that has
it, ``Store.chunk_views``), ``fuse`` (the fusion step, :func:`hybridsag.search.steps.fuse_step`
as the read side calls it) and ``other`` (the rest: the trust step's query facts, the
confidence, the results). Peers, on their own questions so that no query vector is
remembered from the fused searches: a bare FTS5 query (the query's terms OR-ed, bm25 top
``depth`` straight from ``chunks_fts``) and the dense path alone (query embedding and Milvus).

Each ``--arm LABEL=SRC,INDEX`` runs in its own process with the hybridsag source tree ``SRC``
imported first (a checkout's ``plugin/``, ``fusion/``, ``consistency/``, ``config/stopwords``
linked into one package, as the editable install maps them), over its own index folder (a
store made by that tree's code); with ``--rounds R`` the arms alternate ``R`` times so that the
machine's load falls on each alike, and the table gives each arm's medians over its rounds and
its ratio to the first arm and to its peers. Without ``--arm`` the installed hybridsag runs
once over ``--index``.

    python benchmarks/search_cpu.py --data ../shared/data/2wiki --cache /tmp/emb \\
        --arm before=/tmp/base,/tmp/idx-before --arm after=.,/tmp/idx-after --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTS = ("paths", "rows", "fuse")


def _link_tree(src: Path, into: Path) -> Path:
    """A folder holding one package ``hybridsag`` made of ``src``'s code, laid out as the
    editable install maps it (``plugin/`` is ``hybridsag``; ``fusion/``, ``consistency/`` and
    ``config/stopwords`` its subpackages); to be put first on ``PYTHONPATH``."""
    pkg = into / "hybridsag"
    pkg.mkdir(parents=True)
    for entry in (src / "plugin").iterdir():
        (pkg / entry.name).symlink_to(entry.resolve())
    for name, target in (
        ("fusion", src / "fusion"),
        ("consistency", src / "consistency"),
        ("stopwords", src / "config" / "stopwords"),
    ):
        (pkg / name).symlink_to(target.resolve())
    return into


_active = threading.local()


def _cpu_timer(
    totals: dict[str, float], part: str, fn: Callable[..., Any], *, main_thread: bool = False
) -> Callable[..., Any]:
    """``fn``, adding the process CPU time of each call to ``totals[part]``; a call made
    inside another timed call is left to that one (so no time counts twice), and with
    ``main_thread`` only the calls of the search's own thread count (the paths read rows too,
    in the pool's threads, and are timed as paths)."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        if getattr(_active, "part", None) is not None or (
            main_thread and threading.current_thread() is not threading.main_thread()
        ):
            return fn(*args, **kwargs)
        _active.part = part
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[part] += time.process_time() - t0
            _active.part = None

    return timed


def measure(data: Path, index: Path, cache: Path, searches: int, warmup: int) -> dict[str, Any]:
    """One arm's figures, in this process (its hybridsag is whatever imports first)."""
    import sqlite3

    import hybridsag
    import hybridsag.search as search_mod
    from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS, load_dataset
    from hybridsag.lexical.queries import build_match
    from hybridsag.records.filters import Filters
    from hybridsag.records.store import Store
    from hybridsag.search import HybridSearch
    from hybridsag.settings import Settings
    from hybridsag.vectors.embed_cache import CachedEmbedder
    from hybridsag.vectors.embedder import make_embedder

    ds = load_dataset(data)
    settings = Settings(
        data_dir=index, chunking={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS}
    )
    inner = make_embedder(settings)
    assert inner is not None, "the fused search needs an embedding model"
    embedder = CachedEmbedder(inner, cache)
    built_s = None
    marker = index / "search_cpu.built"
    if not marker.exists():
        t0 = time.perf_counter()
        with HybridSearch(settings, embedder=embedder) as hs:
            hs.ingest_jsonl(ds.corpus_path, mode="passage")
        built_s = round(time.perf_counter() - t0, 1)
        marker.write_text(str(built_s))
    questions = [text for _qid, text in ds.queries]
    need = warmup + 3 * searches
    if len(questions) < need:
        raise SystemExit(f"{data} has {len(questions)} questions; {need} are needed")
    fused_q = questions[:warmup + searches]
    fts_q = questions[warmup + searches : warmup + 2 * searches]
    dense_q = questions[warmup + 2 * searches : warmup + 3 * searches]

    totals = dict.fromkeys(PARTS, 0.0)
    # a tree whose search is the package's read side (``hybridsag.search.reads.Searcher``)
    # runs the paths and the fusion step there; an older tree in ``HybridSearch`` itself
    if hasattr(search_mod, "__path__") and importlib.util.find_spec("hybridsag.search.reads"):
        from hybridsag.search import reads

        setattr(reads.Searcher, "run_paths", _cpu_timer(totals, "paths", reads.Searcher.run_paths))
        setattr(reads, "fuse_step", _cpu_timer(totals, "fuse", reads.fuse_step))
    else:
        setattr(HybridSearch, "run_paths", _cpu_timer(totals, "paths", HybridSearch.run_paths))
        setattr(search_mod, "fuse_step", _cpu_timer(totals, "fuse", search_mod.fuse_step))
    # the rows: every read of the store's chunk and resource rows the search's thread makes
    for name in ("chunks", "resources", "chunk_views"):  # chunk_views: a tree that has it
        if name in vars(Store):
            setattr(Store, name, _cpu_timer(totals, "rows", vars(Store)[name], main_thread=True))

    out: dict[str, Any] = {"hybridsag": str(Path(hybridsag.__file__).resolve().parent.parent)}
    t_open = time.perf_counter()
    with HybridSearch(settings, embedder=embedder) as hs:
        open_s = time.perf_counter() - t_open
        parts = hs.components
        # jieba's dictionary, as the service's warm-up loads it: else the first seed passage
        # holding Han text loads it inside the measured searches
        parts.tokenizer.warm()
        for q in fused_q[:warmup]:
            hs.search(q, top_k=10)
        for key in totals:
            totals[key] = 0.0
        walls: list[float] = []
        t_cpu = time.process_time()
        for q in fused_q[warmup:]:
            t0 = time.perf_counter()
            hs.search(q, top_k=10)
            walls.append(time.perf_counter() - t0)
        fused_cpu = time.process_time() - t_cpu
        parts_cpu = dict(totals)  # the peers below read rows too: not the search's
        # peers: a bare FTS5 query on the same store file, and the dense path alone
        depth = settings.fusion.depth
        tok = parts.tokenizer
        conn = sqlite3.connect(str(settings.store_location))
        sql = (
            "SELECT rowid, bm25(chunks_fts, 2, 2, 1) AS s FROM chunks_fts "
            "WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?"
        )
        for q in fts_q[:warmup]:
            conn.execute(sql, (build_match(tok.query_terms(q)), depth)).fetchall()
        t_cpu = time.process_time()
        for q in fts_q:
            conn.execute(sql, (build_match(tok.query_terms(q)), depth)).fetchall()
        fts_cpu = time.process_time() - t_cpu
        conn.close()
        dense = parts.retriever("dense")
        for q in dense_q[:warmup]:
            dense.retrieve(q, limit=depth, filters=Filters(), peers={})
        t_cpu = time.process_time()
        for q in dense_q:
            dense.retrieve(q, limit=depth, filters=Filters(), peers={})
        dense_cpu = time.process_time() - t_cpu
    n = len(fused_q) - warmup
    per = 1000.0 / n
    fused_ms = fused_cpu * per
    out.update(
        {
            "searches": n,
            "open_s": round(open_s, 2),
            "built_s": built_s,
            "fused_cpu_ms": round(fused_ms, 2),
            **{f"{p}_cpu_ms": round(parts_cpu[p] * per, 2) for p in PARTS},
            "other_cpu_ms": round(fused_ms - sum(parts_cpu.values()) * per, 2),
            "fused_wall_p50_ms": round(statistics.median(walls) * 1000.0, 1),
            "fts5_cpu_ms": round(fts_cpu * 1000.0 / len(fts_q), 3),
            "dense_cpu_ms": round(dense_cpu * 1000.0 / len(dense_q), 2),
        }
    )
    out["fused_per_fts5"] = round(out["fused_cpu_ms"] / out["fts5_cpu_ms"], 1)
    out["fused_per_dense"] = round(out["fused_cpu_ms"] / out["dense_cpu_ms"], 2)
    return out


def _run_arm(src: Path | None, index: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One arm in a child process (``src`` first on its path), its figures as JSON."""
    cmd = [
        sys.executable, __file__, "--child", "--data", str(args.data), "--index", str(index),
        "--cache", str(args.cache), "--searches", str(args.searches),
        "--warmup", str(args.warmup),
    ]  # fmt: skip
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="search_cpu_src_") as tmp:
        if src is not None:
            tree = _link_tree(src, Path(tmp))
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(tree), env.get("PYTHONPATH", "")) if p
            )
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the arm over {index} failed (exit {done.returncode})")
    return json.loads(done.stdout)


def _table(results: dict[str, list[dict[str, Any]]]) -> str:
    cols = ("fused_cpu_ms", *(f"{p}_cpu_ms" for p in (*PARTS, "other")), "fused_wall_p50_ms",
            "fts5_cpu_ms", "dense_cpu_ms", "fused_per_fts5", "fused_per_dense")  # fmt: skip
    first = next(iter(results))
    lines = [
        "| arm | rounds | " + " | ".join(cols) + " | fused CPU vs " + first + " |",
        "|---|---|" + "---|" * len(cols) + "---|",
    ]
    base = statistics.median(r["fused_cpu_ms"] for r in results[first])
    for label, runs in results.items():
        med = {c: statistics.median(r[c] for r in runs) for c in cols}
        lines.append(
            f"| {label} | {len(runs)} | "
            + " | ".join(f"{med[c]:g}" for c in cols)
            + f" | {med['fused_cpu_ms'] / base:.3f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path, help="a BEIR-style set (2wiki)")
    ap.add_argument("--index", type=Path, help="the index folder (made when it holds none)")
    ap.add_argument("--cache", required=True, type=Path, help="passage embedding cache")
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument(
        "--arm", action="append", default=[], metavar="LABEL=SRC,INDEX",
        help="a source tree and its index folder, run in a process of its own (repeatable)",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1, help="times the arms alternate")
    ap.add_argument("--json", action="store_true", help="every round's figures as JSON")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        json.dump(measure(args.data, args.index, args.cache, args.searches, args.warmup),
                  sys.stdout)  # fmt: skip
        return 0
    arms: list[tuple[str, Path | None, Path]] = []
    for spec in args.arm:
        label, sep, rest = spec.partition("=")
        src, comma, index = rest.partition(",")
        if not sep or not comma or not label:
            ap.error(f"--arm {spec!r}: give LABEL=SRC,INDEX")
        arms.append((label, Path(src), Path(index)))
    if not arms:
        if args.index is None:
            ap.error("give --index, or one --arm per source tree")
        arms.append(("installed", None, args.index))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _s, _i in arms}
    for round_no in range(args.rounds):
        for label, src, index in arms:
            figures = _run_arm(src, index, args)
            results[label].append(figures)
            print(f"round {round_no + 1} {label}: {json.dumps(figures)}", file=sys.stderr)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
