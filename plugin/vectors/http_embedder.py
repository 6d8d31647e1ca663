"""Remote embedders: the ``openai``, ``tei`` and ``ollama`` backends of the embedder registry.

For teams that already embed with a hosted or self-hosted model. Wire formats (one request per
batch of ``embedding.batch_size`` texts; ``embedding.http.path`` replaces the path)::

    openai  POST {base_url}/v1/embeddings
            {"model": m, "input": [texts], "encoding_format": "float", "dimensions": d?}
            200 {"data": [{"index": i, "embedding": [...]}, ...], "usage": {"prompt_tokens": n}}
    tei     POST {base_url}/embed                      (Hugging Face Text Embeddings Inference)
            {"inputs": [texts], "normalize": true, "truncate": true}
            200 [[...], ...]                           (tokens: the x-compute-tokens header)
    ollama  POST {base_url}/api/embed
            {"model": m, "input": [texts], "truncate": true}
            200 {"embeddings": [[...], ...], "prompt_eval_count": n}

Contract (:class:`hybridsag.vectors.embedder.Embedder`):

* Texts are cut to ``embedding.max_chars`` characters first. A call's batches run at most
  ``embedding.http.max_in_flight`` at once, and no more than that are in flight for the
  embedder as a whole (every thread shares one limit). Each request goes through
  :meth:`hybridsag.remote_calls.Endpoint.post`: retries with backoff on 408/429/5xx and transport
  errors, ``Retry-After`` honoured, timeouts, the key scrubbed from messages, and the search's
  remote budget (``embedder/<backend>`` in its usage).
* Every answer is validated: as many vectors as texts (``openai``: every index 0..n-1 exactly
  once, in any order), each a list of finite numbers (no NaN, no Infinity, no bools, no
  strings) of the embedder's dimension, tokens (where reported) a count. A violation raises
  :class:`~hybridsag.errors.DenseError` naming it (never retried, never a default; counted in
  :meth:`HttpEmbedder.stats` as ``invalid_replies``); a batch whose vectors came back short is
  not padded, cut or accepted.
* ``dimension`` is ``embedding.http.dimensions``, else the first answer's length (one probe
  text is embedded on first use when nothing was embedded yet, outside any search's meter);
  every later answer must have it.
* Rows come back with L2 norm 1: a row within float32 rounding of norm 1 is kept exactly as sent
  (a server that sends normalised vectors gives back its very numbers), any other is scaled.
* ``fingerprint`` is ``<model>|http-<backend>`` (``-<d>d`` added for ``openai`` with
  ``dimensions``, which changes its vectors), known without a request: an index built with it
  refuses another model or backend, as it refuses a local one
  (:class:`~hybridsag.components.Components`). Passages are cached on disk by fingerprint and
  text hash (:class:`hybridsag.vectors.embed_cache.CachedEmbedder`, ``embedding.http.cache``); a
  search's query by the composition root's query memo.
* ``kind`` (query or passage) is accepted and not sent: these APIs take plain texts.

Example::

    emb = HttpEmbedder(Settings(embedding={"backend": "tei", "model": "bge-small",
                                            "http": {"base_url": "http://127.0.0.1:8080"}}))
    emb.encode(["what is RRF?"], kind="query").shape   # (1, 384)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from hybridsag.vectors.embedder_common import Kind, check_encode_args
from hybridsag.errors import ConfigError
from hybridsag.remote_calls import (
    DENSE_ERRORS,
    Endpoint,
    Reply,
    by_index,
    count_of,
    is_number,
    run_parallel,
    unmetered,
)
from hybridsag.settings import HTTP_EMBEDDERS

if TYPE_CHECKING:
    from hybridsag.settings import Settings

__all__ = ["WIRES", "HttpEmbedder", "Wire", "unit_rows"]

#: The text embedded to learn the dimension when ``embedding.http.dimensions`` is unset.
PROBE_TEXT = "dimension probe"
#: How far a row's norm may be from 1 and still count as normalised (float32 rounding of a
#: few hundred components is about 1e-7).
UNIT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Wire:
    """One API's request body and how its reply is read: ``body(model, texts, dimensions)``;
    ``read(data, reply, n, bad)`` returns the raw vectors in text order and the input tokens
    (None where the API does not say), raising ``bad(problem)`` for a reply of the wrong
    shape."""

    path: str
    body: Callable[[str, Sequence[str], int | None], dict[str, Any]]
    read: Callable[[Any, Reply, int, Callable[[str], Exception]], tuple[list[Any], int | None]]


def _openai_body(model: str, texts: Sequence[str], dimensions: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "input": list(texts), "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return body


def _openai_read(
    data: Any, reply: Reply, n: int, bad: Callable[[str], Exception]
) -> tuple[list[Any], int | None]:
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise bad("no 'data' list")
    items = data["data"]
    if len(items) != n:
        raise bad(f"{len(items)} embeddings for {n} inputs")
    got = by_index(items, n, lambda item, _: item.get("embedding"), bad, entry="an item of 'data'")
    vectors = [got[i] for i in range(n)]  # n items, no index twice: every index came
    usage = data.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if tokens is not None and not count_of(tokens):
        raise bad(f"usage.prompt_tokens is {tokens!r}, not a count")
    return vectors, tokens


def _tei_body(model: str, texts: Sequence[str], dimensions: int | None) -> dict[str, Any]:
    return {"inputs": list(texts), "normalize": True, "truncate": True}


def _tei_read(
    data: Any, reply: Reply, n: int, bad: Callable[[str], Exception]
) -> tuple[list[Any], int | None]:
    if not isinstance(data, list):
        raise bad(f"top level is {type(data).__name__}, not a list of vectors")
    header = reply.response.headers.get("x-compute-tokens")
    tokens = int(header) if header is not None and header.strip().isdigit() else None
    return data, tokens


def _ollama_body(model: str, texts: Sequence[str], dimensions: int | None) -> dict[str, Any]:
    return {"model": model, "input": list(texts), "truncate": True}


def _ollama_read(
    data: Any, reply: Reply, n: int, bad: Callable[[str], Exception]
) -> tuple[list[Any], int | None]:
    if not isinstance(data, dict) or not isinstance(data.get("embeddings"), list):
        raise bad("no 'embeddings' list")
    tokens = data.get("prompt_eval_count")
    if tokens is not None and not count_of(tokens):
        raise bad(f"prompt_eval_count is {tokens!r}, not a count")
    return data["embeddings"], tokens


#: backend name -> its wire format.
WIRES: dict[str, Wire] = {
    "openai": Wire("/v1/embeddings", _openai_body, _openai_read),
    "tei": Wire("/embed", _tei_body, _tei_read),
    "ollama": Wire("/api/embed", _ollama_body, _ollama_read),
}
assert set(WIRES) == set(HTTP_EMBEDDERS)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows with L2 norm 1 as a C-contiguous float32 array: a row already within
    :data:`UNIT_TOLERANCE` of norm 1 is kept as it is, any other is scaled (a zero row stays
    zero)."""
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    scale = np.abs(norms - 1.0) > UNIT_TOLERANCE
    if scale.any():
        out = out.copy()
        rows = out[scale]
        safe = np.maximum(norms[scale], np.finfo(np.float32).tiny)[:, None]
        out[scale] = (rows / safe).astype(np.float32)
    return out


class HttpEmbedder:
    """An embedder on a remote endpoint (see the module docstring for the contract).

    ``client``: an ``httpx.Client`` to use (its timeouts apply; :meth:`close` leaves it open).

    Raises:
        ConfigError: ``embedding.backend`` is not ``openai``, ``tei`` or ``ollama``, or
            ``embedding.http.base_url`` is unset or not an http(s) URL, or the key cannot go in
            a header.
    """

    def __init__(self, settings: Settings, *, client: httpx.Client | None = None) -> None:
        cfg = settings.embedding
        if cfg.backend not in WIRES:
            raise ConfigError(
                f"embedding.backend={cfg.backend!r} is not a remote embedder; valid: "
                f"{sorted(WIRES)}"
            )
        http = cfg.http
        self.api = cfg.backend
        self.wire = WIRES[self.api]
        self.name: str = cfg.model
        sends_dims = self.api == "openai" and http.dimensions is not None
        self.fingerprint: str = f"{cfg.model}|http-{self.api}" + (
            f"-{http.dimensions}d" if sends_dims else ""
        )
        self._send_dims = http.dimensions if sends_dims else None
        self._dimension: int | None = http.dimensions
        self._dim_lock = threading.Lock()
        self._batch_size = cfg.batch_size
        self._max_chars = cfg.max_chars
        self._max_in_flight = http.max_in_flight
        self._slots = threading.BoundedSemaphore(http.max_in_flight)
        self.endpoint = Endpoint.for_section(
            http,
            remote=f"embedder/{self.api}",
            label=f"{self.api} embedder",
            setting="embedding.http",
            default_path=self.wire.path,
            model=cfg.model,
            errors=DENSE_ERRORS,
            client=client,
            user_agent="hybridsag-embedder/0.1",
        )

    def __repr__(self) -> str:
        return f"HttpEmbedder(api={self.api!r}, model={self.name!r}, url={self.endpoint.url!r})"

    def close(self) -> None:
        """Close the HTTP client if this embedder built it."""
        self.endpoint.close()

    def stats(self) -> dict[str, int]:
        """The endpoint's totals (:meth:`hybridsag.remote_calls.Endpoint.stats`)."""
        return self.endpoint.stats()

    @property
    def dimension(self) -> int:
        """``embedding.http.dimensions``, else the first answer's (a probe request when nothing
        was embedded yet: a set-up call, as loading a local model is, counted on no search's
        meter and never refused by its budget)."""
        if self._dimension is None:
            with unmetered():
                self.encode([PROBE_TEXT], kind="query")
        assert self._dimension is not None
        return self._dimension

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """Embed ``texts`` remotely; see the module docstring for the contract.

        Raises:
            DenseError: a bad ``kind``, an HTTP error, a transport failure after the retries,
                or an answer that breaks the wire contract (wrong count, wrong dimension, NaN).
            DenseBudgetError: the search's remote budget is spent.
        """
        check_encode_args(texts, kind)
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        cut = [text[: self._max_chars] for text in texts]
        size = self._batch_size
        batches = [cut[i : i + size] for i in range(0, len(cut), size)]
        parts = run_parallel(
            batches,
            self._embed_batch,
            max_in_flight=self._max_in_flight,
            thread_name=f"embed-{self.api}",
        )
        return unit_rows(np.concatenate(parts, axis=0))

    def probe(self, *, timeout_s: float) -> None:
        """One query vector asked of the endpoint now: one request, no retry, at most
        ``timeout_s`` (:meth:`~hybridsag.vectors.embedder.Embedder.probe`); counted on no
        search's meter.

        Raises:
            DenseError: the endpoint answered an error (a 401: the key), not in time, or an
                answer that breaks the wire contract.
        """
        with unmetered():
            self._embed_batch([PROBE_TEXT], None, once_within=timeout_s)

    def _embed_batch(
        self, texts: list[str], abort: threading.Event | None, *, once_within: float | None = None
    ) -> np.ndarray:
        body = self.wire.body(self.name, texts, self._send_dims)
        with self._slots:
            reply = self.endpoint.post(body, abort=abort, once_within=once_within)
        bad = partial(self.endpoint.bad_reply, reply=reply)
        raw, tokens = self.wire.read(self.endpoint.loads(reply), reply, len(texts), bad)
        if len(raw) != len(texts):
            raise bad(f"{len(raw)} vectors for {len(texts)} inputs")
        dim = self._expect_dimension(raw, bad)
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, vector in enumerate(raw):
            if not isinstance(vector, list):
                raise bad(f"vector {i} is {type(vector).__name__}, not a list of numbers")
            if len(vector) != dim:
                raise bad(f"vector {i} has {len(vector)} dimensions, not {dim}")
            if not all(is_number(x) for x in vector):
                raise bad(f"vector {i} holds a value that is not a number")
            with np.errstate(over="ignore"):  # a number past float32's range becomes inf
                out[i] = vector
            if not np.isfinite(out[i]).all():
                raise bad(f"vector {i} holds a non-finite number")
        self.endpoint.count("requests")
        self.endpoint.charge(input_tokens=tokens or 0)
        return out

    def _expect_dimension(self, raw: list[Any], bad: Callable[[str], Exception]) -> int:
        """The dimension every vector must have (the first answer's when none is set)."""
        with self._dim_lock:
            if self._dimension is None:
                first = raw[0] if raw else None
                if not isinstance(first, list) or not first:
                    raise bad("the first vector is not a non-empty list of numbers")
                self._dimension = len(first)
            return self._dimension


def build(settings: Settings) -> HttpEmbedder:
    """Registry factory of the ``openai``, ``tei`` and ``ollama`` backends."""
    return HttpEmbedder(settings)
