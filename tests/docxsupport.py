"""DOCX files for the conversion tests and the attack benchmark (issue 40): a real DOCX
(python-docx's own template) whose body is the given paragraphs, written straight into
``word/document.xml`` so that a large one costs seconds to build, not minutes."""

from __future__ import annotations

import io
import random
import zipfile
from collections.abc import Iterable
from xml.sax.saxutils import escape


def docx_of(paragraphs: Iterable[str]) -> bytes:
    """A DOCX holding ``paragraphs`` (plain text, one ``w:p`` each) after a ``Heading 1``."""
    import docx

    base = io.BytesIO()
    document = docx.Document()
    document.add_heading("Built", 1)
    document.save(base)
    body = "".join(f"<w:p><w:r><w:t>{escape(p)}</w:t></w:r></w:p>" for p in paragraphs)
    out = io.BytesIO()
    with zipfile.ZipFile(base) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "word/document.xml":
                head, _, tail = data.decode().partition("<w:body>")
                data = (head + "<w:body>" + body + tail).encode()
            dst.writestr(info, data)
    return out.getvalue()


def bomb_docx(unpacked_mb: int) -> bytes:
    """A DOCX of a few hundred KB whose document part unpacks to ``unpacked_mb`` MB (one
    paragraph repeated: it packs about 250 times)."""
    text = "lorem ipsum dolor sit amet " * 40
    return docx_of(text for _ in range(unpacked_mb * 1024 * 1024 // (len(text) + 40)))


def slow_docx(paragraphs: int, seed: int = 40) -> bytes:
    """A DOCX of ``paragraphs`` paragraphs of seeded random words (it packs 2 to 3 times):
    python-docx takes seconds per thousand paragraphs (it looks each one's style up), so its
    conversion is long enough to do something else meanwhile."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(2000)]
    return docx_of(" ".join(rng.choice(words) for _ in range(60)) for _ in range(paragraphs))
