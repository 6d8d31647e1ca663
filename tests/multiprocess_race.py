"""The multi-process race: writer processes and a searcher process on one data dir whose vectors
live on one Milvus (a ``milvus-lite server``), run by
tests/integration/test_multiprocess_race.py.

:func:`run_process_race` starts the children (tests/multiprocess_race_child.py), lets them load
the model, starts them at once on a new data dir, stops the searcher when the writers are done,
and returns every record. :class:`ProcessRaceResult` checks what the issue promises: no failed
operation or search, no stale result (a search never returns a resource whose delete ended before
the search began; ids are never re-ingested, so that is exact).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ProcessRaceResult", "run_process_race"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ProcessRaceResult:
    writes: list[dict[str, Any]] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    opens: list[dict[str, Any]] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def failed_writes(self) -> list[dict[str, Any]]:
        return [w for w in self.writes if not w["ok"]]

    def failed_searches(self) -> list[dict[str, Any]]:
        return [s for s in self.searches if s["error"] or s["degraded"]]

    def stale_results(self) -> list[str]:
        deleted = {w["rid"]: w["t1"] for w in self.writes if w["kind"] == "delete" and w["ok"]}
        return [
            f"search [{s['t0']:.4f}, {s['t1']:.4f}] returned {rid!r}, deleted by {deleted[rid]:.4f}"
            for s in self.searches
            for rid in s["rids"]
            if rid in deleted and deleted[rid] < s["t0"]
        ]

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for w in self.writes:
            key = f"{w['kind']}_{'ok' if w['ok'] else 'failed'}"
            kinds[key] = kinds.get(key, 0) + 1
        return {
            "writes": len(self.writes),
            "by_kind": kinds,
            "searches": len(self.searches),
            "failed_searches": len(self.failed_searches()),
            "stale_results": len(self.stale_results()),
            "open_errors": [o["error"] for o in self.opens],
            "exit_codes": self.exit_codes,
            "seconds": round(self.seconds, 2),
        }


def run_process_race(
    data_dir: Path,
    uri: str,
    work_dir: Path,
    *,
    writers: int = 2,
    ops: int = 150,
    seed: int = 7,
    timeout_s: float = 600.0,
) -> ProcessRaceResult:
    """Run ``writers`` writer processes (``ops`` operations each) and one searcher on the new
    data dir ``data_dir`` with its vectors on ``uri``; records and signal files go under
    ``work_dir``. RuntimeError when a child does not get ready or finish in ``timeout_s``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    go, stop = work_dir / "go", work_dir / "stop"
    roles = [f"writer{k}" for k in range(writers)] + ["searcher"]
    outs = {role: work_dir / f"{role}.jsonl" for role in roles}
    with contextlib.ExitStack() as files:
        procs = {
            role: subprocess.Popen(
                [sys.executable, "-m", "tests.multiprocess_race_child", role, str(data_dir), uri,
                 str(outs[role]), str(go), str(stop), str(ops), str(seed)],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=files.enter_context(open(work_dir / f"{role}.stderr", "wb")),
            )
            for role in roles
        }
        try:
            seconds = _drive(procs, roles, outs, go, stop, timeout_s)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    result = ProcessRaceResult(
        exit_codes=[procs[r].returncode for r in roles], seconds=seconds
    )
    for role in roles:
        for line in outs[role].read_text("utf-8").splitlines():
            rec = json.loads(line)
            if rec["kind"] == "search":
                result.searches.append(rec)
            elif rec["kind"] == "open":
                result.opens.append(rec)
            else:
                result.writes.append(rec)
    return result


def _drive(
    procs: dict[str, subprocess.Popen[bytes]],
    roles: list[str],
    outs: dict[str, Path],
    go: Path,
    stop: Path,
    timeout_s: float,
) -> float:
    """Wait until every child is ready, start them at once, stop the searcher when the writers
    are done; the seconds from the start signal to the searcher's exit."""
    deadline = time.monotonic() + timeout_s
    while not all(Path(f"{out}.ready").exists() for out in outs.values()):
        dead = [r for r, p in procs.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"race children not ready (exited: {dead})")
        time.sleep(0.05)
    started = time.monotonic()
    go.touch()
    for role in roles[:-1]:
        procs[role].wait(timeout=max(1.0, deadline - time.monotonic()))
    stop.touch()
    procs["searcher"].wait(timeout=120)
    return time.monotonic() - started
