"""Per-question-type tables of an eval report (not a test).

``hybridsag eval`` writes one row per path and question to ``<out>/details.jsonl``; its
``metrics.json`` groups by type only where the set's ``queries.jsonl`` carries a ``type`` field
(2wiki does; MuSiQue names the type in the question id, ``2hop__...``, ``3hop1__...``). This
script prints a Markdown table per path of R@2 / R@5 / R@10 / nDCG@10 by type, the type read from
the ``type`` field, else from ``--id-type`` (a regular expression whose first group is the type)::

    python benchmarks/per_type.py --report /tmp/eval/musique100 \\
        --queries /work/shared/data/musique100/queries.jsonl --id-type '^([^_]+)__'
    python benchmarks/per_type.py --report /tmp/eval/2wiki \\
        --queries /work/shared/data/2wiki/queries.jsonl

``--paths`` picks the paths shown (default: every path in the report).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

COLUMNS = ("recall@2", "recall@5", "recall@10", "ndcg@10")


def question_types(queries: Path, id_type: str | None) -> dict[str, str]:
    """Each question id's type: its ``type`` field, else ``id_type``'s first group, else
    ``untyped``."""
    pattern = re.compile(id_type) if id_type else None
    types = {}
    for line in queries.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        qid = str(obj["_id"])
        kind = obj.get("type")
        if not kind and pattern is not None and (m := pattern.search(qid)):
            kind = m.group(1)
        types[qid] = kind or "untyped"
    return types


def tables(report: Path, types: dict[str, str], paths: list[str] | None) -> str:
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for line in (report / "details.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row["path"]][types.get(row["query_id"], "untyped")].append(row)
    out = []
    for path in paths or sorted(rows):
        by_type = rows.get(path)
        if not by_type:
            raise SystemExit(f"no rows of path {path!r} in {report / 'details.jsonl'}")
        everything = [r for rs in by_type.values() for r in rs]
        out.append(f"\n{path}\n\n| type | questions | " + " | ".join(COLUMNS) + " |")
        out.append("|---|---|" + "---|" * len(COLUMNS))
        for kind, rs in [*sorted(by_type.items()), ("all", everything)]:
            means = [100 * sum(r.get(c, 0.0) for r in rs) / len(rs) for c in COLUMNS]
            out.append(f"| {kind} | {len(rs)} | " + " | ".join(f"{v:.2f}" for v in means) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", type=Path, required=True, help="an eval --out folder")
    ap.add_argument("--queries", type=Path, required=True, help="the set's queries.jsonl")
    ap.add_argument("--id-type", help="regex whose first group is the type, for ids that hold it")
    ap.add_argument("--paths", help="comma-separated paths to show (default: all)")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p] if args.paths else None
    print(tables(args.report, question_types(args.queries, args.id_type), paths))


if __name__ == "__main__":
    main()
