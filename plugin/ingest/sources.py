"""Where resources come from: a JSONL file (a BEIR ``corpus.jsonl`` loads as is), a folder (text
files, plus PDF, DOCX, HTML and EPUB through :mod:`hybridsag.ingest.formats`) or a single file.

Both yield validated :class:`~hybridsag.documents.Document` values and report, rather than raise,
the entries they had to skip (a JSONL line that is not an object, a file over the size cap), so
one bad entry never stops the rest from being indexed.

Reading is guarded (:func:`read_regular`): only regular files are read, never a FIFO, device or
socket (checked before opening and again on the open descriptor, which is opened non-blocking),
at most ``max_bytes`` of them; a symlink is followed only when its target stays inside the
folder being indexed (``ln -s /etc/passwd`` or ``/dev/zero`` is refused and reported); symlinked
folders are not descended (what they point to inside the folder is indexed under its own path).
Text that is not UTF-8 is decoded with the encoding ``charset-normalizer`` detects
(:func:`decode_text`), recorded as ``metadata["encoding"]``; undetectable bytes are skipped.
A Markdown file's YAML or TOML front matter gives its title and metadata
(:mod:`hybridsag.ingest.front_matter`) and is indexed as no chunk's text.
``.gitignore`` rules are matched by RE2 through pathspec's ``re2`` backend: linear time, so no
pattern can make matching backtrack; a ``.gitignore`` over :data:`MAX_IGNORE_FILE_BYTES` or with a
line over :data:`MAX_IGNORE_PATTERN_CHARS` cannot be applied faithfully, so the folder it governs
is skipped and reported rather than indexed with rules missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pathspec
from hybridsag.ingest.chunker import rst_title
from hybridsag.documents import Document, make_document, printable
from hybridsag.errors import ConfigError, IngestError
from hybridsag.ingest.formats import CONVERTED_SUFFIXES, DocumentConverter, format_size
from hybridsag.fusion.text.markdown import first_h1

__all__ = [
    "FOLDER_SUFFIXES",
    "MAX_IGNORE_FILE_BYTES",
    "MAX_IGNORE_PATTERN_CHARS",
    "FolderScan",
    "SourceErrors",
    "check_size",
    "count_lines",
    "decode_text",
    "file_document",
    "file_limit",
    "hash_regular",
    "id_root",
    "iter_files",
    "iter_jsonl",
    "not_indexed",
    "read_regular",
    "scan_folder",
]

FOLDER_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".rst": "rst"}
#: Bounds of one ``.gitignore``: its size, and the length of one pattern line (PATH_MAX).
MAX_IGNORE_FILE_BYTES = 256 * 1024
MAX_IGNORE_PATTERN_CHARS = 4096
#: A detected single-byte encoding gives way to cp1252 (the most common legacy encoding of
#: Western text, the WHATWG default for ``latin1``) when cp1252 reads the bytes with at most
#: this much more "chaos" (charset-normalizer's measure of implausible characters, 0..1).
CP1252_MARGIN = 0.1
_MIB = 1024 * 1024
#: Metadata keys a folder file's reader sets itself (they win over its front matter's).
_OWN_METADATA = ("encoding",)


@dataclass
class SourceErrors:
    """Entries skipped while reading a source: ``{where: reason}``; and ``warnings`` on entries
    read with something left out (front matter that does not parse), each ``"where: what"``."""

    errors: dict[str, str] = field(default_factory=dict)
    seen: int = 0
    warnings: list[str] = field(default_factory=list)

    def add(self, where: str, reason: str) -> None:
        self.errors[printable(where)] = reason

    def warn(self, where: str, what: str) -> None:
        self.warnings.append(f"{printable(where)}: {what}")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: Path, within: Path | None, max_bytes: int | None, limit_name: str) -> int:
    """A descriptor of the regular file at ``path`` (see :func:`read_regular`), refused before
    it is opened when a symlink leaves ``within``, it is not a regular file, or its size is
    over ``max_bytes`` (``None``: no bound)."""
    real = Path(os.path.realpath(path))
    if within is not None and not real.is_relative_to(within):
        raise IngestError(
            f"a symlink to {printable(str(real))}, outside the indexed folder; not followed"
        )
    st = os.lstat(real)
    if not stat.S_ISREG(st.st_mode):
        raise IngestError(f"{_kind(st.st_mode)}, not a regular file; skipped")
    if max_bytes is not None:
        check_size(st.st_size, max_bytes, limit_name)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise IngestError(f"{_kind(mode)}, not a regular file; skipped")
    return fd


def not_indexed(suffix: str) -> str:
    """What is said of a file whose ``suffix`` no folder index reads (naming those it reads)."""
    known = ", ".join(sorted({*FOLDER_SUFFIXES, *CONVERTED_SUFFIXES}))
    return f"{suffix or 'no suffix'} files are not indexed; known: {known}"


def check_size(size: int, max_bytes: int, limit_name: str) -> None:
    """IngestError when a file of ``size`` bytes is over ``max_bytes`` (the message names
    ``limit_name``, the setting that sets it): what a folder index says of a file it skips for
    its size, wherever the bytes come from."""
    if size > max_bytes:
        raise IngestError(
            f"the file is {format_size(size)}, over the {format_size(max_bytes)} limit "
            f"({limit_name}); skipped"
        )


def read_regular(
    path: Path, *, within: Path | None, max_bytes: int, limit_name: str
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` and its ``stat`` (taken before reading, so a
    later change shows as stale), never blocking and never reading more than ``max_bytes``.

    A symlink is followed only to a target inside ``within`` (``None``: anywhere). The file's
    type is checked with ``lstat`` before it is opened (a device is never opened) and again with
    ``fstat`` on the descriptor, opened ``O_NONBLOCK | O_NOFOLLOW``, so a file swapped for a FIFO
    in between cannot hang the read.

    Raises:
        IngestError: a symlink leaving ``within``, not a regular file, or over ``max_bytes``
            (the message names ``limit_name``, the setting that sets it).
        OSError: the file cannot be read (missing, no permission).
    """
    fd = _open_regular(path, within, max_bytes, limit_name)
    try:
        st = os.fstat(fd)
        parts: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            part = os.read(fd, min(left, _MIB))
            if not part:
                break
            parts.append(part)
            left -= len(part)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > max_bytes:
        raise IngestError(
            f"the file grew past the limit while read: over the {format_size(max_bytes)} "
            f"limit ({limit_name}); skipped"
        )
    return data, st


def hash_regular(path: Path, *, within: Path | None) -> tuple[str, os.stat_result]:
    """The SHA-256 (hex) of the regular file at ``path`` and its ``stat`` (taken before
    reading), read in 1 MiB parts under the guards of :func:`read_regular` and with no bound
    on its size (a folder sync's manifest names every file; the service says which are over
    its limits).

    Raises:
        IngestError, OSError: as :func:`read_regular`.
    """
    fd = _open_regular(path, within, None, "")
    try:
        st = os.fstat(fd)
        digest = hashlib.sha256()
        while part := os.read(fd, _MIB):
            digest.update(part)
    finally:
        os.close(fd)
    return digest.hexdigest(), st


def decode_text(data: bytes) -> tuple[str, str | None]:
    """``(text, encoding)`` of a text file: UTF-8 when it is (``encoding`` ``None``), else the
    encoding charset-normalizer detects (cp1252 preferred within :data:`CP1252_MARGIN`).

    Raises:
        IngestError: not UTF-8 and no encoding reads it plausibly (binary data).
    """
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        utf8_error = f"not UTF-8 ({exc.reason} at byte {exc.start})"
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise IngestError(f"{utf8_error} and no text encoding reads it; skipped")
    chosen = best
    for match in matches:
        if "cp1252" in match.could_be_from_charset and match.chaos <= best.chaos + CP1252_MARGIN:
            chosen = match
            break
    encoding = "cp1252" if "cp1252" in chosen.could_be_from_charset else chosen.encoding
    return data.decode(encoding), encoding


def _title_of(text: str, fmt: str, fallback: str) -> str:
    """Markdown: the first ``# H1`` outside code fences (a ``# comment`` in a shell block is not
    one). reStructuredText: the first section title. Else ``fallback``."""
    if fmt == "rst":
        return rst_title(text) or fallback
    if fmt == "markdown":
        return first_h1(text) or fallback
    return fallback


# --------------------------------------------------------------------------- JSONL


def count_lines(path: Path) -> int:
    """Non-blank lines of a JSONL file (for a progress total); 0 when it is not a regular file
    (reading it then reports why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return 0
        return sum(1 for line in fh if line.strip())


def iter_jsonl(path: Path, errors: SourceErrors, *, max_line_bytes: int) -> Iterator[Document]:
    """Documents from a JSONL file: ``_id`` (or ``id``/``resource_id``), ``title``, ``text``, and
    optional ``metadata``, ``tenant``, ``acl``, ``source_uri``. Bad lines (not JSON, not an
    object, nested too deeply, over ``max_line_bytes``, failing :func:`make_document`) go to
    ``errors``; the file must be a regular file.

    Raises:
        IngestError: the file is missing or not a regular file.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise IngestError(f"JSONL file {path} does not exist or cannot be read") from exc
    if not stat.S_ISREG(st.st_mode):
        raise IngestError(f"JSONL file {path} is {_kind(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise IngestError(f"JSONL file {path} is not a regular file")
        lineno = 0
        while True:
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                break
            lineno += 1
            where = f"{path}:{lineno}"
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while (rest := fh.readline(_MIB)) and not rest.endswith(b"\n"):
                    pass  # skip the rest of the over-long line without holding it
                errors.seen += 1
                errors.add(
                    where,
                    f"the line is over the {format_size(max_line_bytes)} limit "
                    "(ingest.max_file_mb); skipped",
                )
                continue
            if not raw.strip():
                continue
            errors.seen += 1
            doc = _jsonl_document(raw, where, errors)
            if doc is not None:
                yield doc


def _jsonl_document(raw: bytes, where: str, errors: SourceErrors) -> Document | None:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        errors.add(where, f"not UTF-8 ({exc.reason} at byte {exc.start})")
        return None
    except json.JSONDecodeError as exc:
        errors.add(where, f"not JSON: {exc.msg} at column {exc.colno}")
        return None
    except RecursionError:
        errors.add(where, "the JSON nests too deeply to read")
        return None
    if not isinstance(obj, dict):
        errors.add(where, f"a line must be a JSON object, got {type(obj).__name__}")
        return None
    meta, acl = obj.get("metadata"), obj.get("acl")
    if meta is not None and not isinstance(meta, dict):
        errors.add(where, f"metadata must be a JSON object, got {meta!r:.80}")
        return None
    if acl is not None and not isinstance(acl, list | str):
        errors.add(where, f"acl must be a list of strings, got {acl!r:.80}")
        return None
    rid = obj.get("_id", obj.get("id", obj.get("resource_id")))
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    try:
        return make_document(
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
        errors.add(where, str(exc))
        return None


# --------------------------------------------------------------------------- folders


class _Ignores:
    """``.gitignore`` rules of every folder walked so far (each relative to its folder)."""

    def __init__(self) -> None:
        self.specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []

    def load(self, folder: Path, within: Path) -> None:
        """Add ``folder``'s ``.gitignore``. Raises IngestError when it cannot be applied as
        written (unreadable, over the bounds, a pattern the matcher refuses)."""
        gi = folder / ".gitignore"
        if not os.path.lexists(gi):
            return
        try:
            data, _ = read_regular(
                gi,
                within=within,
                max_bytes=MAX_IGNORE_FILE_BYTES,
                limit_name=f"{MAX_IGNORE_FILE_BYTES // 1024} KiB for a .gitignore",
            )
        except OSError as exc:
            raise IngestError(f".gitignore unreadable: {exc.strerror}") from exc
        lines = data.decode("utf-8", errors="replace").splitlines()
        for n, line in enumerate(lines, start=1):
            if len(line) > MAX_IGNORE_PATTERN_CHARS:
                raise IngestError(
                    f".gitignore line {n} is {len(line)} characters, over the "
                    f"{MAX_IGNORE_PATTERN_CHARS} limit: {line[:60]!r}..."
                )
        try:
            # GitIgnoreSpec: git's own matching rules; RE2: linear-time matching, no backtracking
            spec = pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
        except Exception as exc:  # noqa: BLE001 - the pattern compiler of a hostile file
            raise IngestError(f".gitignore cannot be applied: {type(exc).__name__}: {exc}") from exc
        self.specs.append((folder, spec))

    def ignored(self, path: Path, is_dir: bool) -> bool:
        for base, spec in self.specs:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(rel + ("/" if is_dir else "")):
                return True
        return False


@dataclass(frozen=True, slots=True)
class FolderScan:
    """What :func:`scan_folder` found: the resolved ``folder`` (or file) named and the
    candidate files under it, in walk order (sorted per folder); nothing was read but
    ``.gitignore`` files."""

    folder: Path
    files: tuple[Path, ...]
    single_file: bool = False


def _valid_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def scan_folder(path: Path, errors: SourceErrors, *, converts: bool) -> FolderScan:
    """The candidate files of a folder: md/markdown/txt/rst files and, when ``converts``,
    pdf/docx/html/htm/epub files; hidden files and folders, ``.gitignore``-matched paths and
    symlinked folders are left out. ``path`` may name a single file (then it is the only
    candidate). What cannot be walked (a name that is not UTF-8, a ``.gitignore`` that cannot
    be applied, a symlinked folder leading outside, an unreadable folder) goes to ``errors``.

    Raises:
        IngestError: ``path`` does not exist, or is a file of a kind that is not indexed.
    """
    named = Path(path)
    if os.path.lexists(named) and not named.is_dir():  # a file, a link to one, a FIFO, ...
        suffix = named.suffix.lower()  # the name given, not a link's target: judged when read
        if suffix not in FOLDER_SUFFIXES and suffix not in CONVERTED_SUFFIXES:
            raise IngestError(f"{printable(str(named))}: {not_indexed(suffix)}")
        file = named.parent.resolve() / named.name
        return FolderScan(folder=file, files=(file,), single_file=True)
    root = named.resolve()
    if not root.is_dir():
        raise IngestError(f"folder {printable(str(named))} does not exist or is not a directory")
    ignores = _Ignores()
    files: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(root).as_posix() if exc.filename else str(root)
        errors.add(where + "/", f"folder unreadable: {exc.strerror}; skipped")

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        folder = Path(dirpath)
        try:
            ignores.load(folder, root)
        except IngestError as exc:
            errors.add(folder.relative_to(root).as_posix() + "/", f"{exc}; the folder was skipped")
            dirnames[:] = []
            continue
        keep = []
        for d in sorted(dirnames):
            sub = folder / d
            rel = sub.relative_to(root).as_posix()
            if d.startswith("."):
                continue
            if not _valid_name(d):
                errors.add(rel + "/", "the folder name is not valid UTF-8; skipped")
                continue
            if ignores.ignored(sub, is_dir=True):
                continue
            if sub.is_symlink():
                target = Path(os.path.realpath(sub))
                if not target.is_relative_to(root):
                    errors.add(
                        rel + "/",
                        f"a symlink to {printable(str(target))}, outside the indexed folder; "
                        "not followed",
                    )
                continue  # inside the folder: indexed where it really is
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            file = folder / name
            suffix = file.suffix.lower()
            if name.startswith(".") or not (
                suffix in FOLDER_SUFFIXES or (converts and suffix in CONVERTED_SUFFIXES)
            ):
                continue
            if not _valid_name(name):
                errors.seen += 1
                errors.add(
                    file.relative_to(root).as_posix(),
                    "the file name is not valid UTF-8; rename it to index it",
                )
                continue
            if ignores.ignored(file, is_dir=False):
                continue
            files.append(file)
    return FolderScan(folder=root, files=tuple(files))


def id_root(path: Path, roots: Sequence[Path], default: Path) -> Path:
    """The folder ``path``'s resource id is relative to: the innermost of ``roots`` (folders
    indexed before) that holds it, else ``default``."""
    holding = [r for r in roots if path.is_relative_to(r) and path != r]
    return max(holding, key=lambda r: len(r.parts)) if holding else default


def file_limit(name: str, max_file_bytes: int, converter: DocumentConverter | None) -> tuple[int, str]:
    """``(bytes, setting)``: the largest file named ``name`` that folder ingest reads, and the
    setting that bounds it (``ingest.max_file_mb``; for a converted format also
    ``formats.max_source_mb`` when it is smaller).

    Raises:
        IngestError: a converted format with no ``converter``.
        ConfigError: a converted format whose parser is not installed (names the extra).
    """
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in FOLDER_SUFFIXES:
        return max_file_bytes, "ingest.max_file_mb"
    if suffix not in CONVERTED_SUFFIXES:
        raise IngestError(not_indexed(suffix))
    if converter is None:
        raise IngestError(f"{suffix} files need the formats extra; skipped")
    converter.require(CONVERTED_SUFFIXES[suffix])
    if converter.max_source_bytes < max_file_bytes:
        return converter.max_source_bytes, "formats.max_source_mb"
    return max_file_bytes, "ingest.max_file_mb"


def file_document(
    rel: str,
    data: bytes,
    *,
    root: str,
    source_uri: str,
    tenant: str = "",
    acl: tuple[str, ...] = (),
    converter: DocumentConverter | None = None,
    st: os.stat_result | None = None,
) -> tuple[Document, tuple[str, ...]]:
    """The :class:`~hybridsag.documents.Document` of one folder file from its bytes, as folder
    ingest makes it wherever the bytes come from (a file read here, or one a client uploaded):
    the id ``rel`` (its path relative to ``root``, the folder recorded as ``source_root``),
    the text decoded by :func:`decode_text` or converted by ``converter`` (by the suffix of
    ``rel``), the title (the first ``# H1``; reST: the first section title; a converted file:
    its own title; else the stem), the SHA-256 of ``data``, and ``st`` as the recorded stat
    (``None``: a file this process does not stat, such as one a client synced); and the
    warnings of what was left out (front matter that does not parse).

    Raises:
        IngestError: undecodable text, a file the converter refuses, an invalid field.
        ConfigError: a converted format whose parser is not installed.
    """
    name = PurePosixPath(rel)
    text, title, chunk_fmt, meta, notes = _document_parts(
        name, FOLDER_SUFFIXES.get(name.suffix.lower()), data, converter
    )
    doc = make_document(
        rel,
        text,
        title=title,
        metadata=meta,
        tenant=tenant,
        acl=acl,
        source_uri=source_uri,
        fmt=chunk_fmt,  # type: ignore[arg-type]
        source_mtime_ns=st.st_mtime_ns if st is not None else None,
        source_size=st.st_size if st is not None else None,
        source_root=root,
        source_sha256=hashlib.sha256(data).hexdigest(),
    )
    return doc, notes


def iter_files(
    files: Sequence[Path],
    errors: SourceErrors,
    *,
    root_of: Callable[[Path], Path],
    max_file_bytes: int,
    tenant: str = "",
    acl: tuple[str, ...] = (),
    converter: DocumentConverter | None = None,
) -> Iterator[Document]:
    """Documents from ``files`` (as :func:`scan_folder` lists them), each read with
    :func:`read_regular` inside the folder ``root_of(file)`` gives, which its id is relative to
    (recorded as ``source_root``), within :func:`file_limit`, and made by
    :func:`file_document`. A file that cannot be read, decoded or converted goes to ``errors``
    under its id; one read with something left out (front matter that does not parse) is
    indexed with a line in ``errors.warnings``."""
    for file in files:
        errors.seen += 1
        root = root_of(file)
        rel = file.relative_to(root).as_posix()
        try:
            limit, limit_name = file_limit(file.name, max_file_bytes, converter)
            data, st = read_regular(file, within=root, max_bytes=limit, limit_name=limit_name)
            doc, notes = file_document(
                rel, data, root=str(root), source_uri=str(file), tenant=tenant, acl=acl,
                converter=converter, st=st,
            )
        except OSError as exc:
            errors.add(rel, f"unreadable: {exc.strerror}")
            continue
        except (IngestError, ConfigError) as exc:  # ConfigError: the formats extra is missing
            errors.add(rel, str(exc))
            continue
        for note in notes:
            errors.warn(rel, note)
        yield doc


def _document_parts(
    path: PurePosixPath, fmt: str | None, data: bytes, converter: DocumentConverter | None
) -> tuple[str, str, str, dict[str, Any] | None, tuple[str, ...]]:
    """(text, title, chunker format, metadata, warnings) of one file's bytes. A text file is
    decoded (metadata names a detected non-UTF-8 encoding); a Markdown file's front matter gives
    its title and more metadata (:func:`hybridsag.ingest.front_matter.read_front_matter`, whose
    warnings are returned); any other file goes through ``converter`` (its metadata names the
    format and source hash).

    Raises:
        IngestError: undecodable text, or a file the converter refuses (the message says why).
    """
    if fmt is None:
        if converter is None:
            raise IngestError(f"{path.suffix} files need the formats extra; skipped")
        converted = converter.convert(data, CONVERTED_SUFFIXES[path.suffix.lower()], cached=True)
        return converted.text, converted.title or path.stem, "markdown", converted.metadata(), ()
    text, encoding = decode_text(data)
    own = {"encoding": encoding} if encoding else {}
    title = _title_of(text.lstrip("\ufeff"), fmt, path.stem)
    if fmt != "markdown":
        return text, title, fmt, own or None, ()
    from hybridsag.ingest.front_matter import read_front_matter

    fm = read_front_matter(text, reserved=frozenset(_OWN_METADATA))
    meta = {**fm.metadata, **own}
    return text, fm.title or title, fmt, meta or None, fm.warnings
