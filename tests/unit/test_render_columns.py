"""The CLI's words and columns (issue 28's polish): counted nouns ("indexed 1 resources"),
``list`` columns that slid with CJK file names, and a result's heading line."""

from __future__ import annotations

from hybridsag.output.render import counted, display_width, pad


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


def test_the_heading_line_does_not_repeat_the_title_and_uses_one_separator() -> None:
    """``Agents › Agents > The ReActAgent loop`` (issue 28) reads ``Agents › The ReActAgent loop``."""
    from hybridsag.output.render import headings_below

    assert headings_below("Agents", "Agents > The ReActAgent loop > Thought") == [
        "The ReActAgent loop", "Thought",
    ]  # fmt: skip
    assert headings_below("Agents", "Agents") == []
    assert headings_below("npm-install", "Description > Configuration") == [
        "Description", "Configuration",
    ]  # fmt: skip
    assert headings_below("Agents", "") == []
