"""The spelling fix's rules (hybridsag.lexical.spelling): what may be respelled, how far, and
which index term wins; with pyspellchecker's real word lists and rapidfuzz's real distance."""

from __future__ import annotations

import sqlite3

import pytest

from hybridsag.lexical.queries import near_terms_in
from hybridsag.lexical.spelling import is_known_word, respell, spelling_reach


@pytest.mark.parametrize(
    ("term", "reach"),
    [
        ("windos", 1),  # a typo: one edit
        ("configurtion", 1),
        ("helm", 0),  # an English word the index may lack: what the user meant
        ("protection", 0),
        ("ldap", 0),  # under 5 letters: too many real words one edit away
        ("fix", 0),
        ("v2x9", 0),  # digits
        ("model_validater", 0),  # code
        ("数据库连接", 0),  # no case: CJK words are jieba's, not typos
        ("ελληνικα", 0),  # a cased script with no word list
        ("праграмма", 1),  # Russian has a list: a typo of программа
        ("программа", 0),
    ],
)
def test_what_may_be_respelled_and_how_far(term: str, reach: int) -> None:
    assert spelling_reach(term) == reach


def test_known_words_come_from_the_scripts_word_list() -> None:
    assert is_known_word("session") is True
    assert is_known_word("sesion") is False
    assert is_known_word("ελληνικα") is None


def test_the_nearest_term_wins_then_the_more_frequent() -> None:
    # windows and window are one edit away; windows keeps every typed letter
    assert respell("windos", {"windows": 12, "window": 30, "widow": 99}) == "windows"
    # two at one edit: the one more chunks hold
    assert respell("sesion", {"session": 5, "lesion": 1, "version": 50}) == "session"
    assert respell("sesion", {"session": 1, "sesiona": 5}) == "sesiona"
    # swaps of neighbours are one edit (optimal string alignment)
    assert respell("feild", {"field": 3, "fold": 9}) == "field"
    assert respell("argumnets", {"arguments": 2}) == "arguments"
    # one edit only
    assert respell("confgurtion", {"configuration": 1}) is None
    assert respell("prepending", {"preceding": 9}) is None
    assert respell("helm", {"help": 100}) is None  # a word is never respelled
    assert respell("windos", {}) is None
    # an inflected form of an index term is a word, not a typo
    assert respell("tracebacks", {"traceback": 40}) is None
    assert respell("fixtur", {"fixturs": 1, "fixture": 9}) is None


def test_near_terms_read_one_prefix_range_of_a_term_table() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE vocab(term TEXT PRIMARY KEY, doc INTEGER NOT NULL)")
    conn.executemany(
        "INSERT INTO vocab VALUES (?, ?)",
        [("window", 3), ("windows", 2), ("wind", 1), ("winter", 0), ("x", 4), ("vw", 5),
         ("wz", 6), ("xa", 7)],
    )
    assert near_terms_in(conn, "vocab", "w", 5, 8) == {"window": 3, "windows": 2}
    assert near_terms_in(conn, "vocab", "w", 1, 8) == {
        "window": 3, "windows": 2, "wind": 1, "wz": 6}
