#!/usr/bin/env python3
"""Build a web-style code-question dev set: short natural-language questions ("how to get the
number of ...") over code snippets, from the source of installed Python packages.

Built as the shared ``pycode`` set is (a public function's first docstring sentence is the
question, the function with its docstring removed is the passage), with two differences: the
source is third-party packages installed beside hybridsag (never the standard library that
``pycode`` is built from), and the sentence is turned into the question a person types into a
search box, generically, by :func:`question_of`: "Returns the number of items." becomes "how to
get the number of items", "Create a client from settings." becomes "how to create a client from
settings". Only sentences that open with a verb in the third person ("Returns", "Creates") or
an imperative followed by a determiner ("Create a ...") are turned; others are not used as
questions (their functions stay in the corpus).

The corpus is every kept function of the packages (sampled, seeded, up to ``--passages``), the
questions the first ``--queries`` of them that give one; each question's one relevant passage is
its own function (grade 1). Test modules are left out, and each package gives at most
``--per-package`` functions (seeded), so that one large package does not make the set its own.

    python benchmarks/build_codeq_set.py --site .venv/lib/python3.11/site-packages \\
        --packages click,httpx,jinja2,starlette,anyio,apscheduler,pydantic_settings,rich \\
        --out benchmarks/devsets/codeq --queries 150 --passages 600 --seed 7
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
from pathlib import Path

__all__ = ["functions_of", "main", "question_of"]

#: Words that, after a verb, show it is the verb of a "do this to that" sentence.
_DETERMINERS = frozenset(
    "the a an all this that these its each any one every some given whether".split()
)
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_TICKS = re.compile(r"`+([^`]*)`+")


def question_of(sentence: str) -> str | None:
    """The search-box question of a docstring's first sentence, or None when it does not open
    with a verb this rephrasing can tell (see the module docstring).

    >>> question_of("Returns the number of items in the queue.")
    'how to get the number of items in the queue'
    >>> question_of("Create a new client from ``settings``.")
    'how to create a new client from settings'
    >>> question_of("This is a helper.") is None
    True
    """
    text = _TICKS.sub(r"\1", _ROLE.sub(r"\1", sentence)).strip().rstrip(".:;")
    words = text.split()
    if len(words) < 3 or len(words) > 12 or not words[0][:1].isupper():
        return None
    first = words[0].lower()
    if not first.isalpha():
        return None
    if first.endswith("s") and not first.endswith(("ss", "us", "is", "ys")):
        verb = first[:-2] if first.endswith(("sses", "shes", "ches", "xes")) else first[:-1]
    elif words[1].lower() in _DETERMINERS:
        verb = first
    else:
        return None
    if verb == "return":  # "Return the X" is what a person asks as "get the X"
        verb = "get"
    rest = " ".join(words[1:])
    return f"how to {verb} {rest}"


def functions_of(path: Path, root: Path) -> list[tuple[str, str, str]]:
    """``(id, first docstring sentence, code without the docstring)`` of every public function
    of at least 4 lines with a docstring in ``path`` (as ``pycode/build.py`` keeps them)."""
    try:
        text = path.read_text("utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or (node.end_lineno or node.lineno) - node.lineno < 4:
            continue
        first = re.split(r"(?<=\.)\s|\n\n", doc.strip())[0].replace("\n", " ").strip()
        body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
        if not body:
            continue
        head = lines[node.lineno - 1 : node.body[0].lineno - 1]
        code = "\n".join(head + lines[body[0].lineno - 1 : node.end_lineno])
        rel = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
        out.append((f"{rel}.{node.name}:{node.lineno}", first, code))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path, required=True, help="a site-packages folder")
    ap.add_argument("--packages", required=True, help="comma-separated top-level packages")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--passages", type=int, default=600)
    ap.add_argument("--per-package", type=int, default=250)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    items: list[tuple[str, str, str]] = []
    for pkg in args.packages.split(","):
        folder = args.site / pkg
        if not folder.is_dir():
            raise SystemExit(f"no package folder {folder}")
        found = [
            item
            for f in sorted(folder.rglob("*.py"))
            if "tests" not in f.parts and not f.name.startswith("test")
            for item in functions_of(f, args.site)
        ]
        # each package gives at most --per-package functions, so one big package does not
        # make the set its own
        random.Random(args.seed).shuffle(found)
        items.extend(found[: args.per_package])
    seen_code: set[str] = set()
    unique = []
    for item in items:  # one passage per function text (re-exported copies are left out)
        if item[2] not in seen_code:
            seen_code.add(item[2])
            unique.append(item)
    rng = random.Random(args.seed)
    rng.shuffle(unique)
    corpus = unique[: args.passages]
    questions: list[tuple[str, str]] = []
    asked: set[str] = set()
    for cid, first, _code in corpus:
        q = question_of(first)
        if q and q.lower() not in asked and len(questions) < args.queries:
            asked.add(q.lower())
            questions.append((cid, q))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for cid, _first, code in corpus:
            fh.write(json.dumps({"_id": cid, "title": "", "text": code}) + "\n")
    with (args.out / "queries.jsonl").open("w", encoding="utf-8") as q, (
        args.out / "qrels.tsv"
    ).open("w", encoding="utf-8") as r:
        r.write("query-id\tcorpus-id\tscore\n")
        for i, (cid, text) in enumerate(questions):
            q.write(json.dumps({"_id": f"c{i}", "text": text}) + "\n")
            r.write(f"c{i}\t{cid}\t1\n")
    sys.stdout.write(f"{len(unique)} functions, {len(corpus)} passages, {len(questions)} questions\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
