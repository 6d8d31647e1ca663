"""What fusion reads of a chunk's text, computed once when the chunk is written.

Every search used to derive these from each candidate's whole text: the script its prose is
written in (the ``query_language`` rule), its word shingles (the duplicate collapse) and
whether it is only headings (``drop_heading_only``). A chunk's text never changes after it is
written (a new version is new chunks), so the write path computes :func:`chunk_facts` once and
the store keeps it beside the text; a search reads it with the row (``ChunkView.facts``).
A view built by hand, or read from an index written before the facts were stored, has none:
:func:`facts_of` computes them from its text then (the same function, so the same values).

The shingles are the sorted, distinct 32-bit hashes (BLAKE2b) of the text's word
:data:`SHINGLE`-shingles: a stable hash, so that values stored by one process compare with
another's, and sorted, so that the smallest ones are the prefix that prefix filtering
indexes (:func:`prefix_length`). Two different shingles of one 32-bit hash (about one chance in
a million for a pair of 100-shingle chunks) move a resemblance by one shingle in a hundred.

Standard library only, no I/O.
"""

from __future__ import annotations

import math
import re
import struct
import unicodedata
from functools import lru_cache
from hashlib import blake2b

from hybridsag.fusion.text import dominant_script, is_heading_only
from hybridsag.fusion.types import ChunkFacts, ChunkView

__all__ = [
    "SHINGLE",
    "chunk_facts",
    "decode_shingles",
    "encode_shingles",
    "facts_of",
    "prefix_length",
    "shingles",
    "words",
]

#: Words per shingle (Broder's w-shingling; 3 keeps short chunks comparable).
SHINGLE = 3

# A word: a run of letters or digits; each Han, kana or Hangul character is a word of its own
# (those scripts do not separate words with spaces).
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+")


def words(text: str) -> list[str]:
    """The words of ``text``: NFKC, case folded, punctuation and symbols dropped.

    >>> words("NPM err! code E404")
    ['npm', 'err', 'code', 'e404']
    """
    if text.isascii():  # NFKC leaves ASCII as it is
        return _ASCII_WORD.findall(text.lower())
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _hash(shingle: str) -> int:
    return int.from_bytes(blake2b(shingle.encode("utf-8"), digest_size=4).digest(), "little")


def shingles(text: str) -> tuple[int, ...]:
    """The sorted, distinct hashes of the word :data:`SHINGLE`-shingles of ``text``; a text of
    at most :data:`SHINGLE` words is one shingle of all its words (so two short texts are
    copies only when their words are the same), a text of none is the one shingle ``""``.

    >>> shingles("a b c") == shingles("A, b; c!") != shingles("a b c d")
    True
    """
    w = words(text)
    if len(w) <= SHINGLE:
        return (_hash(" ".join(w)),)
    return tuple(
        sorted({_hash(" ".join(w[i : i + SHINGLE])) for i in range(len(w) - SHINGLE + 1)})
    )


def encode_shingles(values: tuple[int, ...]) -> bytes:
    """``values`` (32-bit, sorted) as the bytes the store keeps: little-endian uint32s."""
    return struct.pack(f"<{len(values)}I", *values)


def decode_shingles(blob: bytes) -> tuple[int, ...]:
    """:func:`encode_shingles` undone. ValueError: a length that is not a multiple of 4."""
    if len(blob) % 4:
        raise ValueError(f"a shingle blob holds 4-byte values; got {len(blob)} bytes")
    return struct.unpack(f"<{len(blob) // 4}I", blob)


def chunk_facts(text: str) -> ChunkFacts:
    """The facts of a chunk's ``text``: :func:`~hybridsag.fusion.text.dominant_script`,
    :func:`shingles` and :func:`~hybridsag.fusion.text.is_heading_only`.

    >>> f = chunk_facts("how do I install it on Linux")
    >>> f.script, len(f.shingles), f.heading_only
    ('LATIN', 5, False)
    """
    return ChunkFacts(
        script=dominant_script(text), shingles=shingles(text), heading_only=is_heading_only(text)
    )


#: Texts whose facts are kept for views that carry none (hand-built views, or rows of an index
#: not yet backfilled): a chunk one search reads is often read by the next.
_KEPT = 4096
_kept_facts = lru_cache(maxsize=_KEPT)(chunk_facts)


def facts_of(view: ChunkView) -> ChunkFacts:
    """``view.facts``, or when the view carries none, :func:`chunk_facts` of its text (the
    last :data:`_KEPT` texts' kept)."""
    return view.facts if view.facts is not None else _kept_facts(view.text)


def prefix_length(size: int, threshold: float) -> int:
    """How many of a set's smallest elements prefix filtering indexes for a Jaccard
    ``threshold``: two sets of resemblance at least ``threshold`` share an element within
    their prefixes (Chaudhuri, Ganti and Kaushik, "A primitive operator for similarity joins
    in data cleaning", ICDE 2006; Bayardo, Ma and Srikant, "Scaling up all pairs similarity
    search", WWW 2007). With ``o`` the overlap, ``J >= t`` gives ``o >= ceil(t * size)``, and
    two sets of overlap ``o`` share an element among their first ``size - o + 1``; one more
    element is taken so that a rounding of ``t * size`` never shortens it.

    >>> prefix_length(100, 0.8), prefix_length(1, 0.8)
    (22, 1)
    """
    return min(size, size - math.ceil(threshold * size) + 2)

