#!/usr/bin/env python3
"""Score default fused searches on the documentation folders of benchmarks/docsets, per
question type, and the "no good match" flag: the share of correct #1 answers flagged and the
share of unanswerable questions flagged (issue 38 item 5).

Each set is indexed once under ``--work/idx-<set>`` (``ingest_folder`` of its docs/, reused and
brought up to date on later runs) and every question is searched in one process (``search(q,
top_k=10)`` with the default paths). ``--compare SECTION.KEY`` runs each question twice, with
that boolean setting off and on (e.g. ``lexical.spelling``), over the same index. Prints a
Markdown table and, with ``--tsv``, writes one row per search.

    python benchmarks/docsets_eval.py --work /tmp/docsets-work --compare lexical.spelling
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hybridsag.evaluation.docsets import UNANSWERABLE, load_docset
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

SETS = Path(__file__).resolve().parent / "docsets"


def run(args: argparse.Namespace) -> list[dict]:
    rows = []
    arms: list[tuple[str, dict]] = [("default", {})]
    if args.compare:
        section, key = args.compare.split(".", 1)
        arms = [(f"{args.compare}=off", {section: {key: False}}),
                (f"{args.compare}=on", {section: {key: True}})]
    for name in args.sets.split(","):
        queries = load_docset(SETS / name)
        for i, (arm, fields) in enumerate(arms):
            with HybridSearch(Settings(data_dir=args.work / f"idx-{name}", **fields)) as hs:
                if i == 0:
                    hs.ingest_folder(SETS / name / "docs")
                for q in queries:
                    resp = hs.search(q.text, top_k=10)
                    ids = [r.resource_id for r in resp.results]
                    first = next((k for k, x in enumerate(ids, 1) if x in q.gold), 0)
                    rows.append({"set": name, "id": q.qid, "type": q.type, "arm": arm,
                                 "first": first, "confidence": resp.confidence,
                                 "no_good_match": resp.no_good_match})
    return rows


def report(rows: list[dict]) -> None:
    print("| arm | kind | n | hit@1 | hit@5 | correct #1 flagged | unanswerable flagged |")
    print("|---|---|---|---|---|---|---|")
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        for kind in ["all", *sorted({r["type"] for r in mine})]:
            sel = [r for r in mine if kind in ("all", r["type"])]
            ans = [r for r in sel if r["type"] != UNANSWERABLE]
            unans = [r for r in sel if r["type"] == UNANSWERABLE]
            top = [r for r in ans if r["first"] == 1]
            flagged = sum(r["no_good_match"] for r in top)
            hit5 = sum(0 < r["first"] <= 5 for r in ans)
            un = f"{sum(r['no_good_match'] for r in unans)}/{len(unans)}" if unans else ""
            print(f"| {arm} | {kind} | {len(sel)} | {len(top)}/{len(ans)} | {hit5}/{len(ans)} "
                  f"| {flagged}/{len(top)} | {un} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="where the indexes are kept")
    ap.add_argument("--sets", default="flask,pytest,pydantic,mkdocs-material,django")
    ap.add_argument("--compare", help="a boolean setting SECTION.KEY to run off and on")
    ap.add_argument("--tsv", type=Path, help="write one row per search here")
    args = ap.parse_args()
    rows = run(args)
    if args.tsv:
        with args.tsv.open("w", encoding="utf-8") as f:
            f.write("\t".join(rows[0]) + "\n")
            for r in rows:
                f.write("\t".join(str(v) for v in r.values()) + "\n")
    report(rows)


if __name__ == "__main__":
    main()
