#!/usr/bin/env python3
"""Build a definition-lookup retrieval set from the manual pages installed on this machine.

Each manual page gives one passage and at most one question: the question is the one-line
description of its NAME section (``ls - list directory contents`` gives "list directory
contents"), the passage is the page's DESCRIPTION section (the first ``--chars`` characters) with
the page name as title. "Find the thing this sentence describes" is the entity/definition-lookup
kind of search, where the words of the question and of the passage often differ; in a language
the packaged English embedding model cannot read (the Russian pages of ``manpages-ru``) it is the
kind where only the lexical paths can answer. The output is the BEIR-style layout ``hybridsag
eval`` reads (corpus.jsonl, queries.jsonl, qrels.tsv).

Pages are rendered with ``man -l`` (man-db) and ``col -bx``; pages whose NAME line has no
description, whose description or passage repeats another page's, or whose DESCRIPTION is shorter
than 200 characters are skipped. The sample is seeded, so the same installed pages give the same
set.

    apt-get install -y manpages-ru manpages-fr       # the translated pages (Debian)
    python benchmarks/build_manpage_set.py --man-dir /usr/share/man --out benchmarks/devsets/manpages-en
    python benchmarks/build_manpage_set.py --man-dir /usr/share/man/ru --out benchmarks/devsets/manpages-ru
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["main", "parse_page"]

#: NAME and DESCRIPTION headings in the languages the set builder knows.
NAME_HEADINGS = {"NAME", "НАЗВАНИЕ", "ИМЯ", "NOM", "BEZEICHNUNG", "NOMBRE"}
DESCRIPTION_HEADINGS = {"DESCRIPTION", "ОПИСАНИЕ", "BESCHREIBUNG", "DESCRIPCIÓN"}
_HEADING = re.compile(r"^[^\s].*$")
_DASH = re.compile(r"\s+[-—–]+\s+|\s+\\-\s+")


def render(path: Path) -> str:
    """The page as plain text (no overstrikes), or '' when man cannot render it."""
    env = dict(os.environ, MANWIDTH="1000", MAN_KEEP_FORMATTING="0")
    try:
        out = subprocess.run(
            ["man", "-l", "-E", "UTF-8", str(path)],
            capture_output=True, env=env, timeout=30, check=False,
        ).stdout
        plain = subprocess.run(["col", "-bx"], input=out, capture_output=True, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return plain.decode("utf-8", errors="replace")


def parse_page(text: str) -> tuple[str, str, str] | None:
    """``(page name, NAME description, DESCRIPTION text)`` of a rendered page, or None."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines()[1:]:
        if _HEADING.match(line):
            current = line.strip().upper()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line.strip())
    name_lines = next((v for k, v in sections.items() if k in NAME_HEADINGS), None)
    desc_lines = next((v for k, v in sections.items() if k in DESCRIPTION_HEADINGS), None)
    if not name_lines or not desc_lines:
        return None
    name_line = " ".join(x for x in name_lines if x)
    parts = _DASH.split(name_line, maxsplit=1)
    if len(parts) != 2:
        return None
    page, question = parts[0].strip(), parts[1].strip()
    passage = re.sub(r"\n{3,}", "\n\n", "\n".join(desc_lines)).strip()
    if len(question.split()) < 3 or len(passage) < 200:
        return None
    return page, question, passage


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--man-dir", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--sections", default="1,8", help="manual sections to read (default 1,8)")
    ap.add_argument("--pages", type=int, default=1500, help="most pages to render (a sample)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--chars", type=int, default=1500, help="passage length cap")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    files = sorted(
        p for s in args.sections.split(",") for p in (args.man_dir / f"man{s}").glob("*") if p.is_file()
    )
    random.Random(args.seed).shuffle(files)
    files = files[: args.pages]
    with ThreadPoolExecutor(max_workers=2) as pool:
        rendered = list(pool.map(render, files))
    seen_q: set[str] = set()
    seen_p: set[str] = set()
    items = []
    for path, text in zip(files, rendered):
        parsed = parse_page(text)
        if parsed is None:
            continue
        page, question, passage = parsed
        passage = passage[: args.chars]
        key_q, key_p = question.lower(), passage[:300]
        if key_q in seen_q or key_p in seen_p:
            continue
        seen_q.add(key_q)
        seen_p.add(key_p)
        items.append((path.name.split(".gz")[0], page, question, passage))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for pid, page, _q, passage in items:
            fh.write(json.dumps({"_id": pid, "title": page, "text": passage}, ensure_ascii=False) + "\n")
    chosen = items[: args.queries]
    with open(args.out / "queries.jsonl", "w", encoding="utf-8") as fq, open(
        args.out / "qrels.tsv", "w", encoding="utf-8"
    ) as fr:
        fr.write("query-id\tcorpus-id\tscore\n")
        for i, (pid, _page, question, _p) in enumerate(chosen):
            fq.write(json.dumps({"_id": f"q{i}", "text": question}, ensure_ascii=False) + "\n")
            fr.write(f"q{i}\t{pid}\t1\n")
    sys.stdout.write(f"{len(files)} pages read, {len(items)} passages, {len(chosen)} questions\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
