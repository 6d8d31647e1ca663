"""Through a real index: the section whose heading is an identifier comes first for that
identifier (Node's errors.md shape); an exact title pins its resource's introduction."""

from __future__ import annotations

from pathlib import Path

from hybridsag.search import HybridSearch

ERRORS = """# Errors

Applications running in Node.js will generally experience several categories of errors.

## Node.js error codes

<a id="ERR_INVALID_ARG_TYPE"></a>

### `ERR_INVALID_ARG_TYPE`

An argument of the wrong type was passed to a Node.js API.

<a id="ERR_INVALID_ARG_VALUE"></a>

### `ERR_INVALID_ARG_VALUE`

An invalid or unsupported value was passed for a given argument.
"""

API = """# API {n}

## `api{n}.call(path)`

Throws `ERR_INVALID_ARG_TYPE` when `path` is not a string, and ERR_INVALID_ARG_TYPE again
when the callback is missing. Read the ERR_INVALID_ARG_TYPE entry of the errors page.
"""

FS = """# File system

The `node:fs` module enables interacting with the file system in a way modeled on standard
POSIX functions.

## Class: `fs.Stats`

A `fs.Stats` object provides information about a file on the file system.

### `stats.ino`

The file system specific "Inode" number for the file. File system, file system, file system:
the file system of the file system decides the file system inode of the file system.
"""


def test_the_section_headed_by_the_identifier_comes_first(hs: HybridSearch, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "errors.md").write_text(ERRORS, "utf-8")
    for n in range(12):
        (docs / f"api{n}.md").write_text(API.format(n=n), "utf-8")
    assert hs.ingest_folder(docs).indexed == 13
    for paths in (["bm25", "title"], ["sag2", "title"]):
        top = hs.search("ERR_INVALID_ARG_TYPE", paths=paths, top_k=3).results[0]
        assert top.heading_path == "Errors > Node.js error codes > `ERR_INVALID_ARG_TYPE`"
        assert top.text == "An argument of the wrong type was passed to a Node.js API."
        assert "identifier_definition" in top.rules


def test_an_exact_title_pins_the_introduction_not_a_section(
    hs: HybridSearch, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "fs.md").write_text(FS, "utf-8")
    (docs / "streams.md").write_text("# Streams\n\nStreams read from the file system.\n", "utf-8")
    hs.ingest_folder(docs)
    top = hs.search("File system", paths=["bm25", "title"], top_k=3).results[0]
    assert top.rules[0] == "exact_title"
    assert top.heading_path == "File system"
    assert top.text.startswith("The `node:fs` module enables interacting")
