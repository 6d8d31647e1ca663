#!/usr/bin/env python3
"""Cold CLI operations: how long a fresh ``hybridsag`` process takes for a search (bm25 alone,
title alone, the default fused paths), ``list``, ``show``, a delete and a reconcile plan on an
index with vectors (each command a new process, as a user runs them).

A bm25 or title search, list, show, a delete or a plan needs no model and (but the delete and the
plan) no Milvus: it should cost a small fraction of a fused search's cold start, which loads the
embedding model (torch for the sentence-transformers backend, onnxruntime for ``--backend onnx``)
and opens Milvus Lite. A search through a running service (``hybridsag --server URL search``,
fused paths; the service is a ``hybridsag serve`` of a copy of the index started by this run)
needs only the settings, httpx and the client. Reports, for each command, the median wall seconds
and the median CPU seconds (user + system of the child; on a machine loaded by other work the CPU
time moves far less than the wall time) of ``--runs`` runs, and the 1-minute load average before
and after.

Peers run in the same loop, so that they see the same load: ``python -c pass`` (the
interpreter's own start-up, the floor of any Python CLI) and ``grep -r`` of the query over the
corpus folder (a search that needs no index); each search's median is printed over theirs
(``ratios``). The children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed),
as an installed package runs.

Several ``--hybridsag`` executables (say an old build's and this one's) are run interleaved,
command by command, so that they see the same load; each gets its own index.

    python benchmarks/cold_ops.py --hybridsag .venv/bin/hybridsag --runs 5
    python benchmarks/cold_ops.py --runs 5 --backend onnx --onnx-cache /tmp/onnx-cache
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: The query of every search (and of the ``grep -r`` peer).
QUERY = "restart the scheduler"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd``: its wall seconds and its CPU seconds (the reaped children's rusage grows by
    exactly this child's: the commands run one at a time)."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, _children_cpu() - cpu0


def _commands(hs: str, server: str | None) -> dict[str, Callable[[int], list[str]]]:
    query = [QUERY, "-k", "3", "--brief"]
    remote = {"search_server": lambda i: [hs, "--server", server, "search", *query]}
    return {
        "search_bm25": lambda i: [hs, "search", *query, "--paths", "bm25"],
        "search_title": lambda i: [hs, "search", f"Document {i}", "--paths", "title"],
        "search": lambda i: [hs, "search", *query],
        **(remote if server else {}),
        "list": lambda i: [hs, "list"],
        "show": lambda i: [hs, "show", f"doc{i + 20:03d}.md"],
        "delete": lambda i: [hs, "delete", f"doc{i:03d}.md"],
        "reconcile_dry_run": lambda i: [hs, "reconcile", "--dry-run"],
    }


def _peers(python: str, corpus: Path) -> dict[str, list[str]]:
    """The peers' commands: the interpreter's start-up, and a grep over the corpus for the files
    that hold any of the query's words (an OR query, as the lexical paths run it)."""
    words = [arg for word in QUERY.split() for arg in ("-e", word)]
    return {
        "python_c_pass": [python, "-c", "pass"],
        "grep_r": ["grep", "-r", "-i", "-l", "-F", *words, str(corpus)],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _service(hs: str, env: dict[str, str], log: Path) -> Iterator[str]:
    """``hybridsag serve`` of ``env``'s data dir on a free 127.0.0.1 port until the block ends;
    yields its URL once ``/readyz`` answers 200."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(
        env,
        HYBRIDSAG_SERVER__PORT=str(port),
        HYBRIDSAG_SERVER__RECONCILER="false",
        HYBRIDSAG_SERVER__AUTH="false",  # 127.0.0.1 only
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen([hs, "serve"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{hs} serve exited with {proc.returncode}: see {log}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=10) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{hs} serve not ready after 600 s: see {log}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--hybridsag",
        action="append",
        help="a hybridsag executable (repeat to compare builds; default: the one beside python)",
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--docs", type=int, default=40, help="small documents in the index")
    ap.add_argument("--backend", default=None, help="embedding.backend (default: the settings')")
    ap.add_argument("--onnx-cache", default=None, help="embedding.onnx_cache_dir (onnx backend)")
    ap.add_argument(
        "--no-server", action="store_true", help="leave out the search through a running service"
    )
    ap.add_argument(
        "--commands",
        help="comma-separated: only these commands (default: all; search_server needs the service)",
    )
    args = ap.parse_args(argv)
    chosen = set(args.commands.split(",")) if args.commands else None
    executables = args.hybridsag or [str(Path(sys.executable).parent / "hybridsag")]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        for i in range(args.docs):
            (corpus / f"doc{i:03d}.md").write_text(
                f"# Document {i}\n\nThe orrery service number {i} restarts the scheduler "
                f"when error E-{1000 + i} appears. Install it on Linux with one command.\n",
                "utf-8",
            )
        base = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        if args.backend:
            base["HYBRIDSAG_EMBEDDING__BACKEND"] = args.backend
        if args.onnx_cache:
            base["HYBRIDSAG_EMBEDDING__ONNX_CACHE_DIR"] = args.onnx_cache
        envs = []
        for n, hs in enumerate(executables):
            env = dict(base, HYBRIDSAG_DATA_DIR=str(Path(tmp) / f"data{n}"))
            _run([hs, "index", str(corpus), "-q"], env)
            envs.append(env)
        peers = _peers(str(Path(executables[0]).parent / "python"), corpus)
        wall: list[dict[str, list[float]]] = [{} for _ in executables]
        cpu: list[dict[str, list[float]]] = [{} for _ in executables]
        peer_wall: dict[str, list[float]] = {}
        with contextlib.ExitStack() as stack:
            servers: list[str | None] = [None] * len(executables)
            for n, hs in enumerate(executables):
                if not args.no_server and (chosen is None or "search_server" in chosen):
                    # a copy: the service holds its data dir
                    served = Path(tmp) / f"served{n}"
                    shutil.copytree(envs[n]["HYBRIDSAG_DATA_DIR"], served)
                    env = dict(envs[n], HYBRIDSAG_DATA_DIR=str(served))
                    servers[n] = stack.enter_context(_service(hs, env, Path(tmp) / f"serve{n}.log"))
            for i in range(args.runs):
                for name, cmd in peers.items():
                    peer_wall.setdefault(name, []).append(_run(cmd, base)[0])
                for name in _commands("", servers[0]):
                    if chosen is not None and name not in chosen:
                        continue
                    for n, hs in enumerate(executables):
                        w, c = _run(_commands(hs, servers[n])[name](i), envs[n])
                        wall[n].setdefault(name, []).append(w)
                        cpu[n].setdefault(name, []).append(c)
    out: dict[str, object] = {
        "runs": args.runs,
        "backend": args.backend or "settings default",
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "peers_median_wall_s": {k: round(statistics.median(v), 3) for k, v in peer_wall.items()},
    }
    peer = {k: statistics.median(v) for k, v in peer_wall.items()}
    for n, hs in enumerate(executables):
        medians = {k: round(statistics.median(v), 3) for k, v in wall[n].items()}
        out[hs] = {
            "median_wall_s": medians,
            "median_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpu[n].items()},
            **(
                {"delete_over_search": round(medians["delete"] / medians["search"], 3)}
                if {"delete", "search"} <= set(medians)
                else {}
            ),
            "ratios": {
                f"{name}_over_{p}": round(statistics.median(wall[n][name]) / peer[p], 2)
                for name in wall[n]
                if name.startswith("search")
                for p in peer
            },
            "all_wall_s": {k: [round(x, 3) for x in v] for k, v in wall[n].items()},
        }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
