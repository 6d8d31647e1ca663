"""FTS5's BM25 ranking as a sum of per-phrase parts, each phrase's part read once per state of
the table.

``bm25()`` scores a row as ``-(0.0 + part_0 + part_1 + ...)``, one part per phrase of the MATCH
expression in the order the expression names them, where a phrase's part depends only on the
phrase, the row and the table (its IDF counts the rows holding the phrase, in the whole table),
never on the other phrases (``fts5Bm25Function`` in ``ext/fts5/fts5_aux.c``). A phrase alone,
``MATCH '"phrase"'``, therefore gives every row holding it its part (``-bm25()``), and any quoted-OR
query of the phrases (with or without a must phrase, :func:`~hybridsag.lexical.queries.build_match`)
is ranked by adding those parts in the same order, from 0.0: the same float operations, so the
same scores bit for bit, and the same rows (an OR query matches the rows holding any phrase; a
``"must" AND (...)`` query the rows holding the must phrase and any other).

What that saves: ``bm25()`` walks every phrase's postings once per statement to count its rows,
so SAG2's next-hop round (one "new terms OR question" query and one query per new term, each
naming every question term) walked each common question word twenty-two times, and the bm25 path
and SAG2's first round once more each. Here a phrase's parts are read once (one statement for
all the phrases a call lacks) and kept with the table's :class:`~hybridsag.lexical.fts5_topk.Fts5Stats`,
which is replaced when a committed write changes the table: a search after a write, a delete
included, never adds a part read before it. Kept parts are bounded by :data:`MAX_KEPT_POSTINGS`;
a query whose phrases hold more than ``max_postings`` postings (a common word in a large index,
where the bounded top k of :mod:`~hybridsag.lexical.fts5_topk` is the better plan) is left to the
plain statement.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybridsag.lexical.fts5_topk import Fts5Stats, strip_diacritics

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MAX_KEPT_POSTINGS",
    "Fts5Parts",
    "PhraseParts",
    "phrase_lexemes",
    "phrases_of",
    "rank_by_parts",
]

#: the most postings (a row and its part, 16 bytes) kept for one state of the table, all phrases
#: together (16 MB); past it the kept parts are dropped and gathered again
MAX_KEPT_POSTINGS = 1_000_000
#: a token as FTS5's unicode61 (tokenchars ``-_.``) reads it, for the postings estimate
_TOKEN = re.compile(r"[\w.\-]+")


@dataclass(frozen=True, slots=True)
class PhraseParts:
    """The rows holding one phrase (``chunks.id``, ascending) and each one's part of the score
    (positive, as ``-bm25()`` of the phrase alone)."""

    rows: np.ndarray
    parts: np.ndarray


def phrases_of(terms: Sequence[str], must: str | None) -> list[str]:
    """The phrases of ``build_match(terms, must=must)`` in the order the expression names them
    (the must phrase first; empty terms are not named)."""
    return ([must] if must else []) + [t for t in terms if t]


def phrase_lexemes(phrase: str) -> list[str]:
    """The tokens FTS5 reads in ``phrase``, as its vocabulary holds them (lowercase, diacritics
    removed; unicode61 with tokenchars ``-_.``)."""
    return _TOKEN.findall(strip_diacritics(phrase.lower()))


def rank_by_parts(
    parts: Sequence[PhraseParts], *, must: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, scores)`` of the query whose phrases' parts are ``parts`` (in the expression's
    order; with ``must`` the first is the must phrase): every matching row with ``bm25()``'s
    score (negative, lower is better), ordered by score, then row. Each row's sum runs phrase by
    phrase from 0.0, as ``bm25()`` adds them (a phrase the row lacks adds 0.0, which leaves
    every float as it was). A must query reads the other phrases only at the must phrase's rows
    (a binary search of each phrase's rows), so a common word among them costs its lookups,
    not a pass over its postings."""
    import numpy as np  # only where parts are summed: a lexical command alone never loads it

    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    if must:
        cand = parts[0].rows
        sums = np.zeros(len(cand))
        sums += parts[0].parts
        held = np.zeros(len(cand), bool)  # "must" AND (the others): holds another phrase
        for p in parts[1:]:
            at, found = _positions(p.rows, cand)
            held |= found
            sums[found] += p.parts[at[found]]
        if len(parts) > 1:
            cand, sums = cand[held], sums[held]
    else:
        cand = np.unique(np.concatenate([p.rows for p in parts]))
        sums = np.zeros(len(cand))
        for p in parts:  # every row of a phrase is in ``cand``, once
            sums[np.searchsorted(cand, p.rows)] += p.parts
    if not len(cand):
        return np.empty(0, np.int64), np.empty(0, np.float64)
    scores = -1.0 * sums
    order = np.lexsort((cand, scores))
    return cand[order], scores[order]


def _positions(rows: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``wanted`` sits in the ascending ``rows``, and whether it is there."""
    import numpy as np

    at = np.searchsorted(rows, wanted)
    found = at < len(rows)
    found[found] = rows[at[found]] == wanted[found]
    return at, found


class Fts5Parts:
    """Per-phrase parts of one FTS5 table (``table``), kept in the table's current
    :class:`Fts5Stats` (so per committed state) and per column weights."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()

    def estimate(self, phrases: Sequence[str], freqs: dict[str, int]) -> int:
        """Postings the phrases hold at most (a phrase: its rarest token's document frequency,
        ``freqs`` keyed by folded token), to decide whether summing parts pays."""
        return sum(
            min((freqs.get(t, 0) for t in phrase_lexemes(phrase)), default=0)
            for phrase in phrases
        )

    def warm(self, stats: Fts5Stats, weights: Sequence[float]) -> bool:
        """Whether state ``stats`` keeps any phrase's parts for ``weights``: a ranking of
        several queries in this process gathered them since the table's last write."""
        key = tuple(float(w) for w in weights)
        with self._lock:
            return bool(stats.parts.get(key))

    def parts(
        self, conn: Any, stats: Fts5Stats, phrases: Sequence[str], weights: Sequence[float],
        build_match: Any,
    ) -> dict[str, PhraseParts]:
        """Each phrase's :class:`PhraseParts` as ``conn`` sees the table in state ``stats``
        (call inside the read transaction ``stats`` was read in): the kept ones, and the
        others read in one statement and kept."""
        key = tuple(float(w) for w in weights)
        with self._lock:
            kept = stats.parts.setdefault(key, {})
            found = {p: kept[p] for p in dict.fromkeys(phrases) if p in kept}
        missing = [p for p in dict.fromkeys(phrases) if p not in found]
        if missing:
            read = self._read(conn, missing, weights, build_match)
            with self._lock:
                size = sum(len(p.rows) for p in read.values())
                if stats.kept_postings + size > MAX_KEPT_POSTINGS:
                    for by_weights in stats.parts.values():
                        by_weights.clear()
                    stats.kept_postings = 0
                if size <= MAX_KEPT_POSTINGS:
                    stats.parts.setdefault(key, {}).update(read)
                    stats.kept_postings += size
            found.update(read)
        return found

    def _read(
        self, conn: Any, phrases: Sequence[str], weights: Sequence[float], build_match: Any
    ) -> dict[str, PhraseParts]:
        """One statement: every row holding each phrase, with ``-bm25()`` of the phrase alone."""
        import numpy as np

        table = self.table
        marks = ", ".join("?" * len(weights))
        one = (
            f"SELECT {{i}} AS q, rowid, -bm25({table}, {marks}) FROM {table} "
            f"WHERE {table} MATCH ?"
        )
        sql = " UNION ALL ".join(one.format(i=i) for i in range(len(phrases)))
        args: list[object] = []
        for phrase in phrases:
            args += [*weights, build_match([phrase])]
        rows: list[list[tuple[int, float]]] = [[] for _ in phrases]
        for q, rowid, part in conn.execute(sql, args):
            rows[q].append((rowid, part))
        out = {}
        for phrase, found in zip(phrases, rows, strict=True):
            found.sort()
            out[phrase] = PhraseParts(
                np.fromiter((r for r, _ in found), np.int64, len(found)),
                np.fromiter((p for _, p in found), np.float64, len(found)),
            )
        return out
