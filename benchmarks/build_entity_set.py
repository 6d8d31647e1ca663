#!/usr/bin/env python3
"""Build an entity-search dev set: keyword-list queries that name a kind of entity and one or two
of its attributes, over one-paragraph encyclopedia abstracts, with graded relevance.

The material is the passages of the shared 2wiki corpus (one-paragraph Wikipedia abstracts);
its questions and qrels are never read. The opening sentence of most abstracts defines the
entity: "Lloyd is a 2001 American comedy film", "Astrid North (24 August 1973, Berlin ...) was a
German soul singer". From that sentence :func:`parse_abstract` reads

- the **kind**: the head noun of the phrase after "is a" / "was an" ("film", "singer"),
- and up to three **attributes**: the decade of the first year in the sentence ("2000s"), the
  capitalised word just before the lowercase phrase (a nationality or place adjective,
  "American"), and the lowercase word just before the head ("comedy", "soul").

A query names a kind (plural, as entity-search queries do: "films") and one or two attributes
of one seeded abstract, in keyword style and seeded order ("american comedy films", "singers
german 1970s"). Every passage of the corpus of the same kind that shares at least one of the
query's attributes is relevant, graded by how many of them it shares (1 or 2): the DBpedia-Entity
kind of search, where many passages are relevant and the words of the query are common ones.
Queries with fewer than 3 relevant passages, or more than ``--max-relevant``, are skipped, and no
two queries are the same words.

The corpus is the whole 2wiki corpus as it is (so the passage embeddings are the ones of 2wiki's
own index, and the many abstracts that are not of the query's kind stay as distractors).

    python benchmarks/build_entity_set.py --data /work/shared/data/2wiki \\
        --out benchmarks/devsets/entity-2wiki --queries 200 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["main", "parse_abstract", "plural"]

#: "X is a ...", "X was an ...": the defining clause of an abstract's first sentence.
_DEFINES = re.compile(r"\b(?:is|was)\s+(?:a|an)\s+(.{3,160})")
#: Words that end the describing phrase (its head noun is the word before them).
_ENDS = re.compile(
    r"^(?:of|in|from|by|for|who|which|that|and|or|with|on|at|to|based|located|known|born|"
    r"directed|written|produced|released|created|founded|situated|best|whose|where|as)$"
)
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z\-]*")


def parse_abstract(text: str) -> tuple[str, dict[str, str]] | None:
    """``(kind, attributes)`` of an abstract's first sentence (see the module docstring), or
    None when it defines nothing this builder can read. Attribute keys: ``decade``,
    ``adjective`` (capitalised, as written) and ``modifier``.

    >>> parse_abstract("Lloyd is a 2001 American comedy film. The film was released in 2001.")
    ('film', {'decade': '2000s', 'adjective': 'American', 'modifier': 'comedy'})
    """
    first = re.split(r"(?<=[a-z)])\.\s", text.strip(), maxsplit=1)[0]
    m = _DEFINES.search(first)
    if not m:
        return None
    words = _WORD.findall(m.group(1))
    adjective = ""
    lower: list[str] = []
    for i, w in enumerate(words):
        if _ENDS.match(w):
            break
        if w[0].isupper():
            # one capitalised word, not the end of a name ("Hong Kong"): an adjective; the
            # lowercase words before it qualify it ("a former Indian cricketer") and are dropped
            adjective = w if i == 0 or not words[i - 1][0].isupper() else ""
            lower = []
            continue
        lower.append(w)
    lower = [w for w in lower if w not in {"the", "a", "an"}]
    if not lower or not lower[-1].isalpha() or len(lower[-1]) < 3 or lower[-1].endswith(("ed", "ly")):
        return None
    attrs: dict[str, str] = {}
    year = _YEAR.search(first)
    if year:
        attrs["decade"] = f"{int(year.group(1)) // 10 * 10}s"
    if adjective:
        attrs["adjective"] = adjective
    if len(lower) >= 2 and lower[-2].isalpha() and len(lower[-2]) >= 3:
        attrs["modifier"] = lower[-2]
    return lower[-1].lower(), attrs


def plural(noun: str) -> str:
    """An English plural by the regular rules (``city`` -> ``cities``, ``church`` ->
    ``churches``, ``nobleman`` -> ``noblemen``); other irregular nouns come out regular, as a user typing keywords often writes
    them."""
    if noun.endswith("man"):
        return noun[:-3] + "men"
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/2wiki"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--max-relevant", type=int, default=150)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in (args.data / "corpus.jsonl").open(encoding="utf-8")]
    parsed: dict[str, tuple[str, dict[str, str]]] = {}
    for row in rows:
        got = parse_abstract(str(row.get("text", "")))
        if got and got[1]:
            parsed[str(row["_id"])] = got
    by_kind: dict[str, list[str]] = defaultdict(list)
    for pid, (kind, _attrs) in parsed.items():
        by_kind[kind].append(pid)
    rng = random.Random(args.seed)
    seeds = sorted(parsed)
    rng.shuffle(seeds)
    out_q: list[tuple[str, str, dict[str, int]]] = []
    seen: set[frozenset[str]] = set()
    for pid in seeds:
        if len(out_q) >= args.queries:
            break
        kind, attrs = parsed[pid]
        if len(by_kind[kind]) < 3:
            continue
        keys = sorted(attrs)
        chosen = rng.sample(keys, min(len(keys), rng.choice((1, 2))))
        values = {k: attrs[k].lower() for k in chosen}
        grades: dict[str, int] = {}
        for other in by_kind[kind]:
            o_attrs = parsed[other][1]
            shared = sum(o_attrs.get(k, "").lower() == v for k, v in values.items())
            if shared:
                grades[other] = shared
        if not 3 <= len(grades) <= args.max_relevant:
            continue
        words = [*values.values(), plural(kind)]  # attributes in seeded order, the kind last
        if frozenset(words) in seen:
            continue
        seen.add(frozenset(words))
        out_q.append((f"e{len(out_q)}", " ".join(words), grades))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as q, (
        args.out / "qrels.tsv"
    ).open("w", encoding="utf-8") as r:
        r.write("query-id\tcorpus-id\tscore\n")
        for qid, text, grades in out_q:
            q.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
            for cid, g in sorted(grades.items()):
                r.write(f"{qid}\t{cid}\t{g}\n")
    pairs = sum(len(g) for _q, _t, g in out_q)
    sys.stdout.write(
        f"{len(parsed)} abstracts parsed, {len(by_kind)} kinds; {len(out_q)} queries, "
        f"{pairs} graded pairs ({pairs / max(len(out_q), 1):.1f} a query), {len(rows)} passages\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
