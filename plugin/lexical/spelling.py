"""The spelling fix of query terms: a term no chunk holds, that is no word of the query's
language, is searched as the index term nearest to it in edits ("windos" as "windows").

What is respelled (:func:`spelling_reach`): terms of at least 5 cased letters (never digits,
CJK words or code) that pyspellchecker's word list of their script does not hold (English for
the Latin script, Russian for Cyrillic; another cased script has no list and is never
respelled), and that the query wrote as a whole word (not a piece of ``ForkingMixIn``: the
caller checks). A real word the index lacks ("helm", "protection") is what the user meant, so
it stays as it is: it tells the search that the index may not answer the question. One edit
is allowed (most typos are one: a letter dropped, doubled, swapped or mistyped); two edits and
4-letter words reached real words too often ("prepending" as "preceding", "ldap" as "leap",
on the shared and docs sets).

How (:func:`respell`): among the index terms that share the term's first letter (the engine
lists them, :meth:`~hybridsag.lexical.contract.LexicalEngine.near_terms`), the one fewest edits
away (insertions, deletions, substitutions, swaps of neighbours: the optimal string alignment
distance, computed by rapidfuzz), then the one that keeps more of the typed letters, then the
one more chunks hold.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

__all__ = ["is_known_word", "respell", "spelling_reach"]

#: The word list of each cased script the fix reads (pyspellchecker's language codes), chosen
#: by a term's first letter.
_SCRIPT_LISTS = {"latin": "en", "cyrillic": "ru"}

_lists: dict[str, frozenset[str]] = {}
_lists_lock = threading.Lock()


def _script(ch: str) -> str | None:
    if "a" <= ch <= "z" or "\u00c0" <= ch <= "\u024f":
        return "latin"
    if "\u0400" <= ch <= "\u04ff":
        return "cyrillic"
    return None


def _word_list(language: str) -> frozenset[str]:
    """pyspellchecker's word list of ``language`` (about 160,000 English words, 20,000
    Russian), loaded once per process on first use (about a second for English)."""
    with _lists_lock:
        words = _lists.get(language)
        if words is None:
            from spellchecker import SpellChecker

            words = frozenset(SpellChecker(language=language).word_frequency.dictionary)
            _lists[language] = words
        return words


def is_known_word(term: str) -> bool | None:
    """Whether ``term`` (lowercase) is a word of its script's list; None where its script has
    no list."""
    script = _script(term[:1])
    language = _SCRIPT_LISTS.get(script) if script else None
    if language is None:
        return None
    return term in _word_list(language)


def spelling_reach(term: str) -> int:
    """How many edits the fix may make to ``term``: none for a term under 5 characters, one
    holding anything but cased letters, or a word of its script's list (or of a script with no
    list); else one."""
    if len(term) < 5 or not all(ch.upper() != ch for ch in term):
        return 0
    return 1 if is_known_word(term) is False else 0


def respell(term: str, candidates: Mapping[str, int]) -> str | None:
    """The candidate (an index term, with the chunk rows that hold it) nearest to ``term`` in
    edits, within :func:`spelling_reach`; among equals the one that keeps more of the typed
    letters in order (fewer insertions and deletions: a dropped letter is the commonest typo),
    then the one more chunks hold, then the first in order; None where no candidate is that
    near, or where the index holds ``term`` with an "s" added or taken off its end ("tuples"
    where the index says "tuple": an inflected word, which the fix would only widen to every
    chunk of the other form).

    Example: ``respell("windos", {"windows": 12, "window": 30})`` is ``"windows"``: both are
    one edit away, and "windows" keeps every typed letter (one insertion; "window" swaps one).
    """
    reach = spelling_reach(term)
    if not reach or not candidates:
        return None
    if term[:-1] in candidates and term.endswith("s") or term + "s" in candidates:
        return None  # a plural or singular of an index term is a word, not a typo
    from rapidfuzz import process
    from rapidfuzz.distance import OSA, Indel

    near = process.extract(
        term, list(candidates), scorer=OSA.distance, score_cutoff=reach, limit=None
    )
    if not near:
        return None
    best = min(near, key=lambda m: (m[1], Indel.distance(term, m[0]), -candidates[m[0]], m[0]))
    return str(best[0])
