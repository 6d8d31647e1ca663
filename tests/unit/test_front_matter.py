"""Front matter (issue 24, item 6): the title and metadata a Markdown file declares at its top,
read with a bound (hybridsag.ingest.front_matter)."""

from __future__ import annotations

import datetime as dt

import pytest

from hybridsag.ingest.front_matter import MAX_METADATA_CHARS, read_front_matter


def test_yaml_gives_the_title_and_scalar_metadata() -> None:
    fm = read_front_matter(
        "---\n"
        "title: package-lock.json\n"
        "section: 5\n"
        "draft: false\n"
        "weight: 1.5\n"
        "date: 2024-05-01\n"
        "tags: [npm, lockfile]\n"
        "menu: {main: {parent: cli}}\n"  # nested: left out
        "empty:\n"  # null: left out without a word
        "encoding: latin-1\n"  # reserved: hybridsag sets it
        "bad key!: 1\n"  # a key no filter can name
        "---\n# Body\n",
        reserved=frozenset({"encoding"}),
    )
    assert (fm.kind, fm.title) == ("yaml", "package-lock.json")
    assert fm.metadata == {
        "section": 5,
        "draft": False,
        "weight": 1.5,
        "date": dt.date(2024, 5, 1).isoformat(),
        "tags": ["npm", "lockfile"],
    }
    assert len(fm.warnings) == 1 and "menu" in fm.warnings[0] and "'bad key!'" in fm.warnings[0]


def test_toml_front_matter() -> None:
    fm = read_front_matter('+++\ntitle = "Hugo page"\nweight = 3\n[params]\nx = 1\n+++\nBody.\n')
    assert (fm.kind, fm.title, fm.metadata) == ("toml", "Hugo page", {"weight": 3})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("---\ntitle: [unclosed\n---\n", "not valid YAML"),
        ('+++\ntitle = "x\n+++\n', "not valid TOML"),
        ("---\n- a list\n---\n", None),  # not a key line: no front matter at all
        ("---\ntitle: |\n  two\n  lines\n---\n", None),  # a block scalar: one line, kept
    ],
)
def test_front_matter_that_does_not_parse_is_named(text: str, why: str | None) -> None:
    fm = read_front_matter(text)
    if why is None:
        assert not fm.warnings
    else:
        assert fm.title is None and fm.metadata == {}
        assert len(fm.warnings) == 1 and why in fm.warnings[0]


def test_a_title_is_one_line_without_control_characters() -> None:
    assert read_front_matter('---\ntitle: "a\\n  b"\n---\n').title == "a b"
    fm = read_front_matter('---\ntitle: "bell\\a"\n---\n')
    assert fm.title is None and "not used" in fm.warnings[0]
    assert read_front_matter("---\ntitle: 2024\n---\n").title == "2024"
    assert read_front_matter("---\ntitle: [a, b]\n---\n").title is None


def test_hostile_values_are_bounded() -> None:
    # an alias bomb: aliases are references; what is kept stops at MAX_METADATA_CHARS
    big = "x" * 4000
    lines = [f"s: &s {big}"] + [f"k{i}: [{', '.join(['*s'] * 200)}]" for i in range(30)]
    fm = read_front_matter("---\n" + "\n".join(lines) + "\n---\n")
    assert sum(len(str(v)) for v in fm.metadata.values()) <= MAX_METADATA_CHARS
    assert fm.metadata["s"] == big and "k0" not in fm.metadata
    # numbers JSON cannot hold: NaN left out, an int past 64 bits kept as text
    fm = read_front_matter("---\nnan: .nan\nhuge: 123456789012345678901234567890\n---\n")
    assert fm.metadata == {"huge": "123456789012345678901234567890"}
    # nesting past libyaml's cap is refused as YAML, never a crash
    fm = read_front_matter("---\na: " + "[" * 5000 + "]" * 5000 + "\n---\n")
    assert fm.metadata == {} and "not valid YAML" in fm.warnings[0]
