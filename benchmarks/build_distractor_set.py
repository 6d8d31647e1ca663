#!/usr/bin/env python3
"""Build a dense-distractor dev set: musique100's questions in a haystack of recombined
distractor passages, as the scale benchmark builds its haystack around 2wiki.

The scale benchmark (``benchmarks/scale.py``) reports on the first 200 2wiki questions in a
haystack of 2wiki's corpus plus distractors, and finds the fused search falling below SAG2 alone
as distractors are added: a distractor copies real sentences (of every shared set), so the
embedding path's top hits fill with passages that read like the gold ones and are not. 2wiki's
gold may not be fitted on, so this set puts another multi-hop set's questions, musique100's
(100 questions, 1,890 passages, its own qrels), in the same kind of haystack: its corpus plus
``--size - 1890`` distractors from :func:`scale.distractors` (the benchmark's own generator,
here with ``--seed``): at the default 3,000 passages, 1,110 distractors, 37 % of the passages,
about the share of the benchmark's 10k haystack (3,881 of 10,000, 39 %), in a haystack small
enough that its passages embed in minutes on a 2-core machine.

    python benchmarks/build_distractor_set.py --data /work/shared/data \\
        --out benchmarks/devsets/musique-haystack --size 3000 --seed 7
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import distractors  # noqa: E402

__all__ = ["main"]

ANCHOR = "musique100"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    anchor = args.data / ANCHOR
    real = [json.loads(line) for line in (anchor / "corpus.jsonl").open(encoding="utf-8")]
    extra = max(args.size - len(real), 0)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for row in real:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        for row in distractors(args.data, extra, seed=args.seed):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    for name in ("queries.jsonl", "qrels.tsv"):
        shutil.copyfile(anchor / name, args.out / name)
    sys.stdout.write(f"{len(real)} {ANCHOR} passages + {extra} distractors\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
