"""Counted nouns and terminal columns in the CLI's output (issue 28's polish: "indexed 1
resources", and ``list`` columns that slid with CJK file names)."""

from __future__ import annotations

from hybridsag.render import counted, display_width, pad


def test_a_count_of_one_is_singular() -> None:
    assert counted(1, "resource") == "1 resource"
    assert counted(0, "resource") == "0 resources"
    assert counted(13, "result") == "13 results"


def test_wide_characters_take_two_columns_and_combining_marks_none() -> None:
    assert display_width("zh/安装指南.md") == 3 + 4 * 2 + 3
    assert display_width("cafe\u0301") == 4  # e + combining acute accent
    assert display_width("ＡＢ") == 4  # full-width Latin


def test_padded_names_end_in_one_column() -> None:
    names = ["README.md", "zh/安装指南.md", "zh/我的喜好.md", "guide/quickstart.md"]
    width = max(display_width(n) for n in names)
    rows = [pad(n, width) + "|" for n in names]
    assert {display_width(r) for r in rows} == {width + 1}
