"""Mechanical checks of the docsets: qrels paths exist, answerable queries have gold,
unanswerable ones have none and their key words do not occur in the folder."""
import collections
import json
import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
TYPES = {"how-to", "typo", "keyword", "identifier", "two-file", "unanswerable"}
bad = 0


def fail(msg):
    global bad
    bad += 1
    print("FAIL", msg)


for d in sorted(p for p in ROOT.iterdir() if (p / "queries.jsonl").exists()):
    docs = d / "docs"
    files = {p.relative_to(docs).as_posix(): p for p in docs.rglob("*") if p.is_file()}
    exts = collections.Counter(p.suffix for p in files.values())
    for rid in files:
        if Path(rid).suffix not in {".md", ".markdown", ".rst", ".txt"}:
            fail(f"{d.name}: non-text file {rid}")
    texts = {rid: p.read_text(encoding="utf-8", errors="replace").lower() for rid, p in files.items()}
    queries = [json.loads(l) for l in (d / "queries.jsonl").read_text().splitlines() if l.strip()]
    ids = [q["_id"] for q in queries]
    if len(ids) != len(set(ids)):
        fail(f"{d.name}: repeated query ids")
    qrels = collections.defaultdict(dict)
    lines = (d / "qrels.tsv").read_text().splitlines()
    if lines[0] != "query-id\tcorpus-id\tscore":
        fail(f"{d.name}: qrels header {lines[0]!r}")
    for n, line in enumerate(lines[1:], 2):
        qid, cid, score = line.split("\t")
        if cid not in files:
            fail(f"{d.name}: qrels.tsv:{n} {cid} not under docs/")
        if qid not in ids:
            fail(f"{d.name}: qrels.tsv:{n} unknown query {qid}")
        if score not in ("1", "2"):
            fail(f"{d.name}: qrels.tsv:{n} score {score}")
        qrels[qid][cid] = int(score)
    types = collections.Counter()
    for q in queries:
        t = q.get("type")
        types[t] += 1
        if t not in TYPES:
            fail(f"{d.name}: {q['_id']} type {t!r}")
        if t == "unanswerable":
            if q["_id"] in qrels:
                fail(f"{d.name}: unanswerable {q['_id']} has qrels")
            terms = q.get("absent_terms") or []
            if not terms:
                fail(f"{d.name}: unanswerable {q['_id']} names no absent terms")
            for term in terms:
                rx = re.compile(r"\b" + re.escape(term.lower()))
                hits = [rid for rid, tx in texts.items() if rx.search(tx)]
                if hits:
                    fail(f"{d.name}: {q['_id']} key word {term!r} occurs in {hits[:5]}")
        else:
            if q["_id"] not in qrels:
                fail(f"{d.name}: answerable {q['_id']} has no qrels")
            if t == "two-file" and len(qrels[q["_id"]]) < 2:
                fail(f"{d.name}: two-file {q['_id']} has fewer than 2 gold files")
    print(f"{d.name}: {len(files)} files {dict(exts)}; {len(queries)} queries {dict(types)}; "
          f"{sum(len(v) for v in qrels.values())} qrels lines")
print("OK" if not bad else f"{bad} problem(s)")
sys.exit(1 if bad else 0)
