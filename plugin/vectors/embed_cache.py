"""A disk cache of passage embeddings keyed by (embedder fingerprint, sha256 of the text).

Benchmarks embed the same corpus again and again, and embedding is the slow part of building
an index, so the cache turns a rebuild of an unchanged corpus into a disk read. Queries are never
cached. The cache is a folder of ``.npy`` shards plus a JSON index, one folder per embedder
fingerprint (model, backend and precision), so two backends whose vectors differ never share
cached vectors. The composition root puts a remote embedder (``embedding.backend`` openai, tei,
ollama) behind one under ``<data_dir>/cache``, so a re-index sends nothing it sent before.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybridsag.once import close_part

__all__ = ["CachedEmbedder", "QueryMemo"]


class CachedEmbedder:
    """Wraps an :class:`~hybridsag.vectors.embedder.Embedder`; same contract, passages cached on disk."""

    def __init__(self, inner: Any, cache_dir: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.fingerprint: str = inner.fingerprint
        self.dimension = inner.dimension
        safe = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:16]
        self.folder = Path(cache_dir) / f"embeddings-{safe}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._mem: dict[str, np.ndarray] = {}
        self._loaded = False
        self.computed = 0
        self.seconds = 0.0

    def vocabulary_share(self, text: str) -> float | None:
        """The wrapped embedder's :meth:`vocabulary_share` (``None`` when it has none)."""
        return _inner_vocabulary_share(self.inner, text)

    def close(self) -> None:
        """Close the wrapped embedder when it holds something to close (a remote client)."""
        close_part(self.inner)

    def _load(self) -> None:
        if self._loaded:
            return
        for shard in sorted(self.folder.glob("shard-*.npy")):
            keys_file = shard.with_suffix(".json")
            if not keys_file.exists():
                continue
            keys = json.loads(keys_file.read_text("utf-8"))
            vecs = np.load(shard)
            if vecs.shape != (len(keys), self.dimension):
                continue
            self._mem.update(zip(keys, vecs))
        self._loaded = True

    def probe(self, *, timeout_s: float) -> None:
        """The wrapped embedder's probe (nothing cached is read)."""
        self.inner.probe(timeout_s=timeout_s)

    def encode(
        self, texts: Sequence[str], *, kind: Literal["query", "passage"] = "passage"
    ) -> np.ndarray:
        if kind == "query":
            return self.inner.encode(texts, kind=kind)
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        with self._lock:
            self._load()
            todo = [i for i, k in enumerate(keys) if k not in self._mem]
        if todo:
            t0 = time.perf_counter()
            fresh = self.inner.encode([texts[i] for i in todo], kind="passage")
            self.seconds += time.perf_counter() - t0
            self.computed += len(todo)
            new_keys = [keys[i] for i in todo]
            with self._lock:
                self._mem.update(zip(new_keys, fresh))
                stamp = f"shard-{time.time_ns()}"
                np.save(self.folder / f"{stamp}.npy", np.asarray(fresh, dtype=np.float32))
                (self.folder / f"{stamp}.json").write_text(json.dumps(new_keys), "utf-8")
        out = np.stack([self._mem[k] for k in keys]) if keys else np.zeros((0, self.dimension))
        return out.astype(np.float32, copy=False)


def _inner_vocabulary_share(inner: Any, text: str) -> float | None:
    from hybridsag.vectors.embedder import vocabulary_share

    return vocabulary_share(inner, text)


class QueryMemo:
    """Wraps an embedder so that one query is embedded once per search: the dense path, the
    offline judge (twice, once per SAG2 round) and a warm-up ask for the same question's
    vector. A small LRU of recent single-query encodings; a query asked for while another
    thread is embedding it waits for that vector instead of computing it again (two encodes
    of one text at once only contend for the CPU). Everything else passes through."""

    def __init__(self, inner: Any, size: int = 256) -> None:
        self.inner = inner
        self.name = inner.name
        self.fingerprint: str = inner.fingerprint
        self.size = size
        self._lock = threading.Lock()
        self._memo: dict[str, np.ndarray] = {}
        self._pending: dict[str, Future[np.ndarray]] = {}
        self._shares: dict[tuple[str, str], float | None] = {}

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def close(self) -> None:
        """Close the wrapped embedder when it holds something to close (a remote client)."""
        close_part(self.inner)

    def vocabulary_share(self, text: str) -> float | None:
        """The wrapped embedder's :meth:`vocabulary_share`, remembered per text like a query's
        vector (the trust step and the judge both ask), or ``None`` when it has none."""
        key = ("vocabulary", text)
        with self._lock:
            if key in self._shares:
                return self._shares[key]
        share = _inner_vocabulary_share(self.inner, text)
        with self._lock:
            self._shares[key] = share
            while len(self._shares) > self.size:
                self._shares.pop(next(iter(self._shares)))
        return share

    def probe(self, *, timeout_s: float) -> None:
        """The wrapped embedder's probe (past the memo: a remembered vector says nothing of
        how the model answers now)."""
        self.inner.probe(timeout_s=timeout_s)

    def encode(
        self, texts: Sequence[str], *, kind: Literal["query", "passage"] = "passage"
    ) -> np.ndarray:
        if kind != "query" or len(texts) != 1:
            return self.inner.encode(texts, kind=kind)
        key = texts[0]
        with self._lock:
            hit = self._memo.pop(key, None)
            if hit is not None:
                self._memo[key] = hit  # most recent last
                return hit.reshape(1, -1).copy()
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = Future()
        assert pending is not None
        if not owner:  # another thread is embedding this query: its vector (or its error)
            return pending.result().reshape(1, -1).copy()
        try:
            vec = np.asarray(self.inner.encode(texts, kind="query"), dtype=np.float32)
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            self._memo[key] = vec[0].copy()
            while len(self._memo) > self.size:
                self._memo.pop(next(iter(self._memo)))
            del self._pending[key]
        pending.set_result(vec[0].copy())
        return vec
