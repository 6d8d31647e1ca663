"""Front matter: the title and metadata a Markdown file declares at its top.

A YAML (``---``) or TOML (``+++``) block at the very top of a Markdown file
(:func:`hybridsag.fusion.text.markdown.front_matter` finds it, the chunker leaves it out of every
chunk) is read here, for folder ingest (:func:`hybridsag.ingest.sources.iter_files`), into:

- **the title**: its ``title`` key, on one line, when it is a string or a number of at most
  :data:`~hybridsag.documents.MAX_TITLE_CHARS` characters without control characters. It comes
  before the first ``# H1`` and the file name;
- **metadata**: every other top-level key named as filters name keys (1 to 128 of letters,
  digits, ``_ . -``) whose value is a string, a number, a boolean, a date (written as ISO 8601
  text) or a list of at most :data:`MAX_LIST_ITEMS` of these; ``null``, nested tables and
  lists of tables are left out. The metadata hybridsag sets itself (``encoding``) wins over a
  front matter key of the same name. Values are kept while they add up to at most
  :data:`MAX_METADATA_CHARS` characters; the keys past that are left out.

Parsing is bounded: the block is at most
:data:`~hybridsag.fusion.text.markdown.MAX_FRONT_MATTER_CHARS` characters (a longer one is not taken
for front matter at all), YAML is read by PyYAML's safe loader (libyaml's ``CSafeLoader`` when
built with it; it caps nesting, and aliases are built by reference, never copied) and TOML by the
standard library's ``tomllib``. A block that does not parse, or whose top level is not a
mapping, gives neither title nor metadata, and :func:`read_front_matter` says why in its
``warnings``: the file is indexed all the same (the block stays out of its chunks).

Why not the ``python-frontmatter`` package: it finds the block with its own pattern (any
``---`` line, no bound) and returns the body stripped, while the chunker needs the block's exact
offsets to keep every chunk an exact slice of the source, so the one finder is
:func:`~hybridsag.fusion.text.markdown.front_matter`; what it would add on top of it is the two
parsers used here (its TOML support needs the unmaintained ``toml`` package).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from hybridsag.documents import MAX_TITLE_CHARS
from hybridsag.fusion.text.markdown import front_matter

__all__ = ["MAX_LIST_ITEMS", "MAX_METADATA_CHARS", "FrontMatterData", "read_front_matter"]

#: Most items of one list value kept as metadata.
MAX_LIST_ITEMS = 256
#: Most characters of all front matter metadata values together (keys and strings counted).
MAX_METADATA_CHARS = 16 * 1024
#: A metadata key a filter can name (``hybridsag.records.store.Filters``).
_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class FrontMatterData:
    """What a file's front matter gives: ``kind`` (``"yaml"``, ``"toml"``, None when there is
    no block), ``title`` (None when it names none), ``metadata`` and the ``warnings`` on what
    was left out and why."""

    kind: str | None = None
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _parse(kind: str, body: str) -> object:
    """The block's top-level value. Raises ValueError naming what the parser refused."""
    if kind == "toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            return tomllib.loads(body)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ValueError(f"not valid TOML ({exc})") from None
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(body, Loader=loader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError) as exc:
        where = " ".join(str(exc).split())
        raise ValueError(f"not valid YAML ({where[:200]})") from None


def _scalar(value: object) -> tuple[bool, Any]:
    """``(True, value as JSON)`` for a value kept as metadata, ``(False, None)`` otherwise."""
    if isinstance(value, bool):
        return True, value
    if isinstance(value, int):
        return (True, value) if _INT64[0] <= value <= _INT64[1] else (True, str(value))
    if isinstance(value, float):
        return (True, value) if math.isfinite(value) else (False, None)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (YAML "\ud800") cannot be stored
            return False, None
        return True, value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return True, value.isoformat()
    return False, None


def _title(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = " ".join(str(value).split())
    if not text or len(text) > MAX_TITLE_CHARS:
        return None
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        return None
    return text


def read_front_matter(text: str, *, reserved: frozenset[str] = frozenset()) -> FrontMatterData:
    """The title and metadata of ``text``'s front matter (see the module docstring); keys in
    ``reserved`` (metadata hybridsag sets itself) are left out. Never raises on what the file
    holds: what cannot be used is named in ``warnings``.

    >>> fm = read_front_matter("---\\ntitle: Guide\\nsection: 5\\n---\\n# Body\\n")
    >>> fm.title, fm.metadata
    ('Guide', {'section': 5})
    """
    block = front_matter(text)
    if block is None:
        return FrontMatterData()
    kind = block.kind
    try:
        data = _parse(kind, text[block.body_start : block.body_end])
    except ValueError as exc:
        return FrontMatterData(kind, warnings=(f"front matter {exc}: no title or metadata taken",))
    if data is None:
        return FrontMatterData(kind)
    if not isinstance(data, dict):
        return FrontMatterData(
            kind,
            warnings=(
                f"front matter is a {type(data).__name__}, not a mapping of keys: no title or "
                "metadata taken",
            ),
        )
    warnings: list[str] = []
    title = None
    if "title" in data:
        title = _title(data["title"])
        if title is None:
            warnings.append(
                f"front matter title {data['title']!r:.80} is not one line of text of at most "
                f"{MAX_TITLE_CHARS} characters: not used"
            )
    meta: dict[str, Any] = {}
    left = MAX_METADATA_CHARS
    dropped: list[str] = []
    for key, value in data.items():
        if key == "title" or key in reserved:
            continue
        if not isinstance(key, str) or not _KEY.match(key):
            dropped.append(repr(key)[:60])
            continue
        if isinstance(value, list):
            items = [_scalar(v) for v in value[:MAX_LIST_ITEMS]]
            if len(value) > MAX_LIST_ITEMS or not all(ok for ok, _ in items):
                dropped.append(key)
                continue
            kept: Any = [v for _, v in items]
            size = len(key) + sum(len(str(v)) for v in kept)
        else:
            ok, kept = _scalar(value)
            if not ok:
                if value is not None:
                    dropped.append(key)
                continue
            size = len(key) + len(str(kept))
        if size > left:
            dropped.append(key)
            continue
        left -= size
        meta[key] = kept
    if dropped:
        warnings.append(
            "front matter keys not kept as metadata (nested, not filterable, or over "
            f"{MAX_METADATA_CHARS} characters in all): {', '.join(dropped[:20])}"
            + (f" and {len(dropped) - 20} more" if len(dropped) > 20 else "")
        )
    return FrontMatterData(kind, title, meta, tuple(warnings))
