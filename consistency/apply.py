"""Apply a :class:`~hybridsag.consistency.plan.ReconcilePlan` in bounded batches.

Before anything is changed, :func:`check_apply_allowed` refuses (``ConsistencyError``):

- in attach mode (a team's own collection) unless ``milvus.allow_writes`` is true;
- when the store holds nothing at all (no resource, tombstone, chunk or journal row) but the plan
  would delete vectors: an empty or wrong data dir must never wipe a collection, ``force`` or not;
- without ``force``, when the plan would delete more than ``consistency.max_delete_share`` of the
  collection's vectors (or of the chunk rows), or more than ``consistency.max_delete_count``;
- without ``force``, when the source drift would delete every resource of a folder root whose
  files are gone, or more than one and more than ``consistency.max_delete_share`` of them (an
  unmounted disk looks like a folder whose files all vanished), or more than
  ``consistency.max_delete_count`` in all (:func:`hybridsag.consistency.source_drift.source_guard`).

Source drift is repaired through the write path: a resource whose file is gone is deleted
(``Writer.delete``: tombstone, vectors, rows) after checking again that the file is still gone;
a changed, touched or new file is read again and ingested (``Writer.ingest_many``, which
re-indexes what changed and only refreshes the stat of a touched file); a new file is checked
again against the exclusions and the ids other files hold.

Then each class is applied in batches of ``consistency.batch_size`` items. Every batch holds the
writer's :class:`~hybridsag.ingest.writer.WriteLock` (so it never races an ingest or a delete: the write
path holds the same lock from claim to commit; re-embedding missing vectors is the exception: it
embeds outside the lock and takes it only to write and re-check) and re-checks each item against the
store as it is now, because the plan may be older than the lock: a vector that became live, a claim
that was committed, a resource that was re-created are skipped, never deleted. A retriable
:class:`~hybridsag.errors.DenseError` / :class:`~hybridsag.errors.StoreError` is retried up to
``consistency.max_retries`` times with doubling back-off from ``consistency.backoff_s``; a batch
that still fails is recorded in the report and the next batch runs. Every step is idempotent, so
running the same plan twice, or a fresh plan after it, changes nothing more.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hybridsag.consistency.lease import Lease
from hybridsag.consistency.source_drift import SourceItem, source_documents, source_guard
from hybridsag.consistency.plan import (
    ChunkRow,
    FtsRow,
    MissingVectors,
    ReconcilePlan,
    StuckClaim,
    TombstonedLeftover,
    VectorEntry,
)
from hybridsag.vectors.contract import DenseIndex
from hybridsag.errors import ConsistencyError, DenseError, HybridSagError, StoreError
from hybridsag.ingest.folders import taken_by, without_excluded
from hybridsag.settings import Settings
from hybridsag.ingest.sources import SourceErrors
from hybridsag.records.store import Store
from hybridsag.ingest.writer import Writer

__all__ = ["BatchResult", "ReconcileReport", "apply_plan", "check_apply_allowed"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One batch: its class, size, items done and skipped (re-check said no), attempts made,
    seconds taken and the error that ended it (None when it succeeded)."""

    kind: str
    size: int
    done: int
    skipped: int
    attempts: int
    seconds: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "size": self.size,
            "done": self.done,
            "skipped": self.skipped,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 4),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """What :func:`apply_plan` did. ``totals`` counts effects (``deleted_vectors``,
    ``purged_resources``, ``released_claims``, ``dropped_rows``, ``deleted_journal_rows``,
    ``deleted_chunks``, ``deleted_fts_rows``, ``repaired_fts_rows``, ``backfilled_vectors``,
    ``deleted_sources``, ``reindexed_sources``, ``indexed_sources``, ``refreshed_sources``);
    ``errors`` lists the batches that failed after their retries."""

    batches: tuple[BatchResult, ...]
    totals: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 4),
            "totals": dict(self.totals),
            "errors": list(self.errors),
            "batches": [b.as_dict() for b in self.batches],
        }


def check_apply_allowed(plan: ReconcilePlan, settings: Settings, *, force: bool = False) -> None:
    """Raise :class:`ConsistencyError` when ``plan`` must not be applied (see module docstring).

    Example: a plan deleting 300 of 1,000 vectors with the default share 0.2 raises unless
    ``force``; a plan deleting any vector from an empty store always raises.
    """
    m, c = settings.milvus, settings.consistency
    if m.attach and not m.allow_writes:
        raise ConsistencyError(
            f"reconcile refused: milvus.attach=true (collection {m.collection!r} belongs to the "
            "team) and milvus.allow_writes=false; a dry run still reports the plan. Set "
            "milvus.allow_writes=true to let hybridsag delete there"
        )
    n, total = plan.vectors_to_delete, plan.collection_size
    if n and plan.store_empty:
        raise ConsistencyError(
            f"reconcile refused: the store at {settings.store_display} holds no resource, tombstone "
            f"or chunk at all, but collection {plan.collection!r} holds {total} vectors; this "
            "data dir is empty or not the one that wrote the collection, and reconcile never "
            "wipes a collection (not even with --force). Drop the collection by hand if that is "
            "what you want"
        )
    if force:
        return
    refused = source_guard(plan.sources, c.max_delete_share, c.max_delete_count)
    if refused is not None:
        raise ConsistencyError(
            f"reconcile refused by the mass-delete guard: {refused}, then rerun with --force "
            "(apply_plan(force=True)) to delete them"
        )
    rows = len(plan.orphan_chunks) + sum(len(x.chunk_rowids) for x in plan.tombstoned_leftovers)
    for what, count, of in (("vectors", n, total), ("chunk rows", rows, plan.chunks)):
        if not count:
            continue
        if count > c.max_delete_share * of or count > c.max_delete_count:
            raise ConsistencyError(
                f"reconcile refused by the mass-delete guard: the plan would delete {count} of "
                f"{of} {what} ({count / of:.1%}) in {plan.collection or settings.store_display}; "
                f"limits: consistency.max_delete_share={c.max_delete_share} "
                f"({c.max_delete_share * of:.0f} {what}) and consistency.max_delete_count="
                f"{c.max_delete_count}. Check that data dir {settings.data_dir} belongs to this "
                "collection, then rerun with --force (apply_plan(force=True))"
            )


def apply_plan(
    plan: ReconcilePlan,
    store: Store,
    dense: DenseIndex | None,
    writer: Writer,
    settings: Settings,
    *,
    force: bool = False,
    lease: Lease | None = None,
) -> ReconcileReport:
    """Run ``plan`` in bounded, retried, re-checked batches and report what was done.

    ``store`` is the :class:`~hybridsag.records.store.Store` the plan was built from, ``dense`` its dense
    index (None when the dense path is off), ``writer`` the write path over them (its lock is
    held per batch; its ``purge`` and ``backfill_vectors`` finish deletes and re-embed missing
    vectors). ``lease``, when given, is renewed before every batch.

    Raises:
        ConsistencyError: refused (attach mode, empty store, mass-delete guard), or the lease
            was lost mid-run. Batch failures do not raise: they are in ``report.errors``.
    """
    check_apply_allowed(plan, settings, force=force)
    run = _Run(store, dense, writer, settings, lease)
    run.each("tombstoned_leftovers", plan.tombstoned_leftovers, run.leftovers)
    run.each("stuck_indexing", plan.stuck_indexing, run.stuck)
    run.each("stale_versions", plan.stale_versions, run.vectors)
    run.each("orphan_vectors", plan.orphan_vectors, run.vectors)
    run.each("orphan_chunks", plan.orphan_chunks, run.chunks)
    run.each("orphan_fts_rows", plan.orphan_fts_rows, run.orphan_fts)
    run.each("missing_fts_rows", plan.missing_fts_rows, run.missing_fts)
    run.each(
        "missing_vectors",
        plan.missing_vectors,
        run.missing_vectors,
        weight=lambda m: len(m.chunk_ids),
        locked=False,  # re-embedding runs outside the lock; the backfill locks its writes
    )
    run.each("source_deleted", plan.sources.deleted, run.source_deleted)
    # ingest embeds outside the lock and takes it for its writes, as the write path always does
    run.each("source_changed", plan.sources.changed, run.source_ingest, locked=False)
    run.each("source_touched", plan.sources.touched, run.source_ingest, locked=False)
    run.each("source_new", plan.sources.new, run.source_new, locked=False)
    return ReconcileReport(
        batches=tuple(run.batches),
        totals=dict(run.totals),
        errors=tuple(run.errors),
        seconds=time.perf_counter() - run.started,
    )


def _chunked(
    items: Sequence[T], size: int, weight: Callable[[T], int] | None = None
) -> Iterator[list[T]]:
    batch: list[T] = []
    load = 0
    for item in items:
        batch.append(item)
        load += weight(item) if weight else 1
        if load >= size:
            yield batch
            batch, load = [], 0
    if batch:
        yield batch


class _Run:
    """The state of one apply: counters, batch results, and the per-class steps."""

    def __init__(
        self,
        store: Store,
        dense: DenseIndex | None,
        writer: Writer,
        settings: Settings,
        lease: Lease | None,
    ) -> None:
        self.store = store
        self.dense = dense
        self.writer = writer
        self.lexical = writer.lexical
        self.ledger = writer.ledger
        self.settings = settings
        self.cfg = settings.consistency
        self.lease = lease
        self.started = time.perf_counter()
        self.batches: list[BatchResult] = []
        self.errors: list[str] = []
        self.totals: dict[str, int] = {}

    def add(self, key: str, n: int) -> None:
        if n:
            self.totals[key] = self.totals.get(key, 0) + n

    # -- the batch loop ------------------------------------------------------------------------

    def each(
        self,
        kind: str,
        items: Sequence[T],
        step: Callable[[list[T], dict[str, int]], tuple[int, int]],
        *,
        weight: Callable[[T], int] | None = None,
        locked: bool = True,
    ) -> None:
        """Run ``step`` over ``items`` in batches, each under the write lock unless ``locked``
        is false (a step that embeds takes the lock itself, only around its writes)."""
        for batch in _chunked(items, self.cfg.batch_size, weight):
            if self.lease is not None:
                self.lease.renew()
            t0 = time.perf_counter()
            attempts, error, done, skipped = 0, None, 0, 0
            while True:
                attempts += 1
                effects: dict[str, int] = {}
                retriable = False
                try:
                    with self.writer.lock.hold() if locked else contextlib.nullcontext():
                        done, skipped = step(batch, effects)
                except ConsistencyError:
                    raise
                except (DenseError, StoreError) as exc:
                    retriable, error = exc.retriable, f"{type(exc).__name__}: {exc}"
                except self.store.errors as exc:
                    retriable = self.store.backend.is_retriable(exc)
                    error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
                except HybridSagError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                else:
                    error = None
                    for key, n in effects.items():
                        self.add(key, n)
                    break
                if not retriable or attempts > self.cfg.max_retries:
                    done, skipped = 0, 0
                    break
                time.sleep(self.cfg.backoff_s * (2 ** (attempts - 1)))
            self.batches.append(
                BatchResult(
                    kind, len(batch), done, skipped, attempts, time.perf_counter() - t0, error
                )
            )
            if error is not None:
                self.errors.append(
                    f"{kind}: batch of {len(batch)} failed after {attempts} attempt(s): {error}"
                )

    # -- re-checks against the store as it is now (under the write lock) ----------------------

    def deletable(
        self, entries: Sequence[VectorEntry], *, undoing: tuple[str, int] | None = None
    ) -> list[str]:
        """The chunk ids of ``entries`` that are neither live now nor owned by a standing claim
        (``undoing`` names the one claim being undone, whose vectors may go)."""
        conn = self.store.connection()
        res = self.ledger.resource_states(conn, (e.resource_id for e in entries))
        chunks = self.ledger.chunk_states(conn, (e.chunk_id for e in entries))
        out = []
        for e in entries:
            r = res.get(e.resource_id)
            if r is not None and r["status"] != "deleting":
                c = chunks.get(e.chunk_id)
                if (
                    c is not None
                    and c["resource_id"] == e.resource_id
                    and c["version"] == e.version == r["version"]
                ):
                    continue  # live
                if r["pending_version"] == e.version and undoing != (e.resource_id, e.version):
                    continue  # a standing claim's vector
            out.append(e.chunk_id)
        return out

    def _delete_ids(self, ids: list[str], effects: dict[str, int]) -> None:
        if ids:
            if self.dense is None:
                raise DenseError("the plan deletes vectors but the dense path is off")
            self.dense.delete_ids(ids)
            effects["deleted_vectors"] = effects.get("deleted_vectors", 0) + len(ids)

    @staticmethod
    def _bump(effects: dict[str, int], key: str, n: int = 1) -> None:
        if n:
            effects[key] = effects.get(key, 0) + n

    # -- the steps: each returns (done, skipped) --------------------------------------------

    def leftovers(
        self, batch: list[TombstonedLeftover], effects: dict[str, int]
    ) -> tuple[int, int]:
        done = skipped = 0
        conn = self.store.connection()
        current = self.ledger.resource_states(conn, [item.resource_id for item in batch])
        finishing: list[TombstonedLeftover] = []
        for item in batch:
            r = current.get(item.resource_id)
            if item.finish_delete:
                if r is not None and r["status"] != "deleting":
                    skipped += 1  # re-created since the plan: its data is live
                    continue
                finishing.append(item)
                continue
            self._delete_ids(self.deletable(item.vectors), effects)
            with self.store.atomic() as c:
                n = 0
                for rowid in item.chunk_rowids:
                    n += self.ledger.drop_orphan_chunk(c, rowid, None)
            self._bump(effects, "deleted_chunks", n)
            done += 1
        if finishing:  # one filtered delete for the batch, then each resource's rows
            if self.dense is not None:
                self.dense.delete_resources([item.resource_id for item in finishing])
                self._bump(effects, "deleted_vectors", sum(len(i.vectors) for i in finishing))
            for item in finishing:
                self.ledger.purge(item.resource_id)
                self._bump(effects, "purged_resources")
                done += 1
        return done, skipped

    def stuck(self, batch: list[StuckClaim], effects: dict[str, int]) -> tuple[int, int]:
        done = skipped = 0
        conn = self.store.connection()
        for claim in batch:
            rid, p = claim.resource_id, claim.pending_version
            r = self.ledger.resource_states(conn, [rid]).get(rid)
            if p is not None:
                if r is None or r["status"] == "deleting" or r["pending_version"] != p:
                    skipped += 1  # committed, released or deleted since the plan
                    continue
                self._delete_ids(self.deletable(claim.vectors, undoing=(rid, p)), effects)
            released, dropped, deleted = self.ledger.release_stuck(
                rid, p, claim.journal_ids, drop_uncommitted=claim.never_committed or p is not None
            )
            self._bump(effects, "released_claims", released)
            self._bump(effects, "dropped_rows", dropped)
            self._bump(effects, "deleted_journal_rows", deleted)
            done += 1
        return done, skipped

    def vectors(self, batch: list[VectorEntry], effects: dict[str, int]) -> tuple[int, int]:
        ids = self.deletable(batch)
        self._delete_ids(ids, effects)
        return len(ids), len(batch) - len(ids)

    def chunks(self, batch: list[ChunkRow], effects: dict[str, int]) -> tuple[int, int]:
        done = 0
        with self.store.atomic() as c:
            for item in batch:
                done += self.ledger.drop_orphan_chunk(c, item.rowid, item.chunk_id)
        self._bump(effects, "deleted_chunks", done)
        return done, len(batch) - done

    def orphan_fts(self, batch: list[FtsRow], effects: dict[str, int]) -> tuple[int, int]:
        done = 0
        with self.store.atomic() as c:
            for item in batch:
                if item.table == "chunks_fts":
                    done += self.lexical.remove_orphan_chunk(c, item.rowid)
                else:
                    done += self.lexical.remove_orphan_title(c, item.rowid)
        self._bump(effects, "deleted_fts_rows", done)
        return done, len(batch) - done

    def missing_fts(self, batch: list[FtsRow], effects: dict[str, int]) -> tuple[int, int]:
        lex = self.lexical
        done = 0
        with self.store.atomic() as c:
            for item in batch:
                if item.table == "chunks_fts":
                    row = self.ledger.live_chunk_text(c, item.rowid)
                    if row is None or lex.has_chunk(c, item.rowid):
                        continue
                    tokens = lex.chunk_tokens(row["title"], row["heading_path"], row["text"])
                    lex.add_chunks(c, [(item.rowid, tokens)])
                else:
                    title = self.ledger.committed_title(c, item.rowid)
                    if title is None or lex.has_title(c, item.rowid):
                        continue
                    lex.add_titles(c, [(item.rowid, lex.title_tokens(title))])
                done += 1
        self._bump(effects, "repaired_fts_rows", done)
        return done, len(batch) - done

    def source_deleted(self, batch: list[SourceItem], effects: dict[str, int]) -> tuple[int, int]:
        done = 0
        current = self.store.resources(item.key for item in batch)
        for item in batch:
            r = current.get(item.key)
            if r is None or r.source_uri != item.source_uri or os.path.lexists(item.source_uri):
                continue  # deleted, re-indexed from elsewhere, or its file is back
            done += self.writer.delete(item.key)
        self._bump(effects, "deleted_sources", done)
        return done, len(batch) - done

    def _ingest_files(self, items: list[SourceItem], effects: dict[str, int], fresh: str) -> int:
        """Read the files of ``items`` again and ingest them; counts ``fresh`` (re-indexed)
        and ``refreshed_sources`` (stat only); a file that cannot be read now is an error of
        the run. Returns the files done."""
        errors = SourceErrors()
        report = self.writer.ingest_many(source_documents(items, self.settings, errors))
        self._bump(effects, fresh, report.indexed)
        self._bump(effects, "refreshed_sources", report.unchanged)
        for where, why in {**errors.errors, **report.errors}.items():
            self.errors.append(f"source {where}: {why}")
        return report.indexed + report.unchanged

    def source_ingest(self, batch: list[SourceItem], effects: dict[str, int]) -> tuple[int, int]:
        """Changed (or touched) files: their resources ingested again from the file as it is
        now (a touched file only has its stat refreshed)."""
        current = self.store.resources(item.key for item in batch)
        items = [
            i
            for i in batch
            if (r := current.get(i.key)) is not None and r.source_uri == i.source_uri
        ]
        done = self._ingest_files(items, effects, "reindexed_sources")
        return done, len(batch) - done

    def source_new(self, batch: list[SourceItem], effects: dict[str, int]) -> tuple[int, int]:
        """New files: indexed unless excluded or their id was taken since the plan."""
        by_tenant: dict[str, list[SourceItem]] = {}
        for item in batch:
            by_tenant.setdefault(item.tenant, []).append(item)
        items: list[SourceItem] = []
        for tenant, group in by_tenant.items():
            kept = set(
                without_excluded(
                    self.store, [(i.source_root, i.path) for i in group], tenant=tenant
                )[0]
            )
            items.extend(i for i in group if (i.source_root, i.path) in kept)
        current = self.store.resources(item.key for item in items)
        items = [i for i in items if taken_by(current.get(i.key), i.source_uri) is None]
        done = self._ingest_files(items, effects, "indexed_sources")
        return done, len(batch) - done

    def missing_vectors(
        self, batch: list[MissingVectors], effects: dict[str, int]
    ) -> tuple[int, int]:
        if not self.writer.embeds:
            raise DenseError(
                "missing vectors cannot be re-embedded: the writer has no dense index or embedder"
            )
        written = self.writer.backfill_vectors(
            resource_ids=[m.resource_id for m in batch], batch_size=self.cfg.batch_size
        )
        self._bump(effects, "backfilled_vectors", written)
        return len(batch), 0
