"""The one tokenizer used for both the index and the query.

``tokenize(text)``: NFKC, then

- runs of Han characters go through jieba's search mode (``cut_for_search``), which emits the long
  word and its shorter dictionary words, so ``喜好`` finds ``我的喜好``;
- everything else takes a cheap regex path (English corpora never pay jieba's cost): words are
  ``\\w`` runs joined by ``_``, ``-`` or ``.`` and are kept **whole** (``snake_case_name``,
  ``e-1234``, ``v2.3.1``); a compound word also yields its parts (``snake``, ``case``, ``name``;
  ``e``, ``1234``), and a CamelCase word its case pieces and their adjacent pairs
  (``ReActAgent`` -> ``reactagent``, ``re``, ``act``, ``agent``, ``react``, ``actagent``);
- every token is lowercased; tokens without a letter or digit are dropped.

The FTS5 tables store these tokens space-joined and split them with ``unicode61`` plus
``tokenchars '-_.'`` (:data:`FTS_TOKENIZE`), so a quoted query term is one FTS token. The name and
version below are written into the store's meta; an index built with another tokenizer refuses to
open (:class:`hybridsag.errors.IndexMismatchError`).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path

__all__ = [
    "FTS_TOKENIZE",
    "TOKENIZER_NAME",
    "TOKENIZER_VERSION",
    "Tokenizer",
    "has_cjk",
    "load_stopwords",
]

TOKENIZER_NAME = "hybridsag-nfkc-jieba-search"
TOKENIZER_VERSION = "2"  # 2: compound-word parts emitted once, never the whole word again

#: The FTS5 ``tokenize=`` argument matching :func:`Tokenizer.tokenize` output. Diacritics are
#: folded by FTS5 itself (``remove_diacritics 2``) so ``Jose`` finds ``José``.
FTS_TOKENIZE = "unicode61 remove_diacritics 2 tokenchars '-_.'"

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_HAN_RUN = re.compile(f"[{_HAN}]+")
_HAS_HAN = re.compile(f"[{_HAN}]")
# A word: \w runs (minus Han, handled by jieba) joined by single _ - . characters.
_WORD = re.compile(rf"[^\W{_HAN}]+(?:[-.][^\W{_HAN}]+)*")
_JOINERS = re.compile(r"[-._]+")
_CASE_PIECES = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_A-Za-z]+")
_ALNUM = re.compile(r"[^\W_]")
# What makes a word compound: a joiner, or a case change inside it (camelCase, HTTPServer).
_COMPOUND_MARK = re.compile(r"[-._]|[a-z0-9][A-Z]|[A-Z]{2}[a-z]")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a Han character (the jieba path is needed)."""
    return _HAS_HAN.search(text) is not None


@lru_cache(maxsize=8)
def load_stopwords(directory: str | None = None) -> frozenset[str]:
    """Stop words from ``en.txt`` and ``zh.txt`` (``#`` comments) in ``directory``, or the files
    shipped with the package (``config/stopwords`` in the repository)."""
    texts: list[str] = []
    if directory is None:
        root = resources.files("hybridsag.stopwords")
        texts = [root.joinpath(n).read_text("utf-8") for n in ("en.txt", "zh.txt")]
    else:
        texts = [p.read_text("utf-8") for p in sorted(Path(directory).glob("*.txt"))]
    words = set()
    for text in texts:
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                words.add(unicodedata.normalize("NFKC", line).lower())
    return frozenset(words)


class Tokenizer:
    """The index/query tokenizer. Thread-safe; jieba is loaded on the first Han text only."""

    name = TOKENIZER_NAME
    version = TOKENIZER_VERSION

    def __init__(self, *, user_dict: Path | None = None, stopwords_dir: Path | None = None) -> None:
        self._user_dict = user_dict
        self._stopwords_dir = None if stopwords_dir is None else str(stopwords_dir)
        self._jieba = None
        self._lock = threading.Lock()

    @property
    def stopwords(self) -> frozenset[str]:
        return load_stopwords(self._stopwords_dir)

    def fingerprint(self) -> str:
        """What the store's meta records: name, version and the user dictionary, if any."""
        extra = f"+dict:{self._user_dict.name}" if self._user_dict else ""
        return f"{self.name}/{self.version}{extra}"

    def _jieba_tokenizer(self):  # type: ignore[no-untyped-def]
        if self._jieba is None:
            with self._lock:
                if self._jieba is None:
                    import logging

                    import jieba

                    logging.getLogger("jieba").setLevel(logging.WARNING)
                    tk = jieba.Tokenizer()
                    tk.initialize()
                    if self._user_dict is not None:
                        tk.load_userdict(str(self._user_dict))
                    self._jieba = tk
        return self._jieba

    def warm(self) -> float:
        """Load jieba's dictionary now (about 0.4-0.6 s) rather than on the first Han text;
        returns the seconds it took."""
        import time

        t0 = time.perf_counter()
        self._jieba_tokenizer()
        return time.perf_counter() - t0

    def tokenize(self, text: str) -> list[str]:
        """All index tokens of ``text``: the words in order, then the parts of compound words."""
        text = unicodedata.normalize("NFKC", text)
        if not has_cjk(text):
            return _latin_tokens(text)
        out: list[str] = []
        pos = 0
        jb = self._jieba_tokenizer()
        for m in _HAN_RUN.finditer(text):
            if m.start() > pos:
                out.extend(_latin_tokens(text[pos : m.start()]))
            out.extend(t for t in jb.cut_for_search(m.group()) if _ALNUM.search(t))
            pos = m.end()
        if pos < len(text):
            out.extend(_latin_tokens(text[pos:]))
        return out

    def index_text(self, text: str) -> str:
        """Tokens space-joined, as stored in the FTS5 columns."""
        return " ".join(self.tokenize(text))

    def query_terms(self, text: str, *, limit: int = 80) -> list[str]:
        """Query terms: tokens minus stop words, deduplicated in order, at most ``limit``."""
        stop = self.stopwords
        return _dedupe((t for t in self.tokenize(text) if t not in stop), limit)


def _dedupe(tokens: Iterable[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for tok in tokens:
        if tok not in seen:
            seen[tok] = None
            if len(seen) >= limit:
                break
    return list(seen)


def _latin_tokens(text: str) -> list[str]:
    whole = _WORD.findall(text)
    if not whole:
        return []
    joined = " ".join(whole)
    out = joined.lower().split()
    if "_" in joined:
        out = [t for t in out if _ALNUM.search(t)]
    last = -1
    for m in _COMPOUND_MARK.finditer(joined):
        start = joined.rfind(" ", 0, m.start()) + 1
        if start == last:
            continue  # a second mark in the same word
        last = start
        end = joined.find(" ", m.start())
        out.extend(_parts(joined[start : end if end >= 0 else len(joined)]))
    return out


def _parts(word: str) -> list[str]:
    """The parts of a compound word: joiner-separated pieces, then CamelCase pieces and their
    adjacent pairs; each once, and never the whole word again (``HttpServer``'s pair
    ``httpserver`` would count the word twice)."""
    out: list[str] = []
    pieces = [p for p in _JOINERS.split(word) if p]
    if pieces != [word]:
        out.extend(p.lower() for p in pieces)
    for piece in pieces:
        if piece.isalnum() and not (piece.islower() or piece.isupper() or piece.istitle()):
            parts = _CASE_PIECES.findall(piece)
            if len(parts) > 1:
                low = [p.lower() for p in parts]
                out.extend(low)
                out.extend(a + b for a, b in zip(low, low[1:]))
    whole = word.lower()
    return [p for p in dict.fromkeys(out) if p != whole]
