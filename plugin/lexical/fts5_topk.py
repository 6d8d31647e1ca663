"""FTS5's BM25 top ``k`` without scoring every matching row: a MaxScore bound over the query terms.

``ORDER BY bm25(...) LIMIT k`` makes FTS5 score every row that matches the query, so the cost
follows the postings of the query's terms: on a million passages a question holding "film" scores
292,467 rows (about 0.5 µs a posting) to keep 50. Most of those rows hold nothing but the
question's common words, and a term adds at most ``idf(term) * (k1 + 1)`` to a row's score
(:func:`term_bound`), so a row holding only common terms can be ruled out once ``k`` rows are
known to score more than all the common terms together could give it. That is MaxScore (Turtle
and Flood, 1995), here on FTS5's own statements and numbers:

1. the *floor*: FTS5 ranks the rows holding a rare (*essential*) term on the essential terms
   alone; the ``k``-th of those scores is a lower bound of the ``k``-th best whole score (a
   row's score is a sum of non-negative parts, one a term, and each part depends only on the
   term and the row, so it is the same in any query that holds the term);
2. the most common terms are *left out* while their bounds (and the must phrase's) sum to less
   than the floor: no row without an essential term can reach the top ``k``;
3. FTS5 ranks the rows holding an essential term by their essential score (its statement names
   only the essential terms, so it never walks a left-out term's postings: ``bm25()`` walks
   every term's postings it is given, once a statement, to count its rows); each of those rows
   gets the left-out terms' part of its score added from its stored tokens, as ``bm25()``
   computes it (:func:`bm25_part`: the IDF from the document frequency kept per state of the
   table, the row's token counts from the ``docsize`` record FTS5 keeps). A row ranked below
   the last one read scores at most that row's essential score plus the left-out terms'
   bounds: once the ``k``-th whole score beats that, and every row holding no essential term
   (``floor``, above), the top ``k`` is known; else the essential ranking is read four times
   deeper.

The rows and scores are those of ``ORDER BY bm25() LIMIT k`` (a tie at the ``k``-th score may be
cut at another row, as FTS5's own sort may cut it; scores agree to rounding). A row whose stored
tokens do not split into the counts FTS5 recorded (a token FTS5's ``unicode61`` reads otherwise
than a space-joined one) makes the caller run the plain statement, as where nothing is common
enough, the floor is too low, or the terms hold few postings. Reference: ``bm25()`` in
``ext/fts5/fts5_aux.c``; sqlite.org/fts5.html section 5.1.1.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hybridsag.records.dialect import select_in

__all__ = [
    "BM25_B",
    "BM25_K1",
    "Fts5Stats",
    "Fts5TopK",
    "bm25_part",
    "fold_text",
    "fts5_varints",
    "idf",
    "strip_diacritics",
    "term_bound",
]

#: Okapi BM25 parameters as FTS5's ``bm25()`` fixes them (k1 = 1.2, b = 0.75; sqlite.org/fts5.html
#: section 5.1.1).
BM25_K1 = 1.2
BM25_B = 0.75

#: FTS5's ``<table>_data`` records: the row count and token totals, and the segment structure
#: (whose write counter moves with every committed write), which together key what was read
_AVERAGES_ID, _STRUCTURE_ID = 1, 10
#: a token as FTS5's ``unicode61`` tokenizer with ``tokenchars '-_.'`` reads it (letters,
#: digits, ``-``, ``_``, ``.``); a query term of another shape (a phrase) is never left out
_TOKEN = re.compile(r"[\w.\-]+")
#: slack on a bound, so that float rounding never makes it smaller than what it bounds
_SLACK = 1e-9
#: the most document frequencies kept for one state of the table (more are read, not kept)
_MAX_FREQS = 200_000
#: a term may be left out when at least one row in this many holds it
_COMMON = 100
#: the deepest essential ranking the bound reads (a deeper one: the plain statement pays more)
_MAX_ESSENTIAL_DEPTH = 4000


def strip_diacritics(term: str) -> str:
    """What FTS5's ``remove_diacritics 2`` does to a token: combining marks removed after
    canonical decomposition (ligatures such as ``ø`` and ``æ`` stay)."""
    if term.isascii():
        return term
    decomposed = unicodedata.normalize("NFD", term)
    return unicodedata.normalize(
        "NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    )


class _Fold(dict[int, int | None]):
    """``str.translate`` table of :func:`fold_text`: a combining mark maps to None (dropped),
    any other code point to itself, worked out on first sight and kept."""

    def __missing__(self, code: int) -> int | None:
        value = None if unicodedata.combining(chr(code)) else code
        self[code] = value
        return value


_FOLD = _Fold()


def fold_text(text: str) -> str:
    """:func:`strip_diacritics` of every token of ``text`` at once (the marks are dropped
    character by character, so a whole column folds as its tokens do one by one)."""
    if text.isascii():
        return text
    return unicodedata.normalize(
        "NFC", unicodedata.normalize("NFD", text).translate(_FOLD)
    )


def fts5_varints(blob: bytes) -> list[int]:
    """The SQLite varints in ``blob`` (big-endian, 7 bits a byte, a ninth byte of 8), as FTS5
    writes its averages record (the row count, then each column's token total)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def idf(rows: int, hits: int) -> float:
    """FTS5's IDF: ``log((N - n + 0.5) / (n + 0.5))``, or 1e-6 where that is not positive."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else 1e-6


def bm25_part(term_idf: float, f: float, tokens: int, avgdl: float) -> float:
    """What one phrase adds to a row's ``bm25()`` score (positive): ``idf * f (k1 + 1) / (f +
    k1 (1 - b + b D / avgdl))`` with ``f`` its weighted count in the row and ``D`` the row's
    tokens, as ``fts5Bm25Function`` computes it."""
    length = 1 - BM25_B + BM25_B * tokens / avgdl
    return term_idf * ((f * (BM25_K1 + 1.0)) / (f + BM25_K1 * length))


def term_bound(rows: int, hits: int) -> float:
    """The most a term held by ``hits`` of ``rows`` rows adds to a row's score: its IDF times
    ``k1 + 1``, the limit of ``f (k1 + 1) / (f + k1 D)`` as the weighted count ``f`` grows."""
    return idf(rows, hits) * (BM25_K1 + 1.0) * (1.0 + _SLACK) + _SLACK


@dataclass(slots=True)
class Fts5Stats:
    """What the bound reads besides the rows, for one committed state of the table (``key``):
    FTS5's row count, its tokens in all columns, the document frequencies asked for so far,
    and the phrases' score parts read so far (:mod:`~hybridsag.lexical.fts5_parts`, keyed by
    column weights, then phrase; ``kept_postings`` counts their rows)."""

    key: tuple[bytes, bytes]
    rows: int
    tokens: int = 0
    freqs: dict[str, int] = field(default_factory=dict)
    parts: dict[tuple[float, ...], dict[str, Any]] = field(default_factory=dict)
    kept_postings: int = 0


class Fts5TopK:
    """The bounded top ``k`` of one FTS5 table (``table``, with its ``fts5vocab`` row table
    ``vocab``), and the document frequencies it keeps.

    A document frequency costs FTS5 a walk of the term's postings (10 ms for "film" in a million
    rows); they are kept per state of the table, so a term asked for again costs a dictionary
    lookup until the next committed write."""

    def __init__(self, table: str, vocab: str) -> None:
        self.table = table
        self.vocab = vocab
        self._lock = threading.Lock()
        self._stats: Fts5Stats | None = None

    # -- what bm25() reads ----------------------------------------------------------------------

    def stats(self, conn: Any) -> Fts5Stats:
        """The table's :class:`Fts5Stats` as ``conn`` sees it (read again after a write)."""
        blocks = dict(
            conn.execute(
                f"SELECT id, block FROM {self.table}_data WHERE id IN (?, ?)",
                (_AVERAGES_ID, _STRUCTURE_ID),
            ).fetchall()
        )
        averages = bytes(blocks.get(_AVERAGES_ID) or b"")
        key = (averages, bytes(blocks.get(_STRUCTURE_ID) or b""))
        with self._lock:
            if self._stats is not None and self._stats.key == key:
                return self._stats
        values = fts5_varints(averages)
        stats = Fts5Stats(key, values[0] if values else 0, sum(values[1:]))
        with self._lock:
            self._stats = stats
        return stats

    def doc_freqs(
        self, conn: Any, lexemes: Sequence[str], stats: Fts5Stats | None = None
    ) -> dict[str, int]:
        """How many rows hold each lexeme (FTS5's folded form); absent: none."""
        stats = stats or self.stats(conn)
        missing = [t for t in dict.fromkeys(lexemes) if t not in stats.freqs]
        found = select_in(conn, f"SELECT term, doc FROM {self.vocab}", "term", missing)
        counts = {t: int(found[t][1]) if t in found else 0 for t in missing}
        with self._lock:  # entries are only ever added, so the reads above need no lock
            for term in missing[: max(_MAX_FREQS - len(stats.freqs), 0)]:
                stats.freqs[term] = counts[term]
        known = {t: counts[t] if t in counts else stats.freqs[t] for t in lexemes}
        return {t: n for t, n in known.items() if n}

    # -- the bounded top k ------------------------------------------------------------------------

    def top(
        self,
        conn: Any,
        *,
        terms: Sequence[str],
        must: str | None,
        weights: Sequence[float],
        k: int,
        min_postings: int,
        build_match: Callable[..., str],
        stats: Fts5Stats | None = None,
    ) -> list[tuple[int, float]] | None:
        """``(rowid, bm25 score)`` of the top ``k`` rows of ``build_match(terms, must=must)``
        as ``ORDER BY bm25(table, *weights) LIMIT k`` ranks them (negative scores, best
        first), or None where the bound does not pay or cannot decide (fewer postings than
        ``min_postings``, no common term, a bound above the scores): the caller then runs the
        plain statement. Call it inside a read transaction, so that every statement reads one
        state of the table; ``stats``, when given, is :meth:`stats` read in that transaction
        (several queries ranked together read it once)."""
        stats = stats or self.stats(conn)
        terms = [t for t in terms if t]
        if not stats.rows or k < 1 or not terms:
            return None
        lexemes = [strip_diacritics(t) for t in terms]
        single = [bool(_TOKEN.fullmatch(x)) for x in lexemes]
        must_lexemes = _TOKEN.findall(strip_diacritics(must.lower())) if must else []
        freqs = self.doc_freqs(
            conn, [x for x, ok in zip(lexemes, single, strict=True) if ok] + must_lexemes, stats
        )
        # what the plain statement walks: every term's postings (bm25() counts each term's rows)
        postings = sum(freqs.get(x, 0) for x in [*lexemes, *must_lexemes])
        if postings < max(min_postings, 1):
            return None
        copies = Counter(x for x, ok in zip(lexemes, single, strict=True) if ok and x in freqs)
        # the terms that may be left out: the common ones, most postings first; one term of
        # the query stays essential
        common = sorted(
            (x for x in copies if freqs[x] * _COMMON >= stats.rows), key=lambda x: (-freqs[x], x)
        )
        if len(common) == len(set(lexemes)):
            common = common[:-1]
        if not common:
            return None
        if not must:
            must_bound = 0.0
        elif len(must_lexemes) == 1 and must_lexemes[0] in freqs:
            must_bound = term_bound(stats.rows, freqs[must_lexemes[0]])
        else:  # a phrase: no more common than no row at all
            must_bound = term_bound(stats.rows, 0)

        def split(out: Sequence[str]) -> tuple[list[str], list[str]]:
            """The query's terms as (essential, left out), copies kept, for left-out lexemes."""
            gone = set(out)
            pairs = list(zip(terms, lexemes, strict=True))
            return [t for t, x in pairs if x not in gone], [t for t, x in pairs if x in gone]

        def essential_top(out: Sequence[str], depth: int) -> list[tuple[int, float]]:
            return self._ranked(conn, weights, build_match(split(out)[0], must=must), depth)

        # a lower bound of the k-th best score: the k-th best essential part with every common
        # term left out (a row's whole score is at least its essential part)
        first = essential_top(common, k)
        if len(first) < k:
            return None
        floor = first[-1][1]
        out: list[str] = []
        bound = must_bound
        for x in common:  # leave out the most common terms whose bounds stay under the floor
            b = term_bound(stats.rows, freqs[x]) * copies[x]
            if bound + b >= floor:
                break
            out.append(x)
            bound += b
        if not out:
            return None
        # the rows holding an essential term, by their essential part, each with its left-out
        # part added from its stored tokens; a row ranked below the last one read scores at
        # most that one's essential part and the left-out bounds, a row holding no essential
        # term at most ``bound``, under the floor
        left = {x: copies[x] for x in out}
        left_bound = bound - must_bound
        depth = k
        plain = first if len(out) == len(common) else essential_top(out, depth)
        while True:
            parts = self._left_out_parts(conn, [r for r, _ in plain], left, freqs, weights, stats)
            if parts is None:
                return None
            best = sorted(
                ((r, v + parts[r]) for r, v in plain), key=lambda r: (-r[1], r[0])
            )[:k]
            if len(best) < k:
                return None
            beyond = plain[-1][1] + left_bound if len(plain) >= depth else -math.inf
            if best[-1][1] > max(beyond, bound):
                return [(rowid, -score) for rowid, score in best]
            if len(plain) < depth or depth >= _MAX_ESSENTIAL_DEPTH:
                return None
            depth *= 4
            plain = essential_top(out, depth)

    def _left_out_parts(
        self,
        conn: Any,
        rowids: Sequence[int],
        left: Mapping[str, int],
        freqs: Mapping[str, int],
        weights: Sequence[float],
        stats: Fts5Stats,
    ) -> dict[int, float] | None:
        """Each row's score from the terms ``left`` (lexeme -> copies in the query), as
        ``bm25()`` adds it, from the row's stored tokens and the ``docsize`` record FTS5 keeps
        of it; None when a row's stored tokens do not split into the counts FTS5 recorded."""
        if not rowids:
            return {}
        avgdl = stats.tokens / stats.rows
        idfs = {x: idf(stats.rows, freqs[x]) for x in left}
        table = self.table
        rows = select_in(
            conn, f"SELECT d.id, d.sz, t.* FROM {table}_docsize d JOIN {table} t ON t.rowid = d.id",
            "d.id", rowids,
        )
        out: dict[int, float] = {}
        for rowid in rowids:
            row = rows.get(rowid)
            if row is None or row[1] is None:
                return None
            sizes = fts5_varints(bytes(row[1]))
            columns = [fold_text(text or "").split() for text in row[2:]]
            if [len(c) for c in columns] != sizes[: len(columns)]:
                return None
            tokens = sum(sizes)
            score = 0.0
            for x, n in left.items():
                f = 0.0
                for i, words in enumerate(columns):
                    hits = words.count(x)
                    if hits:
                        f += (weights[i] if i < len(weights) else 1.0) * hits
                if f:
                    part = bm25_part(idfs[x], f, tokens, avgdl)
                    for _ in range(n):  # one phrase a copy, as bm25() adds them
                        score += part
            out[rowid] = score
        return out

    def _ranked(
        self, conn: Any, weights: Sequence[float], match: str, k: int
    ) -> list[tuple[int, float]]:
        """FTS5's top ``k`` ``(rowid, score)`` of ``match`` (scores positive, best first)."""
        table = self.table
        return conn.execute(
            f"SELECT rowid, -bm25({table}, {', '.join('?' * len(weights))}) AS s "
            f"FROM {table} WHERE {table} MATCH ? ORDER BY s DESC, rowid LIMIT ?",
            [*weights, match, k],
        ).fetchall()
