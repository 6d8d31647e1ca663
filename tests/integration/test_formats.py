"""PDF, DOCX, HTML and EPUB through folder ingest (the ``formats`` extra), end to end.

Every document is a real file written in the test by the library made for its format (fpdf2 and
pypdf for PDF, python-docx, ebooklib; HTML is text), indexed with ``HybridSearch.ingest_folder``
and found by a lexical search that shows its page or heading path.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

pypdf = pytest.importorskip("pypdf")
docx = pytest.importorskip("docx")
epub = pytest.importorskip("ebooklib.epub")
fpdf = pytest.importorskip("fpdf")

from hybridsag.errors import IngestError  # noqa: E402
from hybridsag.ingest.formats import DocumentConverter, converted_cache_dir, escape_structure  # noqa: E402
from hybridsag.results import SearchResult  # noqa: E402
from hybridsag.search import HybridSearch  # noqa: E402
from hybridsag.settings import Settings  # noqa: E402

MIB = 1024 * 1024
PARSERS = ("pypdf", "docx", "bs4", "lxml", "markdownify", "ebooklib")


# --------------------------------------------------------------------------- real files


def write_pdf(path: Path, pages: list[str], *, title: str | None = None) -> Path:
    """A PDF with one page per string, its text in a real content stream (fpdf2)."""
    pdf = fpdf.FPDF()
    if title is not None:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    pdf.output(str(path))
    return path


def write_locked_pdf(path: Path, source: Path, *, user_password: str) -> Path:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(source))
    writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm="AES-256")
    writer.write(path)
    return path


def write_docx(path: Path) -> Path:
    document = docx.Document()
    document.core_properties.title = "Orrery Handbook"
    document.add_paragraph("Orrery Handbook", style="Title")
    document.add_paragraph("An introduction mentioning the astrolabe.")
    document.add_heading("Install", level=1)
    document.add_paragraph("Run the narwhal installer first.")
    document.add_heading("Linux", level=2)
    document.add_paragraph("Use the apt repository for the platypus package.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("code", "meaning"), ("E-4711", "axolotl")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    document.add_heading("Windows", level=2)
    document.add_paragraph("# a hash line that stays text, about the capybara.")
    document.save(str(path))
    return path


def write_epub(path: Path, chapters: list[tuple[str, str]], *, title: str = "Field Notes") -> Path:
    """An EPUB 3 with one spine document per (toc title, body HTML), plus NCX and nav."""
    book = epub.EpubBook()
    book.set_identifier(f"id-{path.stem}")
    book.set_title(title)
    book.set_language("en")
    items = []
    for n, (toc_title, body) in enumerate(chapters, start=1):
        item = epub.EpubHtml(title=toc_title, file_name=f"c{n}.xhtml", lang="en")
        item.content = body
        book.add_item(item)
        items.append(item)
    book.toc = tuple(epub.Link(i.file_name, i.title, f"c{n}") for n, i in enumerate(items, 1))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    epub.write_epub(str(path), book)
    return path


HTML = """<!DOCTYPE html>
<html><head><title>Gazetteer</title><style>.quetzal { color: red }</style>
<script>var pangolin = "script text";</script></head>
<body><nav><a href="/">okapi navigation</a></nav>
<h1>Regions</h1><p>Overview of the <a href="/x">tundra</a> with snake_case_names kept.</p>
<h2>Coast</h2><p>The <b>dugong</b> grazes here.</p>
<table><tr><th>site</th><th>count</th></tr><tr><td>lagoon</td><td>42 manatee</td></tr></table>
</body></html>
"""


def _one(hs: HybridSearch, word: str) -> SearchResult:
    results = hs.search(word, paths=["bm25"], top_k=5).results
    assert len(results) == 1, [(r.resource_id, r.text) for r in results]
    return results[0]


def _found(hs: HybridSearch, word: str, **kwargs: object) -> list[str]:
    return [r.resource_id for r in hs.search(word, paths=["bm25"], top_k=5, **kwargs).results]


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "library"
    (root / "docs").mkdir(parents=True)
    write_pdf(
        root / "report.pdf",
        ["Page one talks about seals.", "The walrus eats clams.", "Final page on the ibex."],
        title="Marine Survey",
    )
    write_docx(root / "docs" / "handbook.docx")
    (root / "docs" / "gazetteer.html").write_text(HTML, "utf-8")
    (root / "docs" / "legacy.htm").write_text("<p>An untitled page about the tapir.</p>", "utf-8")
    write_epub(
        root / "notes.epub",
        [
            ("Chapter One", "<p>The okapi hides in the rainforest.</p>"),
            ("Chapter Two", "<h1>Savanna</h1><h2>Grazers</h2><p>The gerenuk stands to eat.</p>"),
        ],
    )
    (root / "plain.md").write_text("# Plain\n\nA markdown file about the gecko.\n", "utf-8")
    return root


# --------------------------------------------------------------------------- each format


def test_each_format_is_found_with_its_page_or_heading(hs: HybridSearch, library: Path) -> None:
    report = hs.ingest_folder(library)
    assert report.errors == {}
    assert report.indexed == 6

    walrus = _one(hs, "walrus")
    assert (walrus.resource_id, walrus.heading_path, walrus.title) == (
        "report.pdf",
        "Page 2",
        "Marine Survey",
    )
    assert walrus.source_uri == str(library / "report.pdf") and not walrus.stale
    assert _one(hs, "ibex").heading_path == "Page 3"
    assert _one(hs, "seals").heading_path == "Page 1"

    handbook = "docs/handbook.docx"
    assert (_one(hs, "narwhal").resource_id, _one(hs, "narwhal").heading_path) == (
        handbook,
        "Install",
    )
    assert _one(hs, "platypus").heading_path == "Install > Linux"
    assert _one(hs, "axolotl").heading_path == "Install > Linux"  # the table, in order
    assert "| E-4711 | axolotl |" in _one(hs, "axolotl").text
    assert _one(hs, "capybara").heading_path == "Install > Windows"  # '#' text is no heading
    assert _one(hs, "astrolabe").heading_path == ""
    assert _one(hs, "astrolabe").title == "Orrery Handbook"

    dugong = _one(hs, "dugong")
    assert (dugong.resource_id, dugong.heading_path, dugong.title) == (
        "docs/gazetteer.html",
        "Regions > Coast",
        "Gazetteer",
    )
    assert _one(hs, "manatee").heading_path == "Regions > Coast"
    assert "snake_case_names" in _one(hs, "tundra").text  # link text kept, no escapes added
    for hidden in ("pangolin", "quetzal", "okapi navigation"):  # script, style, nav
        assert "docs/gazetteer.html" not in _found(hs, hidden)
    tapir = _one(hs, "tapir")
    assert (tapir.resource_id, tapir.title, tapir.heading_path) == ("docs/legacy.htm", "legacy", "")

    okapi = _one(hs, "okapi")
    assert (okapi.resource_id, okapi.heading_path, okapi.title) == (
        "notes.epub",
        "Chapter One",  # the table-of-contents title of a chapter without a heading
        "Field Notes",
    )
    assert _one(hs, "gerenuk").heading_path == "Savanna > Grazers"
    assert _one(hs, "gecko").heading_path == "Plain"

    pdf = hs.components.store.get_resource("report.pdf")
    assert pdf is not None
    source_sha = hashlib.sha256((library / "report.pdf").read_bytes()).hexdigest()
    assert dict(pdf.metadata) == {"format": "pdf", "source_sha256": source_sha, "pages": 3}
    assert _found(hs, "walrus", filters={"metadata": {"format": "pdf"}}) == ["report.pdf"]
    assert _found(hs, "walrus", filters={"metadata": {"format": "docx"}}) == []
    book = hs.components.store.get_resource("notes.epub")
    assert book is not None and dict(book.metadata)["format"] == "epub"


def test_reindex_reads_the_cache_and_staleness_follows_the_source(
    hs: HybridSearch, library: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sources = {
        p.relative_to(library).as_posix(): p
        for p in library.rglob("*")
        if p.suffix in (".pdf", ".docx", ".html", ".htm", ".epub")
    }
    before = {rel: p.read_bytes() for rel, p in sources.items()}
    with caplog.at_level(logging.DEBUG, logger="hybridsag.ingest.formats"):
        first = hs.ingest_folder(library)
    assert first.indexed == 6 and first.errors == {}
    converted = [r.getMessage() for r in caplog.records if r.getMessage().startswith("converted ")]
    assert len(converted) == len(sources) == 5

    cache = converted_cache_dir(hs.settings.data_dir)
    for rel, data in before.items():
        sha = hashlib.sha256(data).hexdigest()
        meta = json.loads((cache / f"{sha}.json").read_text("utf-8"))
        text = (cache / f"{sha}.md").read_bytes()
        assert meta["text_sha256"] == hashlib.sha256(text).hexdigest()
        assert sources[rel].read_bytes() == data  # the source is never touched
    pdf_sha = hashlib.sha256(before["report.pdf"]).hexdigest()
    assert json.loads((cache / f"{pdf_sha}.json").read_text("utf-8"))["pages"] == 3
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary files left

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="hybridsag.ingest.formats"):
        second = hs.ingest_folder(library)
    assert (second.indexed, second.unchanged, second.errors) == (0, 6, {})
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if m.startswith("converted ")]
    assert len([m for m in messages if m.startswith("read the converted text")]) == 5

    # a new mtime with the same bytes: stale (search reads nothing but stat) until the next
    # index, which finds the same bytes in the cache and only records the new stat
    pdf = library / "report.pdf"
    os.utime(pdf, ns=(pdf.stat().st_atime_ns, pdf.stat().st_mtime_ns + 10_000_000_000))
    assert _found(hs, "walrus", include_stale=False) == []
    assert (hs.ingest_folder(library).indexed, _one(hs, "walrus").stale) == (0, False)

    # new bytes: stale (shown marked by default), then re-indexed from a new conversion
    write_pdf(pdf, ["The walrus moved away.", "A new page about the oryx."], title="Marine Survey")
    assert _found(hs, "walrus", include_stale=False) == []
    stale = hs.search("walrus", paths=["bm25"]).results
    assert [(r.resource_id, r.stale) for r in stale] == [("report.pdf", True)]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="hybridsag.ingest.formats"):
        third = hs.ingest_folder(library)
    assert (third.indexed, third.unchanged) == (1, 5)
    assert len([r for r in caplog.records if r.getMessage().startswith("converted ")]) == 1
    assert _one(hs, "oryx").heading_path == "Page 2"
    assert _found(hs, "clams") == []
    record = hs.components.store.get_resource("report.pdf")
    assert record is not None and dict(record.metadata)["pages"] == 2


# --------------------------------------------------------------------------- bad input


def test_bad_documents_are_reported_and_the_rest_of_the_batch_is_indexed(
    hs: HybridSearch, tmp_path: Path
) -> None:
    root = tmp_path / "batch"
    root.mkdir()
    good_pdf = write_pdf(root / "good.pdf", ["A sound page about the quokka."], title="Good")
    (root / "good.md").write_text("Markdown about the wombat.\n", "utf-8")
    write_docx(root / "good.docx")
    (root / "corrupt.pdf").write_bytes(good_pdf.read_bytes()[:300])
    write_locked_pdf(root / "locked.pdf", good_pdf, user_password="s3cret")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("notes.txt", "not a word document")
        zf.writestr("sheet.csv", "a,b\n1,2\n")
    (root / "renamed.docx").write_bytes(archive.getvalue())
    (root / "text.docx").write_bytes(b"plain bytes, no archive at all")
    with (root / "huge.html").open("wb") as fh:  # 50 MiB of real HTML, and a little more
        block = b"<p>filler paragraph about the huge html file.</p>\n" * 1024
        while fh.tell() <= 50 * MIB:
            fh.write(block)
    write_epub(root / "empty.epub", [("Blank", "<p></p>"), ("Image", '<p><img src="x.png"/></p>')])
    (root / "deep.html").write_text("<div>" * 5000 + "deep text" + "</div>" * 5000, "utf-8")

    report = hs.ingest_folder(root)

    assert sorted(hs.components.store.resources(["good.pdf", "good.md", "good.docx"])) == [
        "good.docx",
        "good.md",
        "good.pdf",
    ]
    assert report.indexed == 3
    assert _one(hs, "quokka").heading_path == "Page 1"
    assert _one(hs, "wombat").resource_id == "good.md"
    reasons = report.errors
    assert sorted(reasons) == [
        "corrupt.pdf",
        "deep.html",
        "empty.epub",
        "huge.html",
        "locked.pdf",
        "renamed.docx",
        "text.docx",
    ]
    assert "not a readable PDF, corrupt or truncated" in reasons["corrupt.pdf"]
    assert "password-protected PDF" in reasons["locked.pdf"]
    assert "not a Word document" in reasons["renamed.docx"]
    assert "notes.txt, sheet.csv" in reasons["renamed.docx"]
    assert "not a ZIP archive" in reasons["text.docx"]
    assert "over the 50 MiB limit" in reasons["huge.html"]
    assert "formats.max_source_mb" in reasons["huge.html"]
    assert "EPUB holds no text" in reasons["empty.epub"]
    assert "nests its elements too deeply" in reasons["deep.html"]
    assert all(r.endswith("skipped") for r in reasons.values())
    # nothing of a refused file is indexed, nothing of it is cached
    assert hs.components.store.resources(list(reasons)) == {}
    assert _found(hs, "filler") == [] and _found(hs, "deep") == []
    cached = {p.name for p in converted_cache_dir(hs.settings.data_dir).glob("*.md")}
    good = ("good.pdf", "good.docx")
    assert cached == {hashlib.sha256((root / n).read_bytes()).hexdigest() + ".md" for n in good}


def test_a_pdf_that_needs_no_password_to_open_is_read(hs: HybridSearch, tmp_path: Path) -> None:
    root = tmp_path / "owner"
    root.mkdir()
    plain = write_pdf(tmp_path / "plain.pdf", ["Restricted printing, readable kinkajou text."])
    write_locked_pdf(root / "restricted.pdf", plain, user_password="")  # an owner password only
    assert hs.ingest_folder(root).errors == {}
    assert _one(hs, "kinkajou").heading_path == "Page 1"


def test_the_limits_are_settable_and_named(tmp_path: Path) -> None:
    root = tmp_path / "limits"
    root.mkdir()
    write_pdf(root / "two.pdf", ["First page.", "Second page."])
    write_docx(root / "small.docx")
    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        formats={"max_pdf_pages": 1, "max_unpacked_mb": 0.001},
    )
    with HybridSearch(settings) as hs:
        report = hs.ingest_folder(root)
    assert report.indexed == 0
    assert "2 pages, over the limit of 1 (formats.max_pdf_pages)" in report.errors["two.pdf"]
    assert "formats.max_unpacked_mb" in report.errors["small.docx"]

    small = Settings(
        data_dir=tmp_path / "d2", embedding={"model": "none"}, formats={"max_source_mb": 0.0001}
    )
    with HybridSearch(small) as hs:
        report = hs.ingest_folder(root)
    assert "over the 104 bytes limit" in report.errors["two.pdf"]

    converter = DocumentConverter(cache_dir=None, timeout_s=1e-9)
    stopped = r"ran past 1e-09 s \(formats.timeout_s\), stopped at page 1 of 2"
    with pytest.raises(IngestError, match=stopped):
        converter.convert_file(root / "two.pdf")


def test_converted_text_escapes_what_would_read_as_structure() -> None:
    assert escape_structure("# title\n  ## two\n```\n~~~\n===\n---\n#tag\na # b") == (
        "\\# title\n  \\## two\n\\```\n\\~~~\n\\===\n\\---\n#tag\na # b"
    )
    converter = DocumentConverter(cache_dir=None)
    html = b"<h1>Top</h1><p>line one<br># not a heading<br>---</p><h3>Deep</h3><p>x</p>"
    assert converter.convert(html, "html").text == (
        "# Top\n\nline one  \n\\# not a heading  \n\\---\n\n### Deep\n\nx\n"
    )
    with pytest.raises(IngestError, match="holds no text"):
        converter.convert(b"<html><script>only()</script></html>", "html")
    with pytest.raises(IngestError, match="'odt' is not converted"):
        converter.convert(b"x", "odt")


# --------------------------------------------------------------------------- the extra


_WITHOUT_PARSERS = """
import json, sys
from pathlib import Path
for name in {parsers!r}:
    sys.modules[name] = None  # the formats extra is not installed: importing it fails
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
with HybridSearch(Settings(data_dir=Path(sys.argv[2]), embedding={{"model": "none"}})) as hs:
    print(json.dumps(hs.ingest_folder(Path(sys.argv[1])).as_dict()))
"""


def test_without_the_extra_the_files_are_skipped_with_the_pip_install(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    root.mkdir()
    write_pdf(root / "a.pdf", ["Text."])
    (root / "b.html").write_text("<p>Text.</p>", "utf-8")
    (root / "c.md").write_text("Markdown about the dingo.\n", "utf-8")
    script = _WITHOUT_PARSERS.format(parsers=PARSERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root), str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300, check=False, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["indexed"] == 1
    assert report["errors"] == {
        "a.pdf": "reading PDF files needs pypdf, which is not installed: "
        "pip install 'hybridsag[formats]'",
        "b.html": "reading HTML files needs beautifulsoup4, which is not installed: "
        "pip install 'hybridsag[formats]'",
    }


def test_the_core_never_imports_a_parser_and_the_extra_is_optional() -> None:
    code = (
        "import sys, hybridsag, hybridsag.search, hybridsag.ingest.sources, hybridsag.ingest.formats, "
        f"hybridsag.cli; print(sorted(m for m in {PARSERS!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert proc.stdout.strip() == "[]"
    requirements = metadata.requires("hybridsag") or []
    for dist in ("pypdf", "python-docx", "ebooklib", "markdownify", "beautifulsoup4"):
        (line,) = [r for r in requirements if r.split("=")[0].split("[")[0].strip() == dist]
        assert 'extra == "formats"' in line


# --------------------------------------------------------------------------- bounds (issue 40)


def test_a_zip_bomb_is_refused_from_its_directory_and_a_slow_conversion_is_stopped(
    tmp_path: Path,
) -> None:
    """A DOCX of a few hundred KB unpacking to 60 MB (within formats.max_unpacked_mb) is
    refused by its packing ratio before anything is unpacked; a conversion past
    formats.timeout_s is stopped (its process killed), the converter free again."""
    from tests.docxsupport import bomb_docx, docx_of, slow_docx

    converter = DocumentConverter(cache_dir=None)
    bomb = bomb_docx(60)
    assert len(bomb) < 2 * MIB
    with pytest.raises(IngestError, match="looks like a ZIP bomb: 'word/document.xml' unpacks"):
        converter.convert(bomb, "docx")
    short = DocumentConverter(cache_dir=None, timeout_s=0.5)
    with pytest.raises(IngestError, match=r"DOCX conversion ran past .* \(formats.timeout_s\)"):
        short.convert(slow_docx(3000), "docx")
    assert "a kinkajou" in short.convert(docx_of(["a kinkajou"]), "docx").text
