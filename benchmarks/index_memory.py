#!/usr/bin/env python3
"""Peak memory of ``hybridsag index`` of a docs folder of about 300 KB (issue 39's memory row).

    python benchmarks/index_memory.py [--kb 300] [--repeat 2] [--hybridsag BEFORE ...]

The folder is made from this repository's own markdown (``docs/``, ``README.md``,
``samples/corpus``), repeated under numbered folders until it holds ``--kb`` KB, so every run
indexes the same files. Each command (this venv's ``hybridsag``, then each ``--hybridsag PATH``:
another build, e.g. a launcher of the code before a change) indexes it with the default
settings into a fresh data dir, in turns (A, B, A, B, ...); a run's peak is the child's own
``ru_maxrss`` (``os.wait4``), which on Linux covers the process and any child it waited for (an
ONNX export would count: one warm-up index of one file per command makes the export first).
Peer in the same run: ``SentenceTransformer.encode`` of the same chunk texts in a fresh process
(batch ``embedding.batch_size``), the peak a plain torch encode of them takes. Prints JSON:
each command's peak MiB (median and runs), wall seconds, the peer's peak, and each command's
ratio to the first and to the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PEER = """
import json, resource, sys
from sentence_transformers import SentenceTransformer
from hybridsag.settings import Settings
from hybridsag.vectors.embedder_common import resolve_model
texts = json.load(open(sys.argv[1]))
settings = Settings()
st = SentenceTransformer(resolve_model(settings.embedding.model), device="cpu", local_files_only=True)
st.encode(texts, batch_size=settings.embedding.batch_size)
"""


def make_folder(target: Path, kb: int) -> int:
    """Copy the repository's markdown into ``target`` until it holds ``kb`` KB; its size."""
    sources = sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md"]
    sources += sorted(p for p in (ROOT / "samples" / "corpus").rglob("*") if p.is_file())
    size, copy = 0, 0
    while size < kb * 1000:
        for src in sources:
            if size >= kb * 1000:
                break
            dst = target / f"copy{copy}" / src.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            size += src.stat().st_size
        copy += 1
    return size


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall seconds of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[0]} exited with {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def chunk_texts(data: Path) -> list[str]:
    """The texts the index embedded (title, heading path, body) read back from its store."""
    import sqlite3

    conn = sqlite3.connect(f"file:{data / 'hybridsag.sqlite3'}?mode=ro", uri=True)
    rows = conn.execute(
        "SELECT r.title, c.heading_path, c.text FROM chunks c JOIN resources r USING (resource_id)"
    ).fetchall()
    return [f"{t} > {h}\n{x}" if h else f"{t}\n{x}" for t, h, x in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--hybridsag", action="append", default=[],
                    help="another build's hybridsag command (repeatable)")
    args = ap.parse_args()
    commands = [str(Path(sys.executable).with_name("hybridsag")), *args.hybridsag]
    env = dict(os.environ)
    peaks: dict[str, list[float]] = {c: [] for c in commands}
    walls: dict[str, list[float]] = {c: [] for c in commands}
    with tempfile.TemporaryDirectory(prefix="index-memory-") as tmp:
        scratch = Path(tmp)
        folder = scratch / "docs"
        size = make_folder(folder, args.kb)
        warm = scratch / "warm"
        warm.mkdir()
        shutil.copyfile(ROOT / "README.md", warm / "README.md")
        for cmd in commands:  # makes a missing ONNX export outside the measured runs
            run([cmd, "--data-dir", str(scratch / "warm-data"), "index", str(warm), "-q"], env)
            shutil.rmtree(scratch / "warm-data", ignore_errors=True)
        kept = None
        for _ in range(args.repeat):
            for cmd in commands:
                data = Path(tempfile.mkdtemp(prefix="data-", dir=scratch))
                peak, wall = run([cmd, "--data-dir", str(data), "index", str(folder), "-q"], env)
                peaks[cmd].append(round(peak, 1))
                walls[cmd].append(round(wall, 1))
                if kept is None:
                    kept = data
                else:
                    shutil.rmtree(data, ignore_errors=True)
        assert kept is not None
        texts = scratch / "texts.json"
        texts.write_text(json.dumps(chunk_texts(kept)), "utf-8")
        peer = [run([sys.executable, "-c", PEER, str(texts)], env)[0] for _ in range(args.repeat)]
        chunks = len(json.loads(texts.read_text("utf-8")))
    first = statistics.median(peaks[commands[0]])
    peer_mib = statistics.median(peer)
    print(json.dumps({
        "folder_bytes": size,
        "chunks": chunks,
        "peak_mib_median": {c: statistics.median(v) for c, v in peaks.items()},
        "peak_mib_runs": peaks,
        "wall_s_runs": walls,
        "peer_sentence_transformers_encode_peak_mib": [round(p, 1) for p in peer],
        "ratio_to_first": {c: round(statistics.median(v) / first, 2) for c, v in peaks.items()},
        "ratio_to_peer": {c: round(statistics.median(v) / peer_mib, 2) for c, v in peaks.items()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
