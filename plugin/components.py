"""The composition root: every part of hybridsag built once from one ``Settings``.

:class:`Components` owns the store, the tokenizer, the lexical index, the write lock, the
embedder, the dense index, the judge, the write path and the recall paths. The cheap parts
(tokenizer, store, lexical index) are built when it is made; the others (the write lock and
the write path included) on first use, each
at most once, under its own lock (double-checked), so a fresh instance whose first searches start
from many threads at once still loads one model. :class:`~hybridsag.search.HybridSearch`, the
reconciler, eval, the service and the fitting script are all handed the same ``Components``;
nobody builds a part of their own or reaches into another object's attributes.

No heavy work where none is needed: the dense index opens from the dimension and model recorded
in the index meta, so a delete, a disable, a reconcile plan or ``doctor`` never imports torch nor
loads the model; only embedding (an ingest, a query, a backfill) does. The index-compatibility
check lives here: an index built with another tokenizer (the store), another embedding model or
another vector dimension refuses to open with :class:`~hybridsag.errors.IndexMismatchError`. A
remote embedder (``embedding.backend`` openai, tei or ollama) is put behind a disk cache of
passage vectors under ``<data_dir>/cache`` (``embedding.http.cache``), so a passage embedded
once is not sent again (a rebuild, a re-index, a chunk that did not change).

Index identity: every data dir gets an index id once (random, in the meta, :attr:`index_id`);
its vectors live in a collection it owns and carry the id (:mod:`hybridsag.vectors.index`), so data
dirs sharing a Milvus server never see, plan over nor delete each other's vectors. A data dir
whose vectors were written by an older build (a dimension recorded, no index id) opens no dense
index until ``hybridsag rebuild-vectors`` (:meth:`Components.rebuild_vectors`) gave it one. A
data dir that recorded vectors never gets a missing collection (a deleted Milvus Lite folder, a
dropped collection) recreated empty: that is an error until it is restored or rebuilt.

Example::

    with Components(Settings()) as parts:
        parts.retriever("bm25").retrieve("ReActAgent", limit=5, filters=Filters())
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from hybridsag.errors import ConfigError, IndexMismatchError
from hybridsag.judges import JUDGES, judge_names, make_judge
from hybridsag.lexical.contract import LexicalIndex
from hybridsag.lexical.index import StoreLexicalIndex
from hybridsag.once import Once, close_part
from hybridsag.paths import check_path_names, check_weights, path_spec
from hybridsag.records.postgres import AdvisoryWriteLock
from hybridsag.paths.base import Retriever
from hybridsag.settings import HTTP_EMBEDDERS, Settings
from hybridsag.records.store import Store
from hybridsag.lexical.tokenizer import Tokenizer
from hybridsag.paths.query_facts import load_confidence_model, load_trust_model

if TYPE_CHECKING:
    from hybridsag.vectors.contract import DenseIndex
    from hybridsag.vectors.embedder import Embedder
    from hybridsag.fusion import TrustModel
    from hybridsag.fusion.confidence import ConfidenceModel
    from hybridsag.judges.base import Judge
    from hybridsag.ingest.writer import StepHook, WriteLock, Writer

__all__ = ["Components", "Once", "check_names"]  # Once is hybridsag.once's, kept importable here

#: Index meta keys of the dense side (what the vectors were made with): the model name, the
#: vector length and the embedder's fingerprint (model, backend, precision).
META_MODEL = "embedding_model"
META_DIMENSION = "embedding_dimension"
#: Index meta key of the index id (made once per data dir; see the module docstring).
META_INDEX_ID = "index_id"
META_FINGERPRINT = "embedding_fingerprint"
#: What indexes made before fingerprints were recorded were embedded with.
LEGACY_BACKEND = "sentence-transformers-fp32"


class Components:
    """The parts of one data dir, built from ``settings`` (see the module docstring).

    ``embedder``, ``dense_index`` and ``judge`` may be given ready-made (a test's own judge, a
    cached embedder for eval); ``step_hook`` is the write path's crash-injection hook for tests.

    Raises:
        ConfigError: an unknown path name in ``search.paths`` or ``fusion.weights``, an unknown
            ``judge.name``.
        IndexMismatchError: the store was built with another tokenizer.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        dense_index: DenseIndex | None = None,
        judge: Judge | None = None,
        step_hook: StepHook | None = None,
    ) -> None:
        self.settings = settings
        s = settings
        check_names(s)
        try:
            s.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the data dir {s.data_dir}: {exc}") from exc
        self.tokenizer = Tokenizer(
            user_dict=s.tokenizer.user_dict, stopwords_dir=s.tokenizer.stopwords_dir
        )
        self.store = Store(
            s.store_location,
            tokenizer_fingerprint=self.tokenizer.fingerprint(),
            pool_size=s.store.pool_size,
        )
        try:
            #: this data dir's index id; None while its vectors are an older build's
            self.index_id: str | None = self._index_identity()
            self.lexical: LexicalIndex = self._build_lexical()
        except BaseException:
            self.store.close()
            raise
        self._step_hook = step_hook
        self._embedder: Once[Embedder] = Once(self._build_embedder)
        if embedder is not None:
            self._embedder = Once(self._build_embedder, _memo(self._checked_embedder(embedder)))
        self._dense: Once[DenseIndex] = Once(self._build_dense_index)
        self._given_dense = dense_index
        self._judge: Once[Judge] = Once(lambda: make_judge(s.judge.name, self), judge)
        self._lock: Once[WriteLock] = Once(self._build_lock)
        self._writer: Once[Writer] = Once(self._build_writer)
        self._trust_model: Once[TrustModel] = Once(
            lambda: load_trust_model(s.fusion.trust_model)
        )
        self._confidence_model: Once[ConfidenceModel] = Once(load_confidence_model)
        self._retrievers: dict[str, Once[Retriever]] = {}
        self._retrievers_lock = threading.Lock()
        self._rebuilding = False
        self._closed = False

    def _build_lexical(self) -> LexicalIndex:
        """The lexical index of ``lexical.backend``: the store's own (FTS5, or PostgreSQL's
        rows), Milvus full-text search (which connects on first use) or tantivy (indexes under the
        data dir, opened on first use)."""
        s = self.settings
        if s.lexical.backend == "milvus":
            from hybridsag.lexical.milvus_fulltext import MilvusLexicalIndex

            return MilvusLexicalIndex(
                self.store,
                self.tokenizer,
                s.lexical,
                all_settings=s,
                index_id=self.index_id,
                max_terms=s.query.max_terms,
            )
        if s.lexical.backend == "tantivy":
            from hybridsag.lexical.tantivy_index import TantivyLexicalIndex

            return TantivyLexicalIndex(
                self.store,
                self.tokenizer,
                s.lexical,
                path=s.data_dir / "tantivy",
                max_terms=s.query.max_terms,
            )
        return StoreLexicalIndex(self.store, self.tokenizer, s.lexical, max_terms=s.query.max_terms)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close what was built (judges and embedders with connections, the dense index, the
        store). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        judges = [self._judge.peek()]
        with self._retrievers_lock:
            onces = list(self._retrievers.values())
        judges += [getattr(o.peek(), "judge", None) for o in onces]
        closers = [*judges, self._embedder.peek()]  # a remote judge or embedder holds a client
        for part in {id(p): p for p in closers if p is not None}.values():
            close_part(part)
        dense = self._dense.peek()
        if dense is not None:
            dense.close()
        self.lexical.close()
        self.store.close()

    def __enter__(self) -> Components:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the dense side ---------------------------------------------------------------------------

    def _index_identity(self) -> str | None:
        """The index id from the meta; made now (once, whichever process is first) for a data
        dir without recorded vectors; None for one whose vectors an older build wrote."""
        index_id = self.store.get_meta(META_INDEX_ID)
        if index_id is not None or self.store.get_meta(META_DIMENSION) is not None:
            return index_id
        return self._new_index_id()

    def _new_index_id(self) -> str:
        self.store.init_meta([(META_INDEX_ID, uuid.uuid4().hex)])
        index_id = self.store.get_meta(META_INDEX_ID)
        assert index_id is not None
        return index_id

    @property
    def collection(self) -> str | None:
        """The collection this data dir's vectors live in (None while its vectors are an
        older build's, which may share one with other data dirs)."""
        if self.settings.milvus.collection:
            return self.settings.milvus.collection
        from hybridsag.vectors.milvus_dense import default_collection

        return default_collection(self.index_id) if self.index_id is not None else None

    @property
    def dense_enabled(self) -> bool:
        """Whether the dense path is on (an embedding model is configured, or an index given)."""
        return self._given_dense is not None or self.settings.embedding.model != "none"

    def embedder(self) -> Embedder:
        """The embedder (built once; its model loads on first encode). Raises ConfigError when
        the dense path is off or the model cannot be found, IndexMismatchError when the index
        was built with another model or dimension."""
        return self._embedder.get()

    def dense_index(self) -> DenseIndex:
        """The dense index, opened (created when missing) for the recorded dimension; the model
        is loaded only when no dimension is recorded yet (a new index)."""
        return self._dense.get()

    def stored_dense_index(self) -> DenseIndex | None:
        """The dense index when this data dir has recorded vectors (or a team collection is
        attached), else ``None``: for deletes and the reconciler, which must never create a
        collection nor load a model to learn that there is nothing to remove."""
        if not self.dense_enabled:
            return None
        if self._dense.built or self.settings.milvus.attach:
            return self.dense_index()
        if self.store.get_meta(META_DIMENSION) is None and self._given_dense is None:
            return None
        return self.dense_index()

    def embedding_backend(self) -> str:
        """The embedder backend this data dir uses: ``embedding.backend``, with ``auto``
        resolved against what the index recorded (nothing is loaded)."""
        from hybridsag.vectors.embedder_common import resolve_backend

        return resolve_backend(self.settings, self._stored_fingerprint()).embedding.backend

    def _model_name(self) -> str:
        return self.settings.embedding.model

    def _stored_fingerprint(self) -> str | None:
        stored = self.store.get_meta(META_FINGERPRINT)
        model = self.store.get_meta(META_MODEL)
        if stored is None and model is not None:
            stored = f"{model}|{LEGACY_BACKEND}"
        return stored

    def _checked_embedder(self, embedder: Embedder) -> Embedder:
        """Refuse an embedder whose model, vectors (fingerprint: backend and precision) or
        dimension differ from what the index recorded."""
        stored_model = self.store.get_meta(META_MODEL)
        if stored_model is not None and stored_model != embedder.name:
            raise IndexMismatchError(
                f"the vectors at {self.settings.data_dir} were made by {stored_model!r}, "
                f"this build embeds with {embedder.name!r}: rebuild the index"
            )
        stored_fp = self._stored_fingerprint()
        fingerprint = embedder.fingerprint
        if stored_fp is not None and stored_fp != fingerprint:
            raise IndexMismatchError(
                f"the vectors at {self.settings.data_dir} were made by {stored_fp!r}, this build "
                f"embeds with {fingerprint!r} (embedding.backend / embedding.quantize), which "
                "gives other vectors: switch back, or rebuild the index"
            )
        stored_dim = self.store.get_meta(META_DIMENSION)
        if stored_dim is not None and int(stored_dim) != embedder.dimension:
            raise IndexMismatchError(
                f"the dense index holds {stored_dim}-d vectors but embedding.model="
                f"{embedder.name!r} makes {embedder.dimension}-d vectors; rebuild the dense "
                "index or switch back to the model it was built with"
            )
        return embedder

    def _build_embedder(self) -> Embedder:
        from hybridsag.vectors.embedder import make_embedder

        embedder = make_embedder(self.settings, recorded=self._stored_fingerprint())
        if embedder is None:
            raise ConfigError("the dense path is off (embedding.model = 'none')")
        stored_model = self.store.get_meta(META_MODEL)
        if stored_model is not None and stored_model != embedder.name:  # before any model load
            raise IndexMismatchError(
                f"the vectors at {self.settings.data_dir} were made by {stored_model!r}, "
                f"this build embeds with {embedder.name!r}: rebuild the index"
            )
        embedder = self._checked_embedder(embedder)
        if self.embedding_backend() in HTTP_EMBEDDERS and self.settings.embedding.http.cache:
            from hybridsag.vectors.embed_cache import CachedEmbedder

            # a remote embedder's passages are kept on disk by fingerprint and text hash
            embedder = CachedEmbedder(embedder, self.settings.data_dir / "cache")
        return _memo(embedder)

    def _build_dense_index(self) -> DenseIndex:
        from hybridsag.vectors.index import make_dense_index
        from hybridsag.vectors.milvus_dense import LEGACY_COLLECTION

        if not self.dense_enabled:
            raise ConfigError("the dense path is off (embedding.model = 'none')")
        m = self.settings.milvus
        if self._given_dense is not None:
            index = self._given_dense
            given_id = index.index_id
            if given_id is not None and given_id != self.index_id:
                raise IndexMismatchError(
                    f"the dense index given belongs to index {given_id!r}, this data dir's is "
                    f"{self.index_id!r}"
                )
        elif self.index_id is None and not m.attach:
            raise IndexMismatchError(
                f"the vectors of {self.settings.data_dir} were written by an older hybridsag, "
                f"without an index id, into collection {m.collection or LEGACY_COLLECTION!r}, "
                "which other data dirs may share; nothing is searched, written or deleted "
                "there. Run `hybridsag rebuild-vectors` to give this data dir its own collection "
                "and re-embed its chunks into it (the old collection is left as it is)"
            )
        else:
            index = make_dense_index(self.settings, index_id=None if m.attach else self.index_id)
            index = self._exact_search(index)
        try:
            stored_model = self.store.get_meta(META_MODEL)
            if stored_model is not None and stored_model != self._model_name():
                raise IndexMismatchError(
                    f"the vectors at {self.settings.data_dir} were made by {stored_model!r}, "
                    f"this build embeds with {self._model_name()!r}: rebuild the index"
                )
            stored_dim = self.store.get_meta(META_DIMENSION)
            dimension = int(stored_dim) if stored_dim else self.embedder().dimension
            # recorded vectors mean the collection was made: missing now, it was lost
            index.ensure(dimension, create=stored_dim is None or self._rebuilding)
            if stored_dim is None:
                embedder = self.embedder()
                fingerprint = embedder.fingerprint
                self.store.init_meta(
                    [
                        (META_DIMENSION, str(dimension)),
                        (META_MODEL, self._model_name()),
                        (META_FINGERPRINT, fingerprint),
                    ]
                )
        except BaseException:
            if index is not self._given_dense:
                index.close()
            raise
        return index

    def _exact_search(self, index: DenseIndex) -> DenseIndex:
        """``index`` searched exactly in this process
        (:class:`~hybridsag.vectors.exact.ExactDenseIndex`, its rows loaded from the vectors
        the store keeps) when it is this data dir's own collection in the embedded Milvus Lite
        store and the store holds at most ``milvus.exact_search_max_rows`` vectors; else
        ``index`` itself."""
        from hybridsag.vectors.milvus_dense import MilvusDenseIndex

        m = self.settings.milvus
        if m.uri is not None or m.attach or not isinstance(index, MilvusDenseIndex):
            return index
        if not 0 < m.exact_search_max_rows or self.store.vector_count() > m.exact_search_max_rows:
            return index
        from hybridsag.milvus_client import lite_path
        from hybridsag.vectors.exact import ExactDenseIndex, store_rows

        return ExactDenseIndex(
            index, where=str(lite_path(self.settings)), rows=lambda: store_rows(self.store)
        )

    def rebuild_vectors(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Give this data dir an index id if it has none (its vectors were an older build's),
        (re)create its own collection and embed every current chunk into it: the way out of
        a legacy shared collection and of a lost one (deleted Milvus Lite folder, dropped
        collection). Returns the number of vectors written. The old collection is never
        touched. ConfigError when the dense path is off or in attach mode."""
        if not self.dense_enabled or self.settings.milvus.attach:
            raise ConfigError(
                "rebuild-vectors writes hybridsag's own collection: the dense path is off "
                "(embedding.model = 'none') or milvus.attach is true"
            )
        if self.index_id is None:
            with self.lock.hold():
                self.index_id = self._new_index_id()
        self._rebuilding = True
        try:
            self.dense_index()
            return self.writer().backfill_vectors(progress=progress)
        finally:
            self._rebuilding = False

    # -- judge, writer, paths ---------------------------------------------------------------------

    def judge(self) -> Judge:
        """The judge named by ``judge.name`` (built once)."""
        return self._judge.get()

    def trust_model(self) -> TrustModel:
        """The fusion trust step's model (``fusion.trust_model``; loaded once). ConfigError
        for a missing or malformed file."""
        return self._trust_model.get()

    def confidence_model(self) -> ConfidenceModel:
        """The response confidence model that ships (:mod:`hybridsag.fusion.confidence`; loaded
        once). ConfigError for a missing or malformed file."""
        return self._confidence_model.get()

    def writer(self) -> Writer:
        """The write path over the store, the lexical index and (when on) the dense side."""
        return self._writer.get()

    @property
    def lock(self) -> WriteLock:
        """The data dir's write lock (``<data_dir>/write.lock``), made on first use: a process
        that only searches never imports the write path."""
        return self._lock.get()

    def _build_lock(self) -> WriteLock:
        from hybridsag.ingest.writer import WriteLock

        if self.store.is_postgres:  # writers of every replica take turns on the database
            return AdvisoryWriteLock(self.store.backend)  # type: ignore[arg-type,return-value]
        return WriteLock(self.settings.data_dir)

    def _build_writer(self) -> Writer:
        from hybridsag.ingest.writer import Writer

        own_vectors = self.dense_enabled and not self.settings.milvus.attach
        return Writer(
            self.store,
            self.lexical,
            self.settings.chunking,
            self.lock,
            dense=self.dense_index if own_vectors else None,
            stored_dense=self.stored_dense_index if own_vectors else None,
            embedder=self.embedder if own_vectors else None,
            step_hook=self._step_hook,
        )

    def retriever(self, name: str) -> Retriever:
        """The recall path registered under ``name`` (built once). ConfigError for an unknown
        name or a path that needs the dense side while it is off."""
        spec = path_spec(name)
        with self._retrievers_lock:
            once = self._retrievers.get(name)
            if once is None:
                if spec.needs_dense and not self.dense_enabled:
                    raise ConfigError(
                        f"path {name!r} needs an embedder (embedding.model is 'none')"
                    )
                once = self._retrievers[name] = Once(lambda: spec.build(self))
        return once.get()


def _memo(embedder: Embedder) -> Embedder:
    """``embedder`` behind a :class:`~hybridsag.vectors.embed_cache.QueryMemo`, so that one search
    embeds its query once (the dense path and the judge's passes share the vector)."""
    from hybridsag.vectors.embed_cache import QueryMemo

    return embedder if isinstance(embedder, QueryMemo) else QueryMemo(embedder)


def check_names(s: Settings) -> None:
    """Path and judge names in the settings must be registered (ConfigError names the bad one)."""
    try:
        check_path_names(s.search.paths, where="search.paths")
        check_weights(s.fusion.weights, where="fusion.weights")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if s.judge.name not in JUDGES:
        raise ConfigError(
            f"unknown judge {s.judge.name!r} (judge.name); valid: {', '.join(judge_names())}"
        )
