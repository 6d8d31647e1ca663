"""Duplicate results collapse into one: the best-ranked copy stays, and lists the others.

Documentation repeats itself: an option's paragraph is pasted into every command page that takes
the option, a function is copied between two modules. Shown as results, the copies push the
passage that answers the query out of the first places (issue 27 item 6: three copies of
``strict-peer-deps``'s text from three pages stood above ``legacy-peer-deps``'s own section).

Two chunks are copies when their own section headings (the last heading of each heading path)
are the same as :func:`~hybridsag.fusion.text.normalize_title` compares titles, and their texts
are the same words in the same order (case, whitespace, punctuation and symbols dropped), or the
texts' word 3-shingles overlap by at least :data:`NEAR_DUPLICATE`
(Jaccard resemblance, Broder, "On the resemblance and containment of documents", 1997). The
heading takes part so that two options' identical bodies (``* Default: false``) under their own
headings, or two API pages that differ only in the function they document, stay apart.

Standard library only, no I/O.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Mapping, Sequence
from functools import lru_cache

from hybridsag.fusion.markdown import HEADING_JOIN
from hybridsag.fusion.text import normalize_title
from hybridsag.fusion.types import ChunkView, FusedHit

__all__ = ["NEAR_DUPLICATE", "SHINGLE", "collapse_duplicates", "resemblance"]

#: The Jaccard resemblance of two chunks' shingle sets from which they are one result. About
#: three words changed in a hundred (each changed word alters up to :data:`SHINGLE` shingles);
#: neighbouring chunks of one page, which share only their overlap sentences, stay far below.
NEAR_DUPLICATE = 0.8
#: Words per shingle (Broder's w-shingling; 3 keeps short chunks comparable).
SHINGLE = 3

# A word: a run of letters or digits; each Han, kana or Hangul character is a word of its own
# (those scripts do not separate words with spaces).
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+")


def _section(view: ChunkView) -> str:
    """The chunk's own section heading, normalised: copies must share it."""
    return normalize_title(view.heading_path.rsplit(HEADING_JOIN, 1)[-1])


def _words(text: str) -> list[str]:
    if text.isascii():  # NFKC leaves ASCII as it is
        return _ASCII_WORD.findall(text.lower())
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _shingles_of(words: list[str]) -> frozenset[int]:
    """The :data:`SHINGLE`-word shingles of ``words``, each as its hash: every set and index
    operation on an int is cheap where a tuple of strings is hashed again at each one (two
    different shingles of one 64-bit hash, about one chance in 2**64 a pair, would only move a
    resemblance by one shingle)."""
    if len(words) <= SHINGLE:
        return frozenset({hash(tuple(words))})
    return frozenset(hash(tuple(words[i : i + SHINGLE])) for i in range(len(words) - SHINGLE + 1))


#: Texts whose fingerprint is kept: a chunk that one search compares is often compared by the
#: next (the same popular passages); 4,096 texts of about 1,000 characters are a few tens of MB.
_FINGERPRINTS = 4096


@lru_cache(maxsize=_FINGERPRINTS)
def _fingerprint(text: str) -> tuple[str, frozenset[int]]:
    """``text``'s words joined by spaces (equal for exact copies; "" when it has none) and its
    shingles (:func:`_shingles_of`)."""
    words = _words(text)
    return " ".join(words), _shingles_of(words)


def _shingles(text: str) -> frozenset[int]:
    return _fingerprint(text)[1]


def resemblance(a: str, b: str) -> float:
    """The Jaccard resemblance of the word :data:`SHINGLE`-shingle sets of ``a`` and ``b``
    (case and punctuation ignored), in 0..1.

    >>> resemblance("npm ERR! code E404", "NPM err code e404")
    1.0
    """
    sa, sb = _shingles(a), _shingles(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 1.0


def collapse_duplicates(
    fused: Sequence[FusedHit],
    chunks: Mapping[str, ChunkView],
    *,
    threshold: float = NEAR_DUPLICATE,
) -> list[FusedHit]:
    """``fused`` with each copy of a chunk folded into the best-ranked one: that hit keeps its
    place, gets the copies' chunk ids in :attr:`FusedHit.duplicates` (in their fused order) and
    the rule name ``duplicates``; the copies are no longer results, and the ranks are renumbered
    ``1..n`` (so a caller that takes ``k`` results gets ``k`` distinct ones). Copies: the same
    normalised section heading, and the same normalised text or texts of a :func:`resemblance`
    of at least ``threshold``. A hit whose chunk is not in ``chunks`` is never compared.

    Raises:
        ValueError: ``threshold`` outside ``(0, 1]``.

    Example:
        >>> hits = [FusedHit(c, i, 0.0, ()) for i, c in enumerate("abc", start=1)]
        >>> views = {"a": ChunkView("a", "r1", "", "Opts", "Use --force."),
        ...          "b": ChunkView("b", "r2", "", "Opts", "use --FORCE"),
        ...          "c": ChunkView("c", "r3", "", "Opts", "Other text.")}
        >>> [(h.chunk_id, h.rank, h.duplicates) for h in collapse_duplicates(hits, views)]
        [('a', 1, ('b',)), ('c', 2, ())]
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"duplicate threshold must be in (0, 1], got {threshold!r}")
    kept: list[FusedHit] = []
    copies: list[list[str]] = []
    by_key: dict[tuple[str, str], int] = {}  # (section, words) normalised -> index in kept
    postings: dict[int, list[int]] = {}  # shingle -> indexes in kept
    sizes: list[int] = []  # index in kept -> its shingle count
    sections: list[str | None] = []  # index in kept -> its section (None: not compared)
    for hit in fused:
        view = chunks.get(hit.chunk_id)
        if view is None:
            kept.append(hit)
            copies.append([])
            sizes.append(0)
            sections.append(None)
            continue
        section = _section(view)
        # the words in order are the text with case, spaces and punctuation dropped
        joined, mine = _fingerprint(view.text)
        key = (section, joined)
        owner = by_key.get(key) if joined else None
        if owner is None:
            owner = _resembling(mine, section, postings, sizes, sections, threshold)
        if owner is not None:
            copies[owner].append(hit.chunk_id)
            continue
        if joined:
            by_key[key] = len(kept)
        for shingle in mine:
            postings.setdefault(shingle, []).append(len(kept))
        sizes.append(len(mine))
        sections.append(section)
        kept.append(hit)
        copies.append([])
    return [
        dataclasses.replace(
            hit,
            rank=position,
            duplicates=hit.duplicates + tuple(dup),
            rules=hit.rules + ("duplicates",) if dup else hit.rules,
        )
        for position, (hit, dup) in enumerate(zip(kept, copies), start=1)
    ]


def _resembling(
    mine: frozenset[int],
    section: str,
    postings: Mapping[int, list[int]],
    sizes: Sequence[int],
    sections: Sequence[str | None],
    threshold: float,
) -> int | None:
    """The best-ranked kept chunk (its index) of the same ``section`` whose shingles resemble
    ``mine`` by at least ``threshold``, found through the shingles they share (an inverted
    index: no pairwise comparison with chunks that share nothing)."""
    shared: dict[int, int] = {}
    for shingle in mine:
        for i in postings.get(shingle, ()):
            shared[i] = shared.get(i, 0) + 1
    for i in sorted(shared):
        both = shared[i]
        if sections[i] == section and both / (len(mine) + sizes[i] - both) >= threshold:
            return i
    return None
