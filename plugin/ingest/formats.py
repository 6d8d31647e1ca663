"""PDF, DOCX, HTML and EPUB files turned into Markdown the chunker reads (the ``formats`` extra).

:class:`DocumentConverter` converts one file into a :class:`Converted`: Markdown text in which the
document's structure is ATX headings, so :func:`~hybridsag.ingest.chunker.chunk_text` turns it into
heading paths, plus the title and page count. What each format keeps:

- **PDF** (pypdf): the text of every page in page order, each page under its own heading
  ``## Page N`` (1-based), so a chunk never spans two pages and its heading path is ``Page N``
  (a search result shows the page as its ``heading_path``). Pages without extractable text are
  left out. Title: the document information title. Lost: layout, fonts, images, annotations,
  the outline (bookmarks); a scanned PDF (no text layer) is refused, it needs OCR first.
- **DOCX** (python-docx): body paragraphs and tables in document order; ``Heading 1`` ..
  ``Heading 9`` styles become ``#`` .. ``######`` (7-9 as 6); list styles become ``-`` items;
  tables become Markdown table rows. Title: the core properties title, else the ``Title``-style
  paragraph, else the first heading. Lost: headers, footers, footnotes, comments, text boxes,
  images, tables nested in cells.
- **HTML** (BeautifulSoup over lxml, markdownify): ``h1`` .. ``h6`` become ATX headings; lists,
  tables (Markdown tables), block quotes and ``pre`` blocks (code fences) are kept in order;
  ``script``, ``style``, ``noscript``, ``template``, ``nav``, ``svg``, ``iframe`` and ``head``
  are removed; links keep their text (the URL is dropped); images are dropped. Title: ``<title>``,
  else the first heading.
- **EPUB** (ebooklib): the spine documents in reading order, each converted as HTML; a document
  without a heading of its own gets its table-of-contents entry as a ``#`` heading, so every
  chapter opens a heading path. Title: ``dc:title``, else the first heading. Lost: the cover and
  navigation documents, images, styles.

The caller falls back to the file stem when :attr:`Converted.title` is empty. Text that would read
as Markdown structure (a line starting ``#``, a code fence, a setext underline) is escaped with a
backslash, so only the document's own headings become headings.

Bounds (each a :class:`~hybridsag.settings.FormatsSettings` field): the source size, the size a
DOCX or EPUB archive unpacks to (and each large member's packing ratio, :data:`MAX_INFLATE_RATIO`,
read from the archive's directory before anything is unpacked), the PDF page count, and a time
budget per file checked between pages, chapters and blocks. Every conversion runs in a process
of its own (:mod:`hybridsag.ingest.sandbox`) with ``timeout_s`` of wall time and
``max_memory_mb`` of address space: a parser that stalls inside one page, or a file that
unpacks into gigabytes, is killed there, and a conversion in flight stops when the converter's
``cancel`` is set (the service's shutdown). A file over a bound, or one the parser cannot read,
raises :class:`~hybridsag.errors.IngestError` with the reason; conversion is all or nothing, so
a file is never half indexed.

The cache: with a cache folder, :meth:`DocumentConverter.convert_file` keeps each result as
``<sha256 of the source bytes>.md`` plus ``.json`` (format, title, pages, text hash), both written
atomically (temporary file, then rename); a later call with the same bytes reads them instead of
converting again. The source file is only ever read.

The parsers are imported inside the calls that need them: importing this module costs nothing
without the extra, and a missing parser raises :class:`~hybridsag.errors.ConfigError` naming
``pip install 'hybridsag[formats]'``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import io
import json
import logging
import os
import re
import tempfile
import threading
import time
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridsag.errors import ConfigError, IngestError
from hybridsag.ingest.sandbox import run_bounded

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

    from hybridsag.settings import Settings

__all__ = [
    "CACHE_VERSION",
    "CONVERTED_SUFFIXES",
    "EXTRA_HINT",
    "MAX_INFLATE_RATIO",
    "MAX_ZIP_MEMBERS",
    "Converted",
    "DocumentConverter",
    "converted_cache_dir",
    "escape_structure",
    "format_size",
]

#: Folder suffix -> format converted by :class:`DocumentConverter`.
CONVERTED_SUFFIXES: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".epub": "epub",
}
EXTRA_HINT = "pip install 'hybridsag[formats]'"
#: Bumped whenever conversion changes what it writes: older cache entries are then converted again.
CACHE_VERSION = 1
_MIB = 1024 * 1024
#: A ZIP member that unpacks to more than this many times its packed size (and past
#: :data:`_RATIO_FLOOR`) is refused as a bomb: Apache POI's default for OOXML files
#: (``ZipSecureFile.MIN_INFLATE_RATIO`` = 0.01); real DOCX and EPUB parts pack 3 to 20 times.
MAX_INFLATE_RATIO = 100
#: Members at most this large are not held to the ratio (a small file may pack very well).
_RATIO_FLOOR = _MIB
#: Most files a DOCX or EPUB archive may hold (real ones hold tens to a few thousand).
MAX_ZIP_MEMBERS = 10_000
#: The bounded process of a conversion is killed this long after ``timeout_s`` (its own
#: deadline, checked between pages, stops it first with a message saying where).
_WALL_GRACE_S = 2.0
# import name -> distribution, per format
_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "pdf": (("pypdf", "pypdf"),),
    "docx": (("docx", "python-docx"),),
    "html": (("bs4", "beautifulsoup4"), ("lxml", "lxml"), ("markdownify", "markdownify")),
    "epub": (
        ("ebooklib", "ebooklib"),
        ("bs4", "beautifulsoup4"),
        ("lxml", "lxml"),
        ("markdownify", "markdownify"),
    ),
}
# HTML elements whose content is never document text
_DROPPED_TAGS = ("script", "style", "noscript", "template", "nav", "svg", "iframe", "head")
_HEADING_TAG = re.compile(r"h[1-6]")
_DOCX_HEADING = re.compile(r"Heading ([1-9])")
# Line starts that the chunker would read as structure: an ATX heading, a code fence, a setext
# underline (a line of only '=' or only '-').
_STRUCTURE = re.compile(
    r"^([ \t]*)(?=#{1,6}(?:[ \t]|$)|`{3}|~{3}|(?:=+|-+)[ \t]*$)",
    re.MULTILINE,
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

logger = logging.getLogger(__name__)


def converted_cache_dir(data_dir: Path) -> Path:
    """Where converted text is cached under a data dir: ``<data_dir>/cache/converted``."""
    return Path(data_dir) / "cache" / "converted"


def escape_structure(text: str) -> str:
    """``text`` with a backslash before every line start the chunker would read as Markdown
    structure (``#`` heading, ````` ``` `````/``~~~`` fence, ``===``/``---`` setext underline).

    Example: ``escape_structure("# not a heading")`` -> ``"\\\\# not a heading"``
    """
    return _STRUCTURE.sub(lambda m: m.group(1) + "\\", text)


@dataclass(frozen=True, slots=True)
class Converted:
    """One converted file.

    ``text`` is Markdown whose headings are the document's own (PDF: ``## Page N``); ``title``
    is the document's title or ``""`` when it names none; ``pages`` is the PDF page count
    (``None`` for other formats); ``source_sha256`` hashes the source bytes; ``from_cache`` tells
    whether the text was read from the cache.
    """

    text: str
    title: str
    kind: str
    source_sha256: str
    pages: int | None = None
    from_cache: bool = False

    def metadata(self) -> dict[str, Any]:
        """Resource metadata recording where the text came from: ``format``,
        ``source_sha256`` (the staleness check compares the source file against it) and, for a
        PDF, ``pages``."""
        meta: dict[str, Any] = {"format": self.kind, "source_sha256": self.source_sha256}
        if self.pages is not None:
            meta["pages"] = self.pages
        return meta


class _Deadline:
    """The time budget of one conversion, checked between pages, chapters and blocks."""

    def __init__(self, seconds: float, kind: str) -> None:
        self.seconds = seconds
        self.kind = kind
        self.end = time.monotonic() + seconds

    def check(self, where: str) -> None:
        if time.monotonic() > self.end:
            raise IngestError(
                f"{self.kind.upper()} conversion ran past {self.seconds:g} s "
                f"(formats.timeout_s), stopped at {where}; skipped"
            )


class DocumentConverter:
    """Converts PDF, DOCX, HTML and EPUB files (see the module docstring for what each keeps).

    Args:
        cache_dir: folder of cached conversions (created on first write); ``None`` caches
            nothing.
        max_source_bytes: largest source file converted.
        max_unpacked_bytes: largest total a DOCX or EPUB archive may unpack to.
        max_pdf_pages: most pages a PDF may have.
        timeout_s: time budget of one conversion (checked between pages, chapters and blocks,
            and the wall time after which its process is killed).
        max_memory_bytes: address space of the process a conversion runs in.
        cancel: once set, a conversion in flight is stopped (its process killed) and
            :class:`~hybridsag.errors.WriteCancelledError` raised (the service sets it when it
            shuts down).

    Example: ``DocumentConverter(cache_dir=None).convert(b"<h1>A</h1><p>B.</p>", "html").text``
    -> ``"# A\\n\\nB.\\n"``
    """

    def __init__(
        self,
        *,
        cache_dir: Path | None,
        max_source_bytes: int = 50 * _MIB,
        max_unpacked_bytes: int = 500 * _MIB,
        max_pdf_pages: int = 2000,
        timeout_s: float = 300.0,
        max_memory_bytes: int = 1024 * _MIB,
        cancel: threading.Event | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_source_bytes = max_source_bytes
        self.max_unpacked_bytes = max_unpacked_bytes
        self.max_pdf_pages = max_pdf_pages
        self.timeout_s = timeout_s
        self.max_memory_bytes = max_memory_bytes
        self.cancel = cancel
        self._kinds: dict[str, Callable[[bytes, _Deadline], tuple[str, str, int | None]]] = {
            "pdf": self._pdf,
            "docx": self._docx,
            "html": self._html,
            "epub": self._epub,
        }

    @classmethod
    def from_settings(
        cls, settings: Settings, *, cancel: threading.Event | None = None
    ) -> DocumentConverter:
        """A converter with ``settings.formats`` bounds, caching under the data dir unless
        ``formats.cache`` is off; ``cancel`` stops a conversion in flight."""
        f = settings.formats
        return cls(
            cache_dir=converted_cache_dir(settings.data_dir) if f.cache else None,
            max_source_bytes=int(f.max_source_mb * _MIB),
            max_unpacked_bytes=int(f.max_unpacked_mb * _MIB),
            max_pdf_pages=f.max_pdf_pages,
            timeout_s=f.timeout_s,
            max_memory_bytes=int(f.max_memory_mb * _MIB),
            cancel=cancel,
        )

    # -- public -------------------------------------------------------------------------------

    def convert_file(self, path: Path, *, size: int | None = None) -> Converted:
        """Convert the file at ``path`` (its format from the suffix), through the cache.

        ``size`` is the file size the caller already has from ``stat`` (read here otherwise);
        a file over ``max_source_bytes`` is refused before it is read. Folder ingest reads files
        itself (guarded: regular files only, size cap, no symlink out of the folder) and calls
        :meth:`convert` with ``cached``.

        Raises:
            ConfigError: the parser for this format is not installed (names the pip install).
            IngestError: an unknown suffix, an unreadable file, a file over a bound, or one the
                parser cannot read; the message names the file's problem.
        """
        path = Path(path)
        kind = CONVERTED_SUFFIXES.get(path.suffix.lower())
        if kind is None:
            known = ", ".join(sorted(CONVERTED_SUFFIXES))
            raise IngestError(f"{path.name}: {path.suffix!r} is not converted; known: {known}")
        self.require(kind)
        try:
            if size is None:
                size = path.stat().st_size
            self._check_size(size)
            data = path.read_bytes()
        except OSError as exc:
            raise IngestError(f"unreadable: {exc.strerror}") from exc
        return self.convert(data, kind, cached=True)

    def convert(self, data: bytes, kind: str, *, cached: bool = False) -> Converted:
        """Convert ``data`` of format ``kind`` (``pdf``, ``docx``, ``html``, ``epub``); with
        ``cached``, through the cache (keyed by the bytes' SHA-256).

        Raises:
            ConfigError: the parser for ``kind`` is not installed.
            IngestError: an unknown ``kind``, data over a bound, or data the parser cannot read.
        """
        if kind not in self._kinds:
            raise IngestError(f"format {kind!r} is not converted; known: {', '.join(self._kinds)}")
        self.require(kind)
        self._check_size(len(data))
        sha = hashlib.sha256(data).hexdigest()
        if not cached:
            return self._convert(data, kind, sha)
        hit = self._read_cache(sha, kind)
        if hit is not None:
            logger.debug("read the converted text of %s from the cache", sha)
            return hit
        converted = self._convert(data, kind, sha)
        logger.debug("converted %s (%s, %d characters)", sha, kind, len(converted.text))
        self._write_cache(converted)
        return converted

    @staticmethod
    def require(kind: str) -> None:
        """Raise :class:`ConfigError` naming the pip install when a parser ``kind`` needs is
        missing."""
        for module, dist in _NEEDS.get(kind, ()):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(
                    f"reading {kind.upper()} files needs {dist}, which is not installed: "
                    f"{EXTRA_HINT}"
                ) from exc

    # -- conversion ---------------------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        if size > self.max_source_bytes:
            raise IngestError(
                f"the file is {format_size(size)}, over the "
                f"{format_size(self.max_source_bytes)} limit for "
                "converted formats (formats.max_source_mb); skipped"
            )

    def _convert(self, data: bytes, kind: str, sha: str) -> Converted:
        """The conversion, in its bounded process (:func:`~hybridsag.ingest.sandbox.run_bounded`:
        ``timeout_s`` of wall time, ``max_memory_bytes`` of address space, ``cancel``)."""
        bounds = {
            "max_source_bytes": self.max_source_bytes,
            "max_unpacked_bytes": self.max_unpacked_bytes,
            "max_pdf_pages": self.max_pdf_pages,
            "timeout_s": self.timeout_s,
        }
        return run_bounded(
            functools.partial(_convert_bounded, kind, sha, bounds),
            data,
            wall_s=self.timeout_s + _WALL_GRACE_S,
            memory_bytes=self.max_memory_bytes,
            cancel=self.cancel,
            what=f"{kind.upper()} conversion",
            setting="formats",
        )

    def _convert_here(self, data: bytes, kind: str, sha: str) -> Converted:
        """The conversion in this process (what the bounded process runs): the parser, then
        the text cleaned. IngestError for a file the parser cannot read; MemoryError passes."""
        deadline = _Deadline(self.timeout_s, kind)
        try:
            text, title, pages = self._kinds[kind](data, deadline)
        except (IngestError, ConfigError, MemoryError):
            raise
        except RecursionError as exc:
            raise IngestError(
                f"the {kind.upper()} nests its elements too deeply to convert; skipped"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - a parser fed a hostile file may raise anything
            raise IngestError(
                f"cannot read this {kind.upper()}: {type(exc).__name__}: {_short(exc)}; skipped"
            ) from exc
        text = _clean_text(text).strip()
        if not text:
            raise IngestError(f"the {kind.upper()} holds no text; skipped")
        return Converted(
            text=text + "\n", title=_clean_title(title), kind=kind, source_sha256=sha, pages=pages
        )

    def _pdf(self, data: bytes, deadline: _Deadline) -> tuple[str, str, int | None]:
        from pypdf import PasswordType, PdfReader
        from pypdf.errors import DependencyError, PdfReadError

        try:
            reader = PdfReader(io.BytesIO(data))
        except PdfReadError as exc:
            raise IngestError(
                f"not a readable PDF, corrupt or truncated ({_short(exc)}); skipped"
            ) from exc
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except DependencyError as exc:
                raise IngestError(
                    f"encrypted PDF that cannot be opened ({_short(exc)}); skipped"
                ) from exc
            if opened == PasswordType.NOT_DECRYPTED:
                raise IngestError("password-protected PDF: it needs a password to open; skipped")
        pages = len(reader.pages)
        if pages > self.max_pdf_pages:
            raise IngestError(
                f"the PDF has {pages} pages, over the limit of {self.max_pdf_pages} "
                "(formats.max_pdf_pages); skipped"
            )
        parts: list[str] = []
        for number, page in enumerate(reader.pages, start=1):
            deadline.check(f"page {number} of {pages}")
            body = escape_structure(_clean_text(page.extract_text() or "")).strip()
            if body:
                parts.append(f"## Page {number}\n\n{body}")
        if not parts:
            raise IngestError(
                f"the PDF has no extractable text on its {pages} pages (a scanned PDF needs OCR "
                "first); skipped"
            )
        info = reader.metadata
        title = str(info.title) if info is not None and info.title else ""
        return "\n\n".join(parts), title, pages

    def _docx(self, data: bytes, deadline: _Deadline) -> tuple[str, str, int | None]:
        names = self._open_zip(data, "DOCX")
        if "[Content_Types].xml" not in names or "word/document.xml" not in names:
            raise IngestError(
                "a ZIP archive, not a Word document (no word/document.xml; it holds "
                f"{_listing(names)}); skipped"
            )
        import docx
        from docx.table import Table

        document = docx.Document(io.BytesIO(data))
        out: list[str] = []
        first_heading = styled_title = ""
        for n, block in enumerate(document.iter_inner_content(), start=1):
            if n % 256 == 0:
                deadline.check(f"block {n}")
            if isinstance(block, Table):
                rows = [_table_row(c.text for c in row.cells) for row in block.rows]
                if rows:
                    width = rows[0].count(" | ") + 1
                    out.append("\n".join([rows[0], "|" + " --- |" * width, *rows[1:]]))
                continue
            text = _clean_text(block.text).strip()
            if not text:
                continue
            style = block.style.name if block.style is not None else ""
            heading = _DOCX_HEADING.fullmatch(style or "")
            if heading:
                line = " ".join(text.split())
                first_heading = first_heading or line
                out.append("#" * min(int(heading.group(1)), 6) + " " + line)
                continue
            if style == "Title":
                styled_title = styled_title or " ".join(text.split())
            body = escape_structure(text)
            if (style or "").startswith("List"):
                body = "- " + body.replace("\n", " ")
            out.append(body)
        title = document.core_properties.title or styled_title or first_heading
        return "\n\n".join(out), title, None

    def _html(self, data: bytes, deadline: _Deadline) -> tuple[str, str, int | None]:
        soup = _soup(data)
        title = soup.title.get_text(" ", strip=True) if soup.title is not None else ""
        text, first_heading = _soup_markdown(soup)
        return text, title or first_heading, None

    def _epub(self, data: bytes, deadline: _Deadline) -> tuple[str, str, int | None]:
        names = self._open_zip(data, "EPUB")
        if "META-INF/container.xml" not in names:
            raise IngestError(
                f"a ZIP archive, not an EPUB (no META-INF/container.xml; it holds "
                f"{_listing(names)}); skipped"
            )
        from ebooklib import epub

        book = epub.read_epub(io.BytesIO(data))
        toc = dict(_toc_titles(book.toc))
        parts: list[str] = []
        first_heading = ""
        documents = 0
        for idref, _linear in book.spine:
            item = book.get_item_with_id(idref)
            if not isinstance(item, epub.EpubHtml) or not item.is_chapter():
                continue  # the navigation and cover documents
            documents += 1
            deadline.check(f"spine document {item.get_name()}")
            text, heading = _soup_markdown(_soup(item.get_content()))
            if not text.strip():
                continue
            if not heading and toc.get(item.get_name()):
                heading = " ".join(toc[item.get_name()].split())
                text = f"# {heading}\n\n{text}"
            first_heading = first_heading or heading
            parts.append(text)
        if not parts:
            raise IngestError(f"the EPUB holds no text in its {documents} spine documents; skipped")
        titles = book.get_metadata("DC", "title")
        title = str(titles[0][0]) if titles and titles[0][0] else ""
        return "\n\n".join(parts), title or first_heading, None

    def _open_zip(self, data: bytes, what: str) -> set[str]:
        """Member names of a ZIP-based format, after the bounds on what it unpacks to, read
        from the archive's directory before any member is: the members' total declared size
        (``max_unpacked_bytes``), their number (:data:`MAX_ZIP_MEMBERS`) and each large
        member's ratio of unpacked to packed size (:data:`MAX_INFLATE_RATIO`). A member that
        unpacks past its declared size fails its read (zipfile stops at the declared size and
        checks the CRC), so the declared sizes bound what the parser gets."""
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                infos = zf.infolist()
        except zipfile.BadZipFile as exc:
            raise IngestError(f"not a {what} (not a ZIP archive: {_short(exc)}); skipped") from exc
        if len(infos) > MAX_ZIP_MEMBERS:
            raise IngestError(
                f"the {what} holds {len(infos)} files, over the limit of {MAX_ZIP_MEMBERS}; skipped"
            )
        unpacked = sum(i.file_size for i in infos)
        if unpacked > self.max_unpacked_bytes:
            raise IngestError(
                f"the {what} unpacks to {format_size(unpacked)}, over the "
                f"{format_size(self.max_unpacked_bytes)} limit (formats.max_unpacked_mb); skipped"
            )
        for i in infos:
            if i.file_size > _RATIO_FLOOR and i.file_size > MAX_INFLATE_RATIO * max(1, i.compress_size):
                raise IngestError(
                    f"the {what} looks like a ZIP bomb: {i.filename[:200]!r} unpacks "
                    f"{format_size(i.compress_size)} to {format_size(i.file_size)}, more than "
                    f"{MAX_INFLATE_RATIO} times; skipped"
                )
        return {i.filename for i in infos}

    # -- cache --------------------------------------------------------------------------------

    def _cache_paths(self, sha: str) -> tuple[Path, Path]:
        assert self.cache_dir is not None
        return self.cache_dir / f"{sha}.md", self.cache_dir / f"{sha}.json"

    def _read_cache(self, sha: str, kind: str) -> Converted | None:
        if self.cache_dir is None:
            return None
        text_path, meta_path = self._cache_paths(sha)
        try:
            meta = json.loads(meta_path.read_bytes())
            text = text_path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("ignoring the unreadable cache entry %s: %s", meta_path, exc)
            return None
        if (
            not isinstance(meta, dict)
            or meta.get("version") != CACHE_VERSION
            or meta.get("format") != kind
            or meta.get("text_sha256") != hashlib.sha256(text.encode("utf-8")).hexdigest()
        ):
            return None
        pages = meta.get("pages")
        return Converted(
            text=text,
            title=str(meta.get("title") or ""),
            kind=kind,
            source_sha256=sha,
            pages=pages if isinstance(pages, int) else None,
            from_cache=True,
        )

    def _write_cache(self, converted: Converted) -> None:
        """Text first, then the JSON that names its hash: a reader sees both or a miss."""
        if self.cache_dir is None:
            return
        text_path, meta_path = self._cache_paths(converted.source_sha256)
        data = converted.text.encode("utf-8")
        meta = {
            "version": CACHE_VERSION,
            "format": converted.kind,
            "title": converted.title,
            "pages": converted.pages,
            "text_sha256": hashlib.sha256(data).hexdigest(),
        }
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(text_path, data)
            _atomic_write(meta_path, json.dumps(meta, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:  # the document still indexes; only the next run converts again
            logger.warning("cannot cache the converted text in %s: %s", self.cache_dir, exc)


# --------------------------------------------------------------------------- helpers


def _convert_bounded(kind: str, sha: str, bounds: dict[str, Any], data: bytes) -> Converted:
    """What a conversion's bounded process runs (a module-level function: it is pickled to
    the child)."""
    return DocumentConverter(cache_dir=None, **bounds)._convert_here(data, kind, sha)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def format_size(n: int) -> str:
    """``52428800`` -> ``"50 MiB"``; under 100 KiB in bytes (``"104 bytes"``)."""
    return f"{n / _MIB:.4g} MiB" if n >= 100 * 1024 else f"{n:,} bytes"


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]


def _listing(names: set[str]) -> str:
    shown = sorted(names)[:5]
    more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return ", ".join(shown) + more if shown else "nothing"


def _clean_text(text: str) -> str:
    """``\\n`` line ends, no NUL characters and no lone surrogates (the chunker needs encodable
    UTF-8)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return text.encode("utf-8", "replace").decode("utf-8")


def _clean_title(title: str) -> str:
    return " ".join(_CONTROL.sub(" ", _clean_text(title)).split())[:500]


def _table_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(" ".join(c.split()).replace("|", "\\|") for c in cells) + " |"


def _toc_titles(entries: Any) -> Iterator[tuple[str, str]]:
    """(document name, title) of the table-of-contents entries in reading order; a document
    named by several entries keeps the first (its chapter title, not a section's)."""
    from ebooklib import epub

    seen: set[str] = set()

    def walk(items: Any) -> Iterator[tuple[str, str]]:
        for entry in items:
            if isinstance(entry, tuple):  # (Section, [children])
                section, children = entry
                yield from walk([section])
                yield from walk(children)
            elif isinstance(entry, epub.Link | epub.Section) and entry.href and entry.title:
                name = entry.href.split("#", 1)[0]
                if name not in seen:
                    seen.add(name)
                    yield name, entry.title

    yield from walk(entries)


def _soup(data: bytes) -> BeautifulSoup:
    from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        # EPUB documents are XHTML read by the HTML parser on purpose; short text is not a URL
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
        return BeautifulSoup(data, "lxml")


@functools.cache
def _markdown_converter() -> Any:
    """markdownify's converter with ATX headings, '-' bullets, links and images stripped, and
    only the escapes the chunker needs ('*' and '_' stay as written: identifiers survive)."""
    from markdownify import MarkdownConverter

    class _Converter(MarkdownConverter):  # type: ignore[misc]
        def escape(self, text: str, parent_tags: set[str]) -> str:
            return escape_structure(text)

    return _Converter(heading_style="atx", bullets="-", strip=["a", "img"], table_infer_header=True)


def _soup_markdown(soup: BeautifulSoup) -> tuple[str, str]:
    """Markdown of a parsed page without its dropped elements, and its first heading's text."""
    for tag in soup.find_all(_DROPPED_TAGS):
        tag.decompose()
    heading = soup.find(_HEADING_TAG)
    first = " ".join(heading.get_text(" ").split()) if heading is not None else ""
    return str(_markdown_converter().convert_soup(soup)), first
