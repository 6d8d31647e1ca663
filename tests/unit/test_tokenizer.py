"""The one index/query tokenizer: NFKC, lowercase, jieba search mode for Han, a cheap path else."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsag.lexical.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION, Tokenizer, load_stopwords


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """Shared: jieba's dictionary (about 0.5 s) loads once for the module."""
    return Tokenizer()


def test_nfkc_folds_full_width_and_lowercases(tok: Tokenizer) -> None:
    assert tok.tokenize("ＡＢＣ") == ["abc"]
    assert tok.tokenize("Hello WORLD ﬁne") == ["hello", "world", "fine"]  # ﬁ ligature too
    assert tok.tokenize("Ｅ－１２３４") == tok.tokenize("E-1234")


def test_english_text_takes_the_cheap_path_without_jieba() -> None:
    tok = Tokenizer()
    tokens = tok.tokenize("The ReActAgent raised E-1234 in snake_case_name v2.3.1.")
    assert "reactagent" in tokens
    assert tok._jieba is None  # jieba's dictionary was never loaded
    tok.tokenize("我的喜好")
    assert tok._jieba is not None


def test_chinese_uses_jieba_search_mode(tok: Tokenizer) -> None:
    tokens = tok.tokenize("我的喜好")
    assert "喜好" in tokens
    assert tok.tokenize("我的喜好是爱吃鱼")[:3] == ["我", "的", "喜好"]


def test_mixed_text_keeps_latin_identifiers_around_han_runs(tok: Tokenizer) -> None:
    tokens = tok.tokenize("错误码E-1234表示ReActAgent超时")
    assert "e-1234" in tokens and "reactagent" in tokens and "agent" in tokens
    assert "超时" in tokens


@pytest.mark.parametrize(
    ("text", "whole", "parts"),
    [
        ("ReActAgent", "reactagent", ["re", "act", "agent", "react"]),
        ("snake_case_name", "snake_case_name", ["snake", "case", "name"]),
        ("E-1234", "e-1234", ["e", "1234"]),
        ("v2.3.1", "v2.3.1", ["v2", "3", "1"]),
    ],
)
def test_identifiers_survive_whole_and_by_parts(
    tok: Tokenizer, text: str, whole: str, parts: list[str]
) -> None:
    tokens = tok.tokenize(f"see {text} here")
    assert tokens[:3] == ["see", whole, "here"]  # the whole word in place, in order
    for part in parts:
        assert part in tokens[3:], part  # the parts after the words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HttpServer", ["httpserver", "http", "server"]),
        ("HTTPServer", ["httpserver", "http", "server"]),
        ("fooBar-baz", ["foobar-baz", "foobar", "baz", "foo", "bar"]),
        ("E-1234-e", ["e-1234-e", "e", "1234"]),
    ],
)
def test_parts_are_emitted_once_and_never_repeat_the_whole_word(
    tok: Tokenizer, text: str, expected: list[str]
) -> None:
    assert tok.tokenize(text) == expected


def test_plain_words_have_no_parts(tok: Tokenizer) -> None:
    assert tok.tokenize("simple lowercase words") == ["simple", "lowercase", "words"]


def test_tokens_without_letter_or_digit_are_dropped(tok: Tokenizer) -> None:
    assert tok.tokenize("--- *** !! ... ___ () ，。！") == []
    assert tok.tokenize("a -- b") == ["a", "b"]
    assert tok.tokenize("__init__") == ["__init__", "init"]
    assert tok.tokenize("中文，。！") == ["中文"]


def test_query_terms_drop_english_and_chinese_stop_words(tok: Tokenizer) -> None:
    stop = load_stopwords()
    assert {"the", "and", "of", "的", "了"} <= stop
    assert tok.query_terms("the history of the Analytical Engine") == [
        "history",
        "analytical",
        "engine",
    ]
    terms = tok.query_terms("我的喜好")
    assert "喜好" in terms and "的" not in terms
    assert tok.query_terms("the and of a") == []


def test_query_terms_dedupe_in_order(tok: Tokenizer) -> None:
    assert tok.query_terms("Engine engine ENGINE analytical Engine") == ["engine", "analytical"]


def test_query_terms_cap_at_limit(tok: Tokenizer) -> None:
    text = " ".join(f"word{i}" for i in range(200))
    terms = tok.query_terms(text)
    assert len(terms) == 80
    assert terms == [f"word{i}" for i in range(80)]
    assert tok.query_terms(text, limit=5) == [f"word{i}" for i in range(5)]


def test_one_function_for_index_and_query(tok: Tokenizer) -> None:
    text = "Die ReActAgent-Schleife: 我的喜好 and E-1234, the v2.3.1 release"
    tokens = tok.tokenize(text)
    assert tok.index_text(text).split() == tokens
    stop = tok.stopwords
    assert tok.query_terms(text) == list(dict.fromkeys(t for t in tokens if t not in stop))


def test_fingerprint_names_tokenizer_and_user_dict(tmp_path: Path) -> None:
    assert Tokenizer().fingerprint() == f"{TOKENIZER_NAME}/{TOKENIZER_VERSION}"
    user_dict = tmp_path / "words.txt"
    user_dict.write_text("喜好词 5\n", "utf-8")
    with_dict = Tokenizer(user_dict=user_dict).fingerprint()
    assert with_dict != Tokenizer().fingerprint() and "words.txt" in with_dict
