"""Write queries.jsonl and qrels.tsv for each docset from the question sources in src/."""
import importlib.util
import json
import sys
from pathlib import Path

SETS = {"flask": "flask", "pytest": "pytest", "pydantic": "pydantic",
        "mkdocs-material": "mkdocs_material", "django": "django"}
ROOT = Path(__file__).resolve().parents[1]
SRC = Path(__file__).resolve().parent / "src"


def load(mod):
    spec = importlib.util.spec_from_file_location(mod, SRC / f"{mod}.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.Q


for name, mod in SETS.items():
    out = ROOT / name
    qs = load(mod)
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fq, \
         (out / "qrels.tsv").open("w", encoding="utf-8") as fr:
        fr.write("query-id\tcorpus-id\tscore\n")
        for qid, qtype, text, gold in qs:
            rec = {"_id": qid, "text": text, "type": qtype}
            if qtype == "unanswerable":
                rec["absent_terms"] = list(gold)
            else:
                for path, grade in gold.items():
                    fr.write(f"{qid}\t{path}\t{grade}\n")
            fq.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(name, len(qs))
