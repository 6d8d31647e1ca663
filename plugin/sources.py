"""Where resources come from: a JSONL file (a BEIR ``corpus.jsonl`` loads as is) or a folder
(text files, plus PDF, DOCX, HTML and EPUB through :mod:`hybridsag.formats`).

Both yield validated :class:`~hybridsag.writer.Document` values and report, rather than raise,
the entries they had to skip (a file that is not UTF-8, a JSONL line that is not an object), so
one bad file never stops the rest from being indexed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from hybridsag.chunker import rst_title
from hybridsag.errors import ConfigError, IngestError
from hybridsag.formats import CONVERTED_SUFFIXES, DocumentConverter
from hybridsag.fusion.markdown import first_h1
from hybridsag.writer import Document, make_document

__all__ = ["FOLDER_SUFFIXES", "SourceErrors", "iter_folder", "iter_jsonl"]

FOLDER_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".rst": "rst"}


@dataclass
class SourceErrors:
    """Entries skipped while reading a source: ``{where: reason}``."""

    errors: dict[str, str] = field(default_factory=dict)
    seen: int = 0


def iter_jsonl(path: Path, errors: SourceErrors) -> Iterator[Document]:
    """Documents from a JSONL file: ``_id`` (or ``id``/``resource_id``), ``title``, ``text``, and
    optional ``metadata``, ``tenant``, ``acl``, ``source_uri``. Bad lines go to ``errors``."""
    path = Path(path)
    if not path.is_file():
        raise IngestError(f"JSONL file {path} does not exist")
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            if not raw.strip():
                continue
            errors.seen += 1
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                errors.errors[where] = f"not UTF-8 ({exc.reason} at byte {exc.start})"
                continue
            except json.JSONDecodeError as exc:
                errors.errors[where] = f"not JSON: {exc.msg} at column {exc.colno}"
                continue
            if not isinstance(obj, dict):
                errors.errors[where] = f"a line must be a JSON object, got {type(obj).__name__}"
                continue
            meta, acl = obj.get("metadata"), obj.get("acl")
            if meta is not None and not isinstance(meta, dict):
                errors.errors[where] = f"metadata must be a JSON object, got {meta!r:.80}"
                continue
            if acl is not None and not isinstance(acl, list | str):
                errors.errors[where] = f"acl must be a list of strings, got {acl!r:.80}"
                continue
            rid = obj.get("_id", obj.get("id", obj.get("resource_id")))
            if isinstance(rid, int) and not isinstance(rid, bool):
                rid = str(rid)
            try:
                yield make_document(
                    rid,  # type: ignore[arg-type]
                    obj.get("text", ""),
                    title=obj.get("title") or "",
                    metadata=meta,
                    tenant=obj.get("tenant") or "",
                    acl=acl or (),
                    source_uri=obj.get("source_uri"),
                    fmt=obj.get("format", "markdown"),
                )
            except IngestError as exc:
                errors.errors[where] = str(exc)


def _title_of(text: str, fmt: str, fallback: str) -> str:
    """Markdown: the first ``# H1`` outside code fences (a ``# comment`` in a shell block is not
    one). reStructuredText: the first section title. Else ``fallback``."""
    if fmt == "rst":
        return rst_title(text) or fallback
    if fmt == "markdown":
        return first_h1(text) or fallback
    return fallback


class _Ignores:
    """``.gitignore`` rules of every folder walked so far (each relative to its folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []

    def load(self, folder: Path) -> None:
        gi = folder / ".gitignore"
        if gi.is_file():
            lines = gi.read_text("utf-8", errors="replace").splitlines()
            # GitIgnoreSpec: git's own matching rules (the "gitwildmatch" name is deprecated)
            self.specs.append((folder, pathspec.GitIgnoreSpec.from_lines(lines)))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        for base, spec in self.specs:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(rel + ("/" if is_dir else "")):
                return True
        return False


def iter_folder(
    root: Path,
    errors: SourceErrors,
    *,
    tenant: str = "",
    acl: tuple[str, ...] = (),
    converter: DocumentConverter | None = None,
) -> Iterator[Document]:
    """Documents from the md/markdown/txt/rst files under ``root`` and, given a ``converter``,
    its pdf/docx/html/htm/epub files (:data:`~hybridsag.formats.CONVERTED_SUFFIXES`); hidden
    files and folders and ``.gitignore``-matched paths are skipped; a non-UTF-8 file, or one the
    converter refuses or has no parser for, is reported and skipped. The resource id is the path
    relative to ``root``; the title is the first ``# H1`` (a converted file: its own title) or
    the stem."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise IngestError(f"folder {root} does not exist or is not a directory")
    ignores = _Ignores(root)
    for dirpath, dirnames, filenames in os.walk(root):
        folder = Path(dirpath)
        ignores.load(folder)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and not ignores.ignored(folder / d, is_dir=True)
        )
        for name in sorted(filenames):
            path = folder / name
            fmt = FOLDER_SUFFIXES.get(path.suffix.lower())
            converts = converter is not None and path.suffix.lower() in CONVERTED_SUFFIXES
            if name.startswith(".") or (fmt is None and not converts):
                continue
            if ignores.ignored(path, is_dir=False):
                continue
            errors.seen += 1
            rel = path.relative_to(root).as_posix()
            try:
                stat = path.stat()  # before reading: a later change then shows as stale
                text, title, chunk_fmt, meta = _read_file(path, fmt, stat.st_size, converter)
                doc = make_document(
                    rel,
                    text,
                    title=title,
                    metadata=meta,
                    tenant=tenant,
                    acl=acl,
                    source_uri=str(path),
                    fmt=chunk_fmt,  # type: ignore[arg-type]
                    source_mtime_ns=stat.st_mtime_ns,
                    source_size=stat.st_size,
                )
            except OSError as exc:
                errors.errors[rel] = f"unreadable: {exc.strerror}"
                continue
            except (IngestError, ConfigError) as exc:  # ConfigError: the formats extra is missing
                errors.errors[rel] = str(exc)
                continue
            yield doc


def _read_file(
    path: Path, fmt: str | None, size: int, converter: DocumentConverter | None
) -> tuple[str, str, str, dict[str, Any] | None]:
    """(text, title, chunker format, metadata) of one folder file. A text file is read as
    UTF-8; any other goes through ``converter`` (its metadata names the format and source hash).

    Raises:
        IngestError: not UTF-8, or a file the converter refuses (the message says why).
        ConfigError: the converter's parser is not installed.
        OSError: the file cannot be read.
    """
    if fmt is None:
        assert converter is not None
        converted = converter.convert_file(path, size=size)
        return converted.text, converted.title or path.stem, "markdown", converted.metadata()
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(f"not UTF-8 ({exc.reason} at byte {exc.start}); skipped") from exc
    return text, _title_of(text.lstrip("\ufeff"), fmt, path.stem), fmt, None
