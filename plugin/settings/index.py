"""The settings of what is indexed and how it is read back: chunking, the tokenizer, the query's
limits, the store and the lexical index."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from hybridsag.settings.base import Section

__all__ = [
    "ChunkingSettings",
    "LexicalSettings",
    "QuerySettings",
    "StoreSettings",
    "TokenizerSettings",
]


class ChunkingSettings(Section):
    """SAG-Wiki chunking: sentences packed to ``target_chars``, whole-sentence overlap; hard
    caps on a chunk's characters (``max_chars``, None: 4 x ``target_chars``; code blocks stay
    whole up to it) and lines (``max_lines``); a chunk under ``min_chars`` joins a neighbour of
    its section (the rules: :mod:`hybridsag.ingest.chunker`)."""

    mode: Literal["sag", "passage"] = "sag"
    target_chars: int = Field(512, ge=400, le=12_000)
    overlap_chars: int = Field(80, ge=0, le=2_000)
    max_chars: int | None = Field(None, ge=400, le=100_000)
    max_lines: int = Field(200, ge=10, le=100_000)
    min_chars: int = Field(40, ge=0, le=400)

    @model_validator(mode="after")
    def _check_overlap(self) -> ChunkingSettings:
        if self.overlap_chars >= self.target_chars:
            raise ValueError(
                f"chunking.overlap_chars={self.overlap_chars} must be below "
                f"chunking.target_chars={self.target_chars}"
            )
        if self.max_chars is not None and self.max_chars < self.target_chars:
            raise ValueError(
                f"chunking.max_chars={self.max_chars} must be at least "
                f"chunking.target_chars={self.target_chars}"
            )
        return self


class TokenizerSettings(Section):
    """The one tokenizer used for index and query; ``user_dict`` is an optional jieba dictionary."""

    user_dict: Path | None = None
    stopwords_dir: Path | None = None  # None: the files shipped in the package


class QuerySettings(Section):
    max_chars: int = Field(4096, ge=16, le=1_000_000)
    max_terms: int = Field(80, ge=1, le=500)


class StoreSettings(Section):
    """The system of record. ``url`` None: the SQLite file under the data dir (embedded, one
    host). ``postgresql://user:password@host:port/db``: a PostgreSQL database that several
    processes and hosts share (the ``postgres`` extra); the lexical index then lives in it too.
    ``pool_size`` bounds the connections one process opens to it."""

    url: SecretStr | None = None
    pool_size: int = Field(64, ge=2, le=10_000)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(
            ("postgresql://", "postgres://")
        ):
            raise ValueError(
                "store.url must start with postgresql:// (or postgres://); leave it unset for "
                "the SQLite file under the data dir"
            )
        return value


class LexicalSettings(Section):
    """The lexical index the bm25, title and SAG2 paths read, and its BM25 column weights
    (title, heading, body).

    ``backend``: ``fts5`` (default) keeps it in the store (SQLite FTS5; on a PostgreSQL store,
    tsvector rows ranked as FTS5 ranks); ``milvus`` puts the text in Milvus full-text search
    (the Milvus of ``milvus``: Lite under the data dir, or a server, which must be 2.5 or newer)
    with ``milvus_analyzer``: ``auto`` (the standard analyzer for every row and jieba for CJK
    rows, the query's script picks), ``standard`` or ``jieba``; ``tantivy`` keeps it in tantivy
    indexes under ``<data_dir>/tantivy`` (the ``tantivy`` extra): the same tokens as FTS5's,
    ranked by a block-max WAND top k, with document frequencies from its own term dictionary.

    ``prune`` (FTS5): a search whose terms hold more than ``prune_min_postings`` postings ranks
    only the rows that can reach its top (a MaxScore bound: FTS5 ranks only the rows holding a
    rarer term, on those terms, and their common terms' part is added from their stored tokens,
    so no statement walks a common term's postings), with the same rows and scores as FTS5's
    full ranking; off, every matching row is scored.

    ``spelling``: a query word no chunk holds, and no word of its script's word list (English,
    Russian), is searched as the index term one edit from it (5 letters or more; never digits,
    CJK words or code), the one more chunks hold among equals: "pyton on windos" is searched
    as "python on windows", while "helm", a word, stays. FTS5 and milvus list their terms for it; on PostgreSQL and tantivy queries
    are not respelled (:mod:`hybridsag.lexical.spelling`).
    """

    backend: Literal["fts5", "milvus", "tantivy"] = "fts5"
    milvus_analyzer: Literal["auto", "standard", "jieba"] = "auto"
    title_weight: float = Field(2.0, ge=0.0, le=100.0)
    heading_weight: float = Field(2.0, ge=0.0, le=100.0)
    body_weight: float = Field(1.0, ge=0.0, le=100.0)
    prune: bool = True
    prune_min_postings: int = Field(20_000, ge=0, le=1_000_000_000)
    spelling: bool = True
