#!/usr/bin/env python3
"""How chunking time grows with the text: issue 23's quadratic shapes at 0.2, 0.8, 1.6 and 10 MB.

Shapes (each one resource, UTF-8 size as given):

- ``no-break``: ``"lorem ipsum dolor sit amet. "`` repeated: no newline, and no sentence end
  (a period before a lowercase word ends nothing), so the whole text is one sentence cut to size;
- ``short-lines``: ``"entry N walrus value\\n"``: a million short lines, no sentence end;
- ``no-spaces``: one line of letters without a space (cut anywhere);
- ``cjk``: Chinese characters without punctuation, one line;
- ``code-line``: a fenced code block holding one long line (code is cut at spaces);
- ``prose``: ordinary sentences in paragraphs of four, for scale.

Each is chunked with the default settings (``fmt="text"``, ``markdown`` for ``code-line``); the
table gives seconds (best of ``--runs``), chunks, and MB/s. A linear chunker keeps MB/s about
flat across the sizes; a quadratic one loses a factor of the size ratio. ``--compare FILE``
also times another chunker module (say the one before issue 23:
``git show 64738e2:plugin/ingest/chunker.py > /tmp/old_chunker.py``), skipping a size where it would
pass ``--compare-max-s`` seconds if quadratic, and checks that both give the same chunks.

    .venv/bin/python benchmarks/chunk_scale.py
    .venv/bin/python benchmarks/chunk_scale.py --compare /tmp/old_chunker.py --sizes 0.2,0.8,1.6

This is a benchmark script, not a test: it prints and never asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from dataclasses import astuple
from types import ModuleType

from hybridsag.ingest import chunker

MB = 1_000_000


def _repeat(unit: str, size: int) -> str:
    """``unit`` repeated to about ``size`` UTF-8 bytes."""
    per = len(unit.encode("utf-8"))
    return unit * max(1, size // per)


def _short_lines(size: int) -> str:
    lines, total, i = [], 0, 0
    while total < size:
        line = f"entry {i} walrus value\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


def _prose(size: int) -> str:
    para = (
        "The lighthouse keeper wrote the log at dawn. Ships passed the reef at noon! "
        "Did the fog lift before the tide turned? It did, and the harbour opened again.\n\n"
    )
    return _repeat(para, size)


SHAPES: dict[str, tuple[str, Callable[[int], str]]] = {
    "no-break": ("text", lambda n: _repeat("lorem ipsum dolor sit amet. ", n)),
    "short-lines": ("text", _short_lines),
    "no-spaces": ("text", lambda n: _repeat("abcdefghijklmnopqrstuvwxyz", n)),
    "cjk": ("text", lambda n: _repeat("中文字符没有标点符号的长文本", n)),
    "code-line": ("markdown", lambda n: "```\n" + _repeat("x = 1; y = 2; ", n) + "\n```\n"),
    "prose": ("text", _prose),
}


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("compared_chunker", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _time(fn: Callable[[], list], runs: int) -> tuple[float, list]:
    best, out = float("inf"), []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.2,0.8,1.6,10", help="MB, comma-separated")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", help="another chunker module file to time beside this one")
    ap.add_argument("--compare-max-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]
    other = _load(args.compare) if args.compare else None
    print(f"chunker: {chunker.__file__}; load average {os.getloadavg()[0]:.2f}")
    head = f"{'shape':<12} {'MB':>5} {'chunks':>7} {'seconds':>8} {'MB/s':>7}"
    print(head + ("  compared s  same" if other else ""))
    for name in args.shapes.split(","):
        fmt, build = SHAPES[name]
        skip_other = False
        for i, mb in enumerate(sizes):
            text = build(int(mb * MB))
            real_mb = len(text.encode("utf-8")) / MB
            seconds, chunks = _time(lambda: chunker.chunk_text(text, fmt=fmt), args.runs)
            line = f"{name:<12} {real_mb:>5.1f} {len(chunks):>7} {seconds:>8.3f} " \
                   f"{real_mb / seconds:>7.1f}"
            if other is not None:
                if skip_other:
                    line += "  (skipped)"
                else:
                    o_s, o_chunks = _time(lambda: other.chunk_text(text, fmt=fmt), 1)
                    same = [astuple(c) for c in o_chunks] == [astuple(c) for c in chunks]
                    line += f"  {o_s:>10.3f}  {'yes' if same else 'NO'}"
                    grow = (sizes[i + 1] / mb) ** 2 if i + 1 < len(sizes) else 1.0
                    skip_other = o_s * grow > args.compare_max_s  # quadratic at the next size
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
