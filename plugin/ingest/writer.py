"""The write path: ingest, re-ingest, disable, enable and delete, serialised and compensating.

Every write holds the data dir's :class:`WriteLock` (a thread lock plus ``flock`` on
``<data_dir>/write.lock``, so threads and processes sharing the data dir take turns). Chunking,
tokenizing and embedding happen before the lock is taken; an ingest of several batches stages
(chunks, tokenizes, embeds) the next batch in a thread while the current one is written, one
batch ahead at most. Inside the lock:

ingest (per batch)
  1. *claim* (one transaction): each resource gets ``pending_version`` = one above anything it
     ever had (its version, an earlier pending one, its tombstone); a new resource row is created
     ``indexing`` (invisible); a ``journal`` row records ``claimed``, with the claim's owner (a
     process id that survives pid reuse, :mod:`hybridsag.records.owners`) and its chunk count in
     ``detail`` (JSON), so that anyone can tell an abandoned claim and the vector ids it may have
     written. Before claiming, the claims of the batch's ids (on a writer's first batch: every
     claim) whose owner is a dead process of this host are released
     (:meth:`Writer.release_abandoned`): a process SIGKILLed mid-ingest holds nothing once the
     next write runs.
  2. *vectors*: rows for the pending version go to the dense index (ids carry the version).
     A failure deletes the vectors written and releases the claim (compensation), then raises.
  3. *commit* (one transaction): for each resource whose claim still stands, old chunks and FTS
     rows are replaced by the new ones, the version moves to the pending one, status ``ready``,
     the journal row is removed. A claim that no longer stands (the resource was deleted or
     re-claimed meanwhile) has its vectors removed instead of resurrecting it.
  4. *cleanup*: the previous version's vectors are deleted; if that fails the reconciler finds
     them as stale versions.

delete
  1. one transaction: status ``deleting`` and a tombstone (invisible on every path from here on);
  2. the resource's vectors are deleted; 3. one transaction removes chunks, FTS rows and the row.

A crash between steps leaves a journal row (or a ``deleting``/``indexing`` status) that the
reconciler finishes or undoes. Every statement on the record's tables is the ledger's
(:mod:`hybridsag.records.ledger`); releasing a claim is one operation, :meth:`Ledger.release`, whether
the write path undoes its own batch, releases an abandoned claim, or the reconciler releases a
stuck one.

Cancellation: :meth:`Writer.ingest_many` takes a ``cancel`` event (the service sets it when it
shuts down), checked before each document is chunked, between chunk tokenizations, between
embedding slices and before each store step; when set, the batch in flight is undone by the same
compensation as a failure and :class:`~hybridsag.errors.WriteCancelledError` is raised (batches
committed before stay).

reconciler finishes or undoes.

A resource is ``(tenant, resource_id)``: every statement here names it by its key
(:func:`~hybridsag.records.store.resource_key`; the id itself in tenant ``""``), so two tenants' ``notes``
are two resources; reports name the public id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from hybridsag.ingest.chunker import chunk_text
from hybridsag.documents import (
    Chunk,
    Document,
    IngestReport,
    printable,
    revalidate,
    same_document,
)
from hybridsag.errors import DenseError, IngestError, StoreError, WriteCancelledError
from hybridsag.fusion.text.markdown import HEADING_JOIN
from hybridsag.fusion.facts import chunk_facts
from hybridsag.fusion.text import normalize_title
from hybridsag.records.ledger import Ledger, Staged, claim_abandoned, read_claim_detail
from hybridsag.ingest.progress import IngestProgress, as_progress
from hybridsag.records.keys import chunk_id_for, split_key
from hybridsag.records.store import Store

if TYPE_CHECKING:
    from hybridsag.vectors.contract import DenseIndex, VectorRow
    from hybridsag.vectors.embedder import Embedder
    from hybridsag.lexical.contract import LexicalIndex
    from hybridsag.settings import ChunkingSettings

__all__ = [
    "EMBED_SLICE",
    "StepHook",
    "WriteLock",
    "Writer",
]

log = logging.getLogger(__name__)

#: A bulk ingest that wrote this many vectors (chunks) seals them (DenseIndex.flush, and the
#: lexical index's flush) before returning.
FLUSH_AFTER_VECTORS = 256


#: Chunks embedded per call while ingesting: the progress moves on after each slice.
EMBED_SLICE = 256

#: Batches staged (chunked, tokenized, embedded) ahead of the one being written: one, so that
#: embedding the next batch overlaps writing this one and memory holds two batches at most.
STAGED_AHEAD = 1


class CancelSignal(Protocol):
    """What a cancellation point reads: ``threading.Event`` or :class:`_AnyEvent`."""

    def is_set(self) -> bool: ...


class _AnyEvent:
    """Set when any of its events is set (the caller's cancel, or the pipeline's halt)."""

    def __init__(self, *events: threading.Event | None) -> None:
        self._events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


@dataclasses.dataclass(frozen=True)
class _Staging:
    """A batch ready for the write lock: its report so far and its chunked (embedded) items."""

    report: IngestReport
    prepared: list[Staged]


def _batches(
    docs: Iterable[Document], batch_size: int, checked: IngestReport, ticks: IngestProgress
) -> Iterator[tuple[list[Document], int]]:
    """``docs`` checked again (:func:`revalidate`; a refused item goes to ``checked.errors``)
    and cut into batches of at most ``batch_size`` resources, in order, a batch ending early
    where its resource comes again. Each batch comes with how many batches before it must be
    written before it is staged: one past the last earlier batch that holds one of its
    resources (0: none), so that its unchanged check sees what that batch wrote."""
    batch: dict[str, Document] = {}
    last_seen: dict[str, int] = {}  # resource key -> the last batch (number) that held it
    number = 0

    def cut() -> tuple[list[Document], int]:
        nonlocal number
        after = max((last_seen.get(key, -1) + 1 for key in batch), default=0)
        for key in batch:
            last_seen[key] = number
        number += 1
        return list(batch.values()), after

    for position, item in enumerate(docs):
        try:
            doc = revalidate(item, position)
        except IngestError as exc:
            checked.errors[_where(item, position)] = str(exc)
            ticks.prepared(1, 0)
            continue
        if doc.key in batch:  # the same resource twice in a batch: cut, keep order
            yield cut()
            batch = {}
        batch[doc.key] = doc
        if len(batch) >= batch_size:
            yield cut()
            batch = {}
    if batch:
        yield cut()


def _where(item: object, position: int) -> str:
    """How a report names an item: its resource id when it has a usable one, else its
    position."""
    rid = getattr(item, "resource_id", None)
    if isinstance(rid, str) and rid.strip():
        return printable(rid)[:200]
    return f"#{position}"


class WriteLock:
    """Serialises writers of one data dir across threads and processes (``flock``)."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / "write.lock"
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._fd = fd
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None


#: Test hook: called with a step name at each step of the write path; a test may raise there
#: (or kill the process) to prove that a crash at that step is recoverable.
StepHook = Callable[[str, str], None]


class Writer:
    """Runs the write path over a store, its lexical index and (optionally) a dense index.

    The dense side is given as providers, called when first needed, so that only the steps
    that embed load a model: ``dense()`` opens the dense index for writing, ``stored_dense()``
    returns it only when vectors were ever recorded (deletes and cleanups; ``None`` means there
    is nothing to remove), ``embedder()`` builds the embedder. All three ``None``: no vectors.
    """

    def __init__(
        self,
        store: Store,
        lexical: LexicalIndex,
        chunking: ChunkingSettings,
        lock: WriteLock,
        *,
        dense: Callable[[], DenseIndex] | None = None,
        stored_dense: Callable[[], DenseIndex | None] | None = None,
        embedder: Callable[[], Embedder] | None = None,
        step_hook: StepHook | None = None,
    ) -> None:
        self.store = store
        self.lexical = lexical
        self.tokenizer = lexical.tokenizer
        self.chunking = chunking
        self.lock = lock
        self._dense = dense
        self._stored_dense = stored_dense if stored_dense is not None else dense
        self._embedder = embedder
        self._hook = step_hook
        #: the record's state machine (the reconciler's too)
        self.ledger = Ledger(store, lexical, step=self._step)
        self._released_abandoned = False  # every abandoned claim released once (first batch)

    @property
    def embeds(self) -> bool:
        """Whether this write path writes vectors (a dense index and an embedder are set)."""
        return self._dense is not None and self._embedder is not None

    def _vectors_to_remove(self) -> DenseIndex | None:
        """The dense index when it may hold vectors of ours, else None (never loads a model)."""
        return self._stored_dense() if self._stored_dense is not None else None

    def _step(self, step: str, resource_id: str) -> None:
        if self._hook is not None:
            self._hook(step, resource_id)

    # -- ingest ---------------------------------------------------------------------------------

    def prepare(
        self,
        doc: Document,
        *,
        mode: Literal["sag", "passage"] | None = None,
        cancel: CancelSignal | None = None,
    ) -> Staged:
        """Chunk and tokenize one document, and compute each chunk's facts
        (:func:`~hybridsag.fusion.facts.chunk_facts`: what fusion reads of its text, stored with
        it) (no lock, no I/O); WriteCancelledError when ``cancel`` is set before the last
        chunk is tokenized."""
        _check_cancel(cancel, "while chunking")
        chunks = chunk_text(
            doc.text,
            fmt=doc.fmt,
            mode=mode or self.chunking.mode,
            target_chars=self.chunking.target_chars,
            overlap_chars=self.chunking.overlap_chars,
            max_chars=self.chunking.max_chars,
            max_lines=self.chunking.max_lines,
            min_chars=self.chunking.min_chars,
        )
        lex = self.lexical
        tokens = []
        for c in chunks:
            _check_cancel(cancel, "while tokenizing")
            tokens.append(lex.chunk_tokens(doc.title, c.heading_path, c.text))
        return Staged(
            doc=doc,
            chunks=tuple(chunks),
            title_tokens=lex.title_tokens(doc.title),
            title_norm=normalize_title(doc.title),
            chunk_tokens=tuple(tokens),
            chunk_facts=tuple(chunk_facts(c.text) for c in chunks),
        )

    def ingest_many(
        self,
        docs: Iterable[Document],
        *,
        mode: Literal["sag", "passage"] | None = None,
        batch_size: int = 1000,
        skip_unchanged: bool = True,
        progress: IngestProgress | Callable[[int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> IngestReport:
        """Ingest documents in batches; returns counts. Each item is checked again as
        :func:`make_document` checks it, and chunked, on its own: one that fails is reported in
        ``errors`` (by resource id, or ``#<position>`` when the id itself is bad) and the others
        go on. Raises on a store or dense failure after compensating the batch in flight
        (earlier batches stay committed). ``progress``: an :class:`IngestProgress`, or a
        callable given the number of documents done.

        ``cancel``: once set, the ingest stops at its next cancellation point (see the module
        docstring): the batch in flight is undone and :class:`WriteCancelledError` is raised,
        its ``report`` holding what earlier batches committed.

        More than one batch: the next batch is staged (chunked, tokenized, embedded) in a
        thread while this one is written (:meth:`_pipeline`), so that embedding and writing
        overlap; ``progress`` is then told from that thread."""
        started = time.perf_counter()
        report = IngestReport()
        checked = IngestReport()  # the items refused before any batch (merged last)
        ticks = as_progress(progress)
        batches = _batches(docs, batch_size, checked, ticks)
        one_batch = isinstance(docs, Sequence) and len(docs) <= batch_size
        try:
            if one_batch:  # nothing to overlap: no thread
                for batch, _after in batches:
                    report.merge(self._write_batch(
                        self._stage_batch(batch, mode, skip_unchanged, ticks, cancel), cancel
                    ))
            else:
                self._pipeline(batches, mode, skip_unchanged, ticks, cancel, report)
        except WriteCancelledError as exc:
            report.merge(checked)
            report.seconds = time.perf_counter() - started
            raise WriteCancelledError(
                f"ingest cancelled {exc}: the batch in flight was undone, nothing of it is "
                f"indexed; {report.indexed} resource(s) committed before it stay indexed",
                report=report,
            ) from None
        report.merge(checked)
        if self._dense is not None and report.vectors >= FLUSH_AFTER_VECTORS:
            self._dense().flush()
        if report.chunks >= FLUSH_AFTER_VECTORS:
            self.lexical.flush()
        report.seconds = time.perf_counter() - started
        return report

    def _unchanged(self, docs: Sequence[Document]) -> set[str]:
        """Keys of ``docs`` whose stored resource already holds the same content, title,
        metadata, tenant, ACL and source. A source file whose stat changed with its content
        unchanged (a ``touch``, a copy) only has its size and mtime refreshed, so that the stale
        check, which reads nothing but ``stat``, sees it as current again; so has the hash of
        its bytes when it was not recorded (a resource indexed before it was)."""
        current = self.store.resources(d.key for d in docs)
        same = set()
        refresh = []
        for d in docs:
            rec = current.get(d.key)
            if (
                rec is not None
                and rec.status in ("ready", "disabled")
                and rec.pending_version is None
                and same_document(rec, d)
            ):
                same.add(d.key)
                source = (d.source_mtime_ns, d.source_size, d.source_sha256)
                if (rec.source_mtime_ns, rec.source_size, rec.source_sha256) != source:
                    refresh.append((*source, d.key, rec.version))
        if refresh:
            with self.lock.hold():
                self.ledger.refresh_stat(refresh)
        return same

    def _prepare_each(
        self,
        docs: Sequence[Document],
        mode: Literal["sag", "passage"] | None,
        report: IngestReport,
        ticks: IngestProgress,
        cancel: CancelSignal | None,
    ) -> list[Staged]:
        """Chunk and tokenize each document; one that fails is reported and left out."""
        prepared = []
        for d in docs:
            try:
                p = self.prepare(d, mode=mode, cancel=cancel)
            except WriteCancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - pure CPU work on one document's text
                log.warning("%s could not be chunked", printable(d.resource_id), exc_info=True)
                report.errors[printable(d.resource_id)] = (
                    f"could not be chunked: {type(exc).__name__}: {exc}"
                )
                ticks.prepared(1, 0)
                continue
            prepared.append(p)
            ticks.prepared(1, len(p.chunks))
        return prepared

    def _embed(
        self, prepared: list[Staged], ticks: IngestProgress, cancel: CancelSignal | None
    ) -> list[Staged]:
        """``prepared`` with the vectors of their chunks, embedded in slices of
        :data:`EMBED_SLICE` so that the progress shows the embedding as it goes. The batch's
        texts are taken longest first, as ``SentenceTransformer.encode`` orders its input, so
        that each slice (and each run the embedder pads) holds texts of similar length."""
        import numpy as np

        texts = [_embed_text(p.doc.title, c) for p in prepared for c in p.chunks]
        if not texts:
            return prepared
        embedder = self._embedder() if self._embedder is not None else None
        assert embedder is not None
        ticks.embedding(len(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors: np.ndarray | None = None
        for start in range(0, len(order), EMBED_SLICE):
            _check_cancel(cancel, "while embedding")
            rows = order[start : start + EMBED_SLICE]
            part = embedder.encode([texts[i] for i in rows], kind="passage")
            if vectors is None:
                vectors = np.empty((len(texts), part.shape[1]), dtype=np.float32)
            vectors[rows] = part
            ticks.embedded(len(rows))
        assert vectors is not None
        at = 0
        out = []
        for p in prepared:
            n = len(p.chunks)
            out.append(dataclasses.replace(p, vectors=vectors[at : at + n]) if n else p)
            at += n
        return out

    def _pipeline(
        self,
        batches: Iterator[tuple[list[Document], int]],
        mode: Literal["sag", "passage"] | None,
        skip_unchanged: bool,
        ticks: IngestProgress,
        cancel: threading.Event | None,
        report: IngestReport,
    ) -> None:
        """Stage (chunk, tokenize, embed) the next batch in a thread while this one writes the
        batch before it: at most one staged batch waits (:data:`STAGED_AHEAD`), so memory holds
        two batches, not the corpus. A batch that shares a resource with an earlier one is
        checked for being unchanged only once that one is committed (``after``). Whatever
        fails on either side stops both; the stager has ended before this returns or raises."""
        handoff: queue.Queue[tuple[_Staging | None, BaseException | None]] = queue.Queue(
            maxsize=STAGED_AHEAD
        )
        halt = threading.Event()  # the writer side failed: the stager stops at its next check
        stop = _AnyEvent(cancel, halt)
        written = threading.Condition()
        done = [0]  # batches written so far

        def stage() -> None:
            try:
                for batch, after in batches:
                    with written:
                        written.wait_for(lambda: done[0] >= after or halt.is_set())
                    staged = self._stage_batch(batch, mode, skip_unchanged, ticks, stop)
                    while not halt.is_set():
                        try:
                            handoff.put((staged, None), timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if halt.is_set():
                        return
                handoff.put((None, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the writer, raised there
                handoff.put((None, exc))

        stager = threading.Thread(target=stage, name="hybridsag-ingest-stage", daemon=True)
        stager.start()
        try:
            while True:
                staged, error = handoff.get()
                if error is not None:
                    raise error
                if staged is None:
                    return
                report.merge(self._write_batch(staged, cancel))
                with written:
                    done[0] += 1
                    written.notify_all()
        finally:
            halt.set()
            with written:
                written.notify_all()
            while stager.is_alive():  # let a stager blocked on a full hand-off see the halt
                with contextlib.suppress(queue.Empty):
                    handoff.get(timeout=0.1)
            stager.join()

    def _stage_batch(
        self,
        docs: list[Document],
        mode: Literal["sag", "passage"] | None,
        skip_unchanged: bool,
        ticks: IngestProgress,
        cancel: CancelSignal | None = None,
    ) -> _Staging:
        """A batch made ready to write, outside the write lock: the unchanged left out, the
        rest chunked, tokenized and (with a dense index) embedded."""
        report = IngestReport()
        _check_cancel(cancel, "before a batch")
        if skip_unchanged:
            same = self._unchanged(docs)
            report.unchanged = len(same)
            docs = [d for d in docs if d.key not in same]
            if same:
                ticks.prepared(len(same), 0)
        if not docs:
            return _Staging(report, [])
        prepared = self._prepare_each(docs, mode, report, ticks, cancel)
        if prepared and self._dense is not None and self._embedder is not None:
            prepared = self._embed(prepared, ticks, cancel)
        return _Staging(report, prepared)

    def _write_batch(self, staging: _Staging, cancel: threading.Event | None) -> IngestReport:
        """Claim, write the vectors and commit a staged batch under the write lock (the module
        docstring's steps 1 to 4); compensates and raises on a failure."""
        report, prepared = staging.report, staging.prepared
        if not prepared:
            return report
        dense = self._dense() if self.embeds and self._dense is not None else None
        with self.lock.hold():
            _check_cancel(cancel, "while waiting for the write lock")
            self.release_abandoned(
                None if not self._released_abandoned else [p.doc.key for p in prepared]
            )
            claims = self._claim(prepared)
            written: list[str] = []  # what may be in the dense index: compensated on failure
            try:
                _check_cancel(cancel, "after claiming")
                if dense is not None:
                    rows = self._vector_rows(prepared, claims)
                    written = [r.chunk_id for r in rows]
                    for p in prepared:
                        self._step("vectors", p.doc.key)
                    if rows:  # a failed upsert wrote an unknown part: all ids are compensated
                        dense.upsert(rows)
                    report.vectors = len(written)
                _check_cancel(cancel, "before the commit")
                committed, lost, old_ids = self._commit(prepared, claims)
            except BaseException as exc:
                self._compensate(dense, written, claims, exc)
                raise
            if lost and dense is not None:
                lost_ids = [
                    chunk_id_for(p.doc.key, claims[p.doc.key], c.ordinal)
                    for p in prepared
                    if p.doc.key in lost
                    for c in p.chunks
                ]
                self._cleanup_vectors(dense, lost_ids, report, "vectors of a lost claim")
            if old_ids and dense is not None:
                self._cleanup_vectors(dense, old_ids, report, "the previous version's vectors")
        for key in lost:
            report.errors[printable(split_key(key)[1])] = (
                "not indexed: the resource was deleted (or re-ingested) while this ingest ran; "
                "what it wrote was removed"
            )
        report.indexed = len(committed)
        report.chunks = sum(len(p.chunks) for p in prepared if p.doc.key in committed)
        return report

    def _claim(self, prepared: Sequence[Staged]) -> dict[str, int]:
        return self.ledger.claim(prepared)

    def _vector_rows(
        self, prepared: Sequence[Staged], claims: Mapping[str, int]
    ) -> list[VectorRow]:
        """The vector rows of a batch, keyed by the claimed versions."""
        from hybridsag.vectors.contract import VectorRow

        rows = []
        for p in prepared:
            version = claims[p.doc.key]
            for c, vec in zip(p.chunks, p.vectors if p.vectors is not None else []):
                rows.append(
                    VectorRow(
                        chunk_id=chunk_id_for(p.doc.key, version, c.ordinal),
                        resource_id=p.doc.resource_id,
                        version=version,
                        tenant=p.doc.tenant,
                        acl=p.doc.acl,
                        vector=[float(x) for x in vec],
                    )
                )
        return rows

    def _commit(
        self, prepared: Sequence[Staged], claims: Mapping[str, int]
    ) -> tuple[set[str], set[str], list[str]]:
        return self.ledger.commit(prepared, claims)

    def _compensate(
        self,
        dense: DenseIndex | None,
        written: Sequence[str],
        claims: Mapping[str, int],
        cause: BaseException,
    ) -> None:
        """Undo a batch whose commit did not happen: its vectors go, its claims are released.
        A step that fails here is logged and noted on ``cause`` (the error the caller raises);
        the journal rows still name the claims, so the reconciler finishes the undo."""
        if written and dense is not None:
            try:
                dense.delete_ids(list(written))
            except DenseError as exc:
                _note(cause, f"compensation left {len(written)} vector(s) to the reconciler: {exc}")
                return  # the claims stay: the reconciler deletes the vectors, then releases them
        try:
            self.ledger.release_claims(claims)
        except StoreError as exc:
            _note(cause, f"compensation left {len(claims)} claim(s) to the reconciler: {exc}")

    def release_abandoned(self, resource_ids: Sequence[str] | None = None) -> list[str]:
        """Release the ingest claims (of ``resource_ids``, or every one) whose owner is a dead
        process of this host (:func:`~hybridsag.records.ledger.claim_abandoned`): the vectors
        each may have written (its journal row records how many chunks) are deleted, then it is
        released (:meth:`Ledger.release`). A claim of a live process, of another host, or one recorded
        without an owner and chunk count is left to the reconciler, and so is one whose vectors
        could not be deleted (logged). The caller holds the write lock; the write path calls
        this before every claim. Returns the ids whose claims were released, in order."""
        with self.lock.hold():
            rows = self.ledger.ingest_claims(resource_ids)
            if resource_ids is None:
                self._released_abandoned = True
            abandoned: list[tuple[str, int, int]] = []
            for r in rows:
                _owner, chunks = read_claim_detail(r["detail"])
                if chunks is not None and claim_abandoned(int(r["pid"]), r["detail"]):
                    abandoned.append((r["resource_id"], int(r["version"]), chunks))
            if not abandoned:
                return []
            current = self.ledger.resource_states(
                self.store.connection(), [rid for rid, _v, _n in abandoned]
            )
            abandoned = [
                a for a in abandoned if a[0] in current and current[a[0]]["status"] != "deleting"
            ]  # a delete finishes (purge) what it found; a row of no resource is the reconciler's
            if not abandoned:
                return []
            vectors = [
                chunk_id_for(rid, version, k)
                for rid, version, chunks in abandoned
                if version != current[rid]["version"]  # never the committed version's ids
                for k in range(chunks)
            ]
            dense = self._vectors_to_remove() if vectors else None
            if dense is not None:
                try:
                    dense.delete_ids(vectors)
                except DenseError as exc:
                    log.warning(
                        "abandoned claims of %s left to the reconciler: deleting their "
                        "vectors failed: %s",
                        ", ".join(sorted({printable(a[0]) for a in abandoned})),
                        exc,
                    )
                    return []
            with self.store.atomic() as wconn:
                for rid, version, _chunks in abandoned:
                    self.ledger.release(wconn, rid, version)
            released = list(dict.fromkeys(rid for rid, _v, _n in abandoned))
            log.info(
                "released %d abandoned claim(s) of dead processes: %s",
                len(abandoned),
                ", ".join(printable(r) for r in released[:10]),
            )
            return released

    @staticmethod
    def _cleanup_vectors(
        dense: DenseIndex, ids: Sequence[str], report: IngestReport, what: str
    ) -> None:
        """Delete vectors that are no longer current; a failure is logged and reported as a
        warning (the reconciler finds them as stale versions or orphans)."""
        try:
            dense.delete_ids(list(ids))
        except DenseError as exc:
            message = f"could not delete {len(ids)} of {what} (left to the reconciler): {exc}"
            log.warning("%s", message)
            report.warnings.append(message)

    def backfill_vectors(
        self,
        *,
        resource_ids: Sequence[str] | None = None,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed and write the vectors of current chunks (all, or of the resources whose keys
        are ``resource_ids``); used
        when the dense path is switched on for an existing index and by the reconciler for
        ready resources whose vectors are missing. Returns the number of vectors written. A
        chunk whose resource moved to another version meanwhile is skipped (its vector is
        deleted again), so a backfill never resurrects old text."""
        from hybridsag.vectors.contract import VectorRow

        if self._dense is None or self._embedder is None:
            raise DenseError("backfill_vectors needs a dense index and an embedder")
        embedder = self._embedder()
        dense: DenseIndex | None = None
        written = 0
        after = 0
        while True:  # a page of chunks at a time: memory holds a batch, not the index
            part = self.ledger.current_chunks(resource_ids, after=after, limit=batch_size)
            if not part:
                break
            after = part[-1]["id"]
            if dense is None:
                dense = self._dense()
            texts = [
                _embed_text(r["title"], Chunk(0, r["text"], r["heading_path"], 0, 0, 0, 0))
                for r in part
            ]
            vectors = embedder.encode(texts, kind="passage")
            batch = [
                VectorRow(
                    chunk_id=r["chunk_id"],
                    resource_id=split_key(r["resource_id"])[1],
                    version=r["version"],
                    tenant=r["tenant"],
                    acl=tuple(json.loads(r["acl"])),
                    vector=[float(x) for x in vec],
                )
                for r, vec in zip(part, vectors)
            ]
            with self.lock.hold():  # embedding above ran outside the lock
                dense.upsert(batch)
                current = self.store.chunks(v.chunk_id for v in batch)
                gone = [v.chunk_id for v in batch if v.chunk_id not in current]
                if gone:
                    dense.delete_ids(gone)
                self.ledger.store_vectors(
                    (r["chunk_id"], vec)
                    for r, vec in zip(part, vectors)
                    if r["chunk_id"] in current
                )
            written += len(batch) - len(gone)
            if progress:
                progress(len(part))
        if written and dense is not None:
            dense.flush()
        return written

    # -- delete, disable, enable --------------------------------------------------------------

    def delete(self, resource_id: str, *, exclude: bool = False) -> bool:
        """Delete the resource whose key is ``resource_id`` everywhere; False when it did not
        exist. Invisible from step 1.

        ``exclude`` (a delete asked for by hand, :meth:`HybridSearch.delete`): a folder
        resource whose file still exists, or whose root is not a folder on this host (a
        client's synced folder: the file cannot be looked at here), is also excluded from its
        folder (:meth:`~hybridsag.records.store.Store.add_exclusion`, in the tombstone's transaction),
        so that the next index of the folder does not bring it back. Pruning and the
        reconciler delete resources whose files are gone, without it."""
        with self.lock.hold():
            now = time.time()
            with self.store.atomic() as conn:
                self._step("tombstone", resource_id)
                row = self.ledger.delete_target(conn, resource_id)
                if row is None:
                    return False
                if exclude and _stays_deleted(row["source_uri"], row["source_root"]):
                    self.store.add_exclusion(
                        conn,
                        tenant=row["tenant"],
                        source_root=row["source_root"],
                        path=split_key(resource_id)[1],
                        acl_json=row["acl"],
                        now=now,
                    )
                self.ledger.tombstone(conn, resource_id, max(row[0], row[1] or 0), now)
            self._step("vectors_delete", resource_id)
            dense = self._vectors_to_remove()
            if dense is not None:
                dense.delete_resource(resource_id)
            self.purge(resource_id)
        return True

    def purge(self, resource_id: str) -> None:
        """Remove chunks, FTS rows and the row of a tombstoned resource (delete's last step;
        ``resource_id`` is its key): :meth:`Ledger.purge`."""
        self.ledger.purge(resource_id)

    def set_enabled(self, resource_id: str, enabled: bool) -> bool:
        """Disable (invisible, kept) or enable the resource whose key is ``resource_id``; False
        when it does not exist."""
        status = "ready" if enabled else "disabled"
        with self.lock.hold():
            was = self.ledger.set_status(resource_id, status, only_from=("ready", "disabled"))
        if was is None:
            return False
        if was not in ("ready", "disabled"):
            raise IngestError(
                f"resource {split_key(resource_id)[1]!r} is {was!r}; only ready or "
                "disabled ones can be enabled or disabled"
            )
        return True


def _stays_deleted(source_uri: str | None, source_root: str | None) -> bool:
    """Whether a folder resource deleted by hand must be excluded from its folder: its file
    still exists, or its root is no folder here (its file cannot be looked at)."""
    if source_root is None:
        return False  # from the API or JSONL: no folder brings it back
    try:
        return (source_uri is not None and os.path.lexists(source_uri)) or not os.path.isdir(
            source_root
        )
    except ValueError:  # a NUL in a path
        return True


def _check_cancel(cancel: CancelSignal | None, where: str) -> None:
    """WriteCancelledError saying ``where`` when ``cancel`` is set (a cancellation point)."""
    if cancel is not None and cancel.is_set():
        raise WriteCancelledError(where)


def _embed_text(title: str, chunk: Chunk) -> str:
    """The text a chunk's vector is computed from: title, heading path and body."""
    head = HEADING_JOIN.join(x for x in (title, chunk.heading_path) if x)
    return f"{head}\n{chunk.text}" if head else chunk.text





def _note(cause: BaseException, message: str) -> None:
    """Log ``message`` and attach it to the exception being raised (``add_note``)."""
    log.warning("%s", message)
    add_note = getattr(cause, "add_note", None)
    if callable(add_note):
        add_note(message)
