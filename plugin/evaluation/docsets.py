"""Documentation folders with hand-written questions (``benchmarks/docsets``): the loader that
``benchmarks/docsets_eval.py`` and ``scripts/fit_confidence.py`` share.

A set is a folder holding ``docs/`` (indexed as a user would, ``ingest_folder``),
``queries.jsonl`` (``_id``, ``text``, ``type``; ``type`` ``unanswerable`` for a question the
docs cannot answer) and ``qrels.tsv`` (``query-id``, ``corpus-id`` = the path relative to
``docs/``, which is the resource id an ingest of that folder gives, ``score``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hybridsag.errors import InputError

__all__ = ["DocQuestion", "UNANSWERABLE", "load_docset"]

#: The ``type`` of a question the set's docs cannot answer (it has no gold).
UNANSWERABLE = "unanswerable"


@dataclass(frozen=True, slots=True)
class DocQuestion:
    """One question of a docs set: its id, text, type and gold resource ids (empty for an
    unanswerable one)."""

    qid: str
    text: str
    type: str
    gold: frozenset[str]

    @property
    def answerable(self) -> bool:
        return self.type != UNANSWERABLE


def load_docset(root: Path) -> list[DocQuestion]:
    """The questions of the set in ``root``, in file order. :class:`InputError` names a missing
    file, an answerable question without gold or an unanswerable one with gold."""
    root = Path(root)
    for name in ("queries.jsonl", "qrels.tsv"):
        if not (root / name).is_file():
            raise InputError(f"{root / name} is missing: a docs set holds docs/, queries.jsonl "
                             "and qrels.tsv")  # fmt: skip
    gold: dict[str, set[str]] = {}
    for n, line in enumerate((root / "qrels.tsv").read_text("utf-8").splitlines()):
        parts = line.split("\t")
        if not line.strip() or (n == 0 and parts[0] == "query-id"):
            continue
        gold.setdefault(parts[0], set()).add(parts[1])
    out = []
    for line in (root / "queries.jsonl").read_text("utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        mine = frozenset(gold.get(q["_id"], ()))
        kind = str(q.get("type", ""))
        if (kind == UNANSWERABLE) == bool(mine):
            raise InputError(f"{root}: question {q['_id']!r} of type {kind!r} "
                             + ("has gold" if mine else "has no gold"))  # fmt: skip
        out.append(DocQuestion(q["_id"], q["text"], kind, mine))
    return out
