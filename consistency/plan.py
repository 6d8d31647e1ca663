"""The reconcile plan: the dense index, the lexical index's rows and the chunk rows diffed
against the resource table, and the folder resources against their files. Plan, then apply:
this module only reads.

:func:`read_state` reads one SQLite snapshot (resources, chunks, the lexical index's chunk and
title rowids, tombstones, journal) and then every ``(chunk_id, resource_id, version)`` in the dense
index (``DenseIndex.iter_entries``, Strong consistency); :func:`diff`, a pure function of what was
read, sorts what does not belong into classes (:func:`build_plan` is the two together). A
resource is named by its store key throughout (:func:`hybridsag.records.store.resource_key`: tenant and
id), in the store's rows and in what the dense index lists alike:

``orphan_vectors``
    a vector whose resource is absent (and not covered by a tombstone), or whose chunk row is
    missing while its version is neither older than the resource's (stale), nor a pending claim,
    nor covered by a tombstone.
``stale_versions``
    a vector of an older version of an existing resource (the write path's cleanup step failed).
``tombstoned_leftovers``
    anything of a resource in status ``deleting``, or of a resource whose tombstone covers the
    version: the delete is finished (``dense.delete_resource`` + ``Writer.purge``) or, when a newer
    claim exists, the covered vectors and rows are removed by id.
``orphan_chunks`` / ``orphan_fts_rows``
    chunk rows of no resource or of a version that is not the resource's; ``chunks_fts`` rows
    without a chunk row, ``titles_fts`` rows without a resource.
``missing_fts_rows``
    a current chunk without its ``chunks_fts`` row, a committed resource without its
    ``titles_fts`` row (re-tokenized from the stored text).
``stuck_indexing``
    a claim (``pending_version``, a ``journal`` row, a never-committed ``indexing`` row) older than
    ``consistency.indexing_timeout_s`` or whose owning process is gone from this host (by the
    owner id the claim records, :func:`hybridsag.records.ledger.claim_abandoned`): its vectors
    are deleted, the claim released, a never-committed row dropped. Journal rows that no longer
    belong to a standing claim are listed here too.
``missing_vectors``
    a chunk of a ``ready``/``disabled`` resource without a vector: re-embedded, never deleted.
    While writes run, a chunk replaced or deleted between the SQLite snapshot and the Milvus read
    can show up here; re-embedding re-reads the current chunks, so that costs time, not data.

Claims that are neither stuck nor finished are reported as ``pending_claims`` and left alone.

``source_deleted`` / ``source_changed`` / ``source_new``
    source drift (:mod:`hybridsag.consistency.source_drift`, read by :func:`build_plan` after the
    index): a folder resource whose file is gone from disk, one whose file now makes another
    document, a file under a folder root with no resource. Repaired through the write path;
    ``sources`` also holds what is said but is no work (touched files, skipped files, roots not
    checked).

Why the order "SQLite first, then Milvus": the write path writes vectors before it commits chunk
rows, so a chunk committed before the snapshot has its vector before the Milvus read and is never
reported missing by mistake. The opposite mistake (a vector written after the snapshot looks
orphaned) is possible, which is why :func:`hybridsag.consistency.apply_plan` re-checks every item
under the write lock before it deletes anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from hybridsag.consistency.source_drift import SourceDrift, read_sources
from hybridsag.vectors.contract import DenseIndex
from hybridsag.errors import StoreError
from hybridsag.records.ledger import Ledger
from hybridsag.lexical.contract import LexicalIndex
from hybridsag.records.owners import pid_alive
from hybridsag.settings import Settings
from hybridsag.records.store import Store
from hybridsag.records.ledger import claim_abandoned

__all__ = [
    "CLASSES",
    "ChunkRow",
    "FtsRow",
    "MissingVectors",
    "ReconcilePlan",
    "StoreState",
    "StuckClaim",
    "TombstonedLeftover",
    "VectorEntry",
    "build_plan",
    "diff",
    "owner_alive",
    "read_state",
]

#: The classes a plan sorts leftovers into, in the order apply handles them.
CLASSES: tuple[str, ...] = (
    "tombstoned_leftovers",
    "stuck_indexing",
    "stale_versions",
    "orphan_vectors",
    "orphan_chunks",
    "orphan_fts_rows",
    "missing_fts_rows",
    "missing_vectors",
    "source_deleted",
    "source_changed",
    "source_new",
)

#: Sample ids kept per class in counts/reports.
SAMPLE_SIZE = 10
#: Rows per ``iter_entries`` batch (read side only).
ITER_BATCH = 5000


@dataclass(frozen=True, slots=True)
class VectorEntry:
    """One stored vector: its chunk id, its resource's key (:func:`hybridsag.records.store.resource_key`,
    the id in tenant ``""``) and version."""

    chunk_id: str
    resource_id: str
    version: int


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One ``chunks`` row (``rowid`` is ``chunks.id``, also its ``chunks_fts`` rowid)."""

    rowid: int
    chunk_id: str
    resource_id: str
    version: int


@dataclass(frozen=True, slots=True)
class FtsRow:
    """One FTS5 row: ``chunks_fts`` (rowid = ``chunks.id``) or ``titles_fts``
    (rowid = ``resources.id``)."""

    table: Literal["chunks_fts", "titles_fts"]
    rowid: int

    @property
    def label(self) -> str:
        return f"{self.table}:{self.rowid}"


@dataclass(frozen=True, slots=True)
class TombstonedLeftover:
    """What is left of a deleted resource.

    ``finish_delete``: the resource row is gone or in status ``deleting``, so nothing of it is
    live: apply runs ``dense.delete_resource`` and ``Writer.purge``. Otherwise a newer claim exists
    and only the listed vectors and chunk rows (covered by the tombstone) are removed by id.
    """

    resource_id: str
    status: str | None
    tombstone_version: int | None
    finish_delete: bool
    vectors: tuple[VectorEntry, ...] = ()
    chunk_rowids: tuple[int, ...] = ()
    journal_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StuckClaim:
    """A claim of the write path that will not finish (or journal rows of no standing claim).

    ``pending_version`` None means there is no claim to release (only ``journal_ids`` to drop,
    or a never-committed ``indexing`` row). ``reason``: ``timeout``, ``owner gone``,
    ``superseded`` (journal rows whose claim no longer stands) or ``in progress`` (in
    :attr:`ReconcilePlan.pending_claims` only).
    """

    resource_id: str
    pending_version: int | None
    status: str | None
    committed_version: int
    never_committed: bool
    vectors: tuple[VectorEntry, ...]
    journal_ids: tuple[int, ...]
    age_s: float
    owner_pids: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class MissingVectors:
    """Chunks of a ``ready``/``disabled`` resource that have no vector (re-embedded by apply)."""

    resource_id: str
    version: int
    chunk_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    """A frozen diff; :func:`build_plan` makes it, :func:`hybridsag.consistency.apply_plan` runs it.

    ``collection_size`` is the number of vectors read; ``store_empty`` is true when the store has
    no resource, tombstone, chunk or journal row at all (then no vector may be deleted, see the
    mass-delete guard). ``dense_checked`` is false when the dense path is off. ``sources`` is
    the source drift (empty when not read).
    """

    built_at: float
    seconds: float
    collection: str | None
    dense_checked: bool
    attach: bool
    collection_size: int
    resources: int
    chunks: int
    tombstones: int
    store_empty: bool
    orphan_vectors: tuple[VectorEntry, ...] = ()
    stale_versions: tuple[VectorEntry, ...] = ()
    tombstoned_leftovers: tuple[TombstonedLeftover, ...] = ()
    orphan_chunks: tuple[ChunkRow, ...] = ()
    orphan_fts_rows: tuple[FtsRow, ...] = ()
    missing_fts_rows: tuple[FtsRow, ...] = ()
    stuck_indexing: tuple[StuckClaim, ...] = ()
    missing_vectors: tuple[MissingVectors, ...] = ()
    pending_claims: tuple[StuckClaim, ...] = field(default=())
    sources: SourceDrift = field(default_factory=SourceDrift)

    # -- summaries -------------------------------------------------------------------------------

    @property
    def vectors_to_delete(self) -> int:
        """Vectors apply would delete (what the mass-delete guard weighs)."""
        return (
            len(self.orphan_vectors)
            + len(self.stale_versions)
            + sum(len(x.vectors) for x in self.tombstoned_leftovers)
            + sum(len(x.vectors) for x in self.stuck_indexing)
        )

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to fix (pending claims are not counted: they are live)."""
        return not any(self.counts().values())

    def counts(self) -> dict[str, int]:
        """Items per class: vectors for the vector classes, resources for
        ``tombstoned_leftovers``, claims for ``stuck_indexing``, rows for the row classes and
        chunks for ``missing_vectors``."""
        return {
            "tombstoned_leftovers": len(self.tombstoned_leftovers),
            "stuck_indexing": len(self.stuck_indexing),
            "stale_versions": len(self.stale_versions),
            "orphan_vectors": len(self.orphan_vectors),
            "orphan_chunks": len(self.orphan_chunks),
            "orphan_fts_rows": len(self.orphan_fts_rows),
            "missing_fts_rows": len(self.missing_fts_rows),
            "missing_vectors": sum(len(x.chunk_ids) for x in self.missing_vectors),
            "source_deleted": len(self.sources.deleted),
            "source_changed": len(self.sources.changed),
            "source_new": len(self.sources.new),
        }

    def samples(self, limit: int = SAMPLE_SIZE) -> dict[str, list[str]]:
        """The first ``limit`` ids of every class (chunk ids, resource ids or ``table:rowid``)."""
        missing = [cid for x in self.missing_vectors for cid in x.chunk_ids]
        return {
            "tombstoned_leftovers": [x.resource_id for x in self.tombstoned_leftovers[:limit]],
            "stuck_indexing": [x.resource_id for x in self.stuck_indexing[:limit]],
            "stale_versions": [x.chunk_id for x in self.stale_versions[:limit]],
            "orphan_vectors": [x.chunk_id for x in self.orphan_vectors[:limit]],
            "orphan_chunks": [x.chunk_id for x in self.orphan_chunks[:limit]],
            "orphan_fts_rows": [x.label for x in self.orphan_fts_rows[:limit]],
            "missing_fts_rows": [x.label for x in self.missing_fts_rows[:limit]],
            "missing_vectors": missing[:limit],
            "source_deleted": [x.label for x in self.sources.deleted[:limit]],
            "source_changed": [x.label for x in self.sources.changed[:limit]],
            "source_new": [x.label for x in self.sources.new[:limit]],
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary: counts, samples and totals (not every item)."""
        return {
            "built_at": self.built_at,
            "seconds": round(self.seconds, 4),
            "collection": self.collection,
            "dense_checked": self.dense_checked,
            "attach": self.attach,
            "collection_size": self.collection_size,
            "resources": self.resources,
            "chunks": self.chunks,
            "tombstones": self.tombstones,
            "store_empty": self.store_empty,
            "vectors_to_delete": self.vectors_to_delete,
            "counts": self.counts(),
            "samples": self.samples(),
            "pending_claims": len(self.pending_claims),
            "sources": self.sources.summary(),
            "empty": self.is_empty,
        }


#: Whether process ``pid`` exists on this host (kept here for the lease; claims are judged by
#: :func:`hybridsag.records.ledger.claim_abandoned`, which survives pid reuse).
owner_alive = pid_alive


@dataclass(slots=True)
class StoreState:
    """What a plan is computed from: one SQLite snapshot (resources, chunks, the lexical
    index's rowids, tombstones, journal) and then every entry of the dense index (only this
    index's own rows: :mod:`hybridsag.vectors.index` filters on the index id) and its collection."""

    resources: dict[str, Mapping[str, Any]]
    resource_rowids: set[int]
    chunks_by_id: dict[str, Mapping[str, Any]]
    chunk_rowids: set[int]
    chunks_by_resource: dict[str, list[Mapping[str, Any]]]
    chunk_fts: set[int]
    title_fts: set[int]
    tombstones: dict[str, int]
    journal: dict[str, list[Mapping[str, Any]]]
    entries: list[VectorEntry] = field(default_factory=list)
    dense_checked: bool = False
    collection: str | None = None


def read_state(store: Store, lexical: LexicalIndex, dense: DenseIndex | None) -> StoreState:
    """Read the store in one snapshot, then the dense index (Strong reads): the reads of a plan.

    Raises:
        StoreError: the SQLite read failed. DenseError: reading the dense index failed.
    """
    try:
        with store.snapshot() as conn:  # one read snapshot for every table below
            rows = Ledger.state(conn)
            chunk_fts, title_fts = lexical.indexed_rowids(conn)
        resources = rows.resources
        chunks_by_id: dict[str, Mapping[str, Any]] = {}
        chunks_by_resource: dict[str, list[Mapping[str, Any]]] = {}
        for row in rows.chunks:
            chunks_by_id[row["chunk_id"]] = row
            chunks_by_resource.setdefault(row["resource_id"], []).append(row)
        tombstones = rows.tombstones
        journal: dict[str, list[Mapping[str, Any]]] = {}
        for row in rows.journal:
            journal.setdefault(row["resource_id"], []).append(row)
    except store.errors as exc:
        raise StoreError(f"reading {store.name} for the reconcile plan failed: {exc}") from exc
    entries: list[VectorEntry] = []
    if dense is not None:  # after the snapshot: see the module docstring
        entries = [VectorEntry(c, r, int(v)) for c, r, v in dense.iter_entries(ITER_BATCH)]
    return StoreState(
        resources=resources,
        resource_rowids={r["id"] for r in resources.values()},
        chunks_by_id=chunks_by_id,
        chunk_rowids={r["id"] for r in chunks_by_id.values()},
        chunks_by_resource=chunks_by_resource,
        chunk_fts=chunk_fts,
        title_fts=title_fts,
        tombstones=tombstones,
        journal=journal,
        entries=entries,
        dense_checked=dense is not None,
        collection=dense.collection if dense is not None else None,
    )


def _is_live(entry: VectorEntry, snap: StoreState) -> bool:
    res = snap.resources.get(entry.resource_id)
    chunk = snap.chunks_by_id.get(entry.chunk_id)
    return (
        res is not None
        and chunk is not None
        and res["status"] != "deleting"
        and chunk["resource_id"] == entry.resource_id
        and chunk["version"] == entry.version == res["version"]
    )


def build_plan(
    store: Store,
    lexical: LexicalIndex,
    dense: DenseIndex | None,
    settings: Settings,
    *,
    now: float | None = None,
    sources: bool = True,
) -> ReconcilePlan:
    """Diff the dense index, the lexical index's rows and the chunk rows against the resource
    table: :func:`read_state`, then the pure :func:`diff`; then, with ``sources``, the folder
    resources against their files (:func:`hybridsag.consistency.source_drift.read_sources`).

    Reads only. ``dense`` None (the dense path is off, or this data dir never recorded vectors)
    skips every vector class. ``now`` (epoch seconds) is the clock claims are aged against
    (default: ``time.time()``).

    Raises:
        StoreError: the SQLite read failed. DenseError: reading the dense index failed.

    Example::

        plan = build_plan(parts.store, parts.lexical, parts.stored_dense_index(), settings)
        plan.counts()   # {"orphan_vectors": 0, "stale_versions": 2, ...}
    """
    started = time.perf_counter()
    state = read_state(store, lexical, dense)
    plan = diff(state, settings, now=time.time() if now is None else now)
    drift = read_sources(store, settings) if sources else SourceDrift()
    return replace(plan, sources=drift, seconds=time.perf_counter() - started)


def diff(state: StoreState, settings: Settings, *, now: float) -> ReconcilePlan:
    """The plan for ``state`` (pure: no I/O). See the module docstring for the classes."""
    by_resource: dict[str, list[VectorEntry]] = {}
    for e in state.entries:
        by_resource.setdefault(e.resource_id, []).append(e)
    stuck, pending = _claims(state, by_resource, now, settings.consistency.indexing_timeout_s)
    orphan_vectors, stale, tomb_vectors, live_ids = _vector_classes(state)
    orphan_chunks, tomb_chunks = _chunk_classes(state)
    leftovers = _leftovers(state, tomb_vectors, tomb_chunks)
    orphan_fts, missing_fts = _fts_classes(state, {c.rowid for c in orphan_chunks})
    attach = settings.milvus.attach
    missing = [] if not state.dense_checked or attach else _missing_vectors(state, live_ids)
    store_empty = not (state.resources or state.tombstones or state.chunks_by_id or state.journal)
    return ReconcilePlan(
        built_at=now,
        seconds=0.0,
        collection=(state.collection or settings.milvus.collection)
        if state.dense_checked
        else None,
        dense_checked=state.dense_checked,
        attach=attach,
        collection_size=len(state.entries),
        resources=len(state.resources),
        chunks=len(state.chunks_by_id),
        tombstones=len(state.tombstones),
        store_empty=store_empty,
        orphan_vectors=tuple(orphan_vectors),
        stale_versions=tuple(stale),
        tombstoned_leftovers=tuple(leftovers),
        orphan_chunks=tuple(orphan_chunks),
        orphan_fts_rows=tuple(orphan_fts),
        missing_fts_rows=tuple(sorted(missing_fts, key=lambda f: (f.table, f.rowid))),
        stuck_indexing=tuple(stuck),
        missing_vectors=tuple(sorted(missing, key=lambda m: m.resource_id)),
        pending_claims=tuple(pending),
    )


def _claims(
    state: StoreState,
    by_resource: Mapping[str, list[VectorEntry]],
    now: float,
    timeout: float,
) -> tuple[list[StuckClaim], list[StuckClaim]]:
    """Claims and journal rows: (stuck ones, ones in progress)."""
    stuck: list[StuckClaim] = []
    pending: list[StuckClaim] = []
    deleting = {rid for rid, r in state.resources.items() if r["status"] == "deleting"}
    claimed = {
        rid
        for rid, r in state.resources.items()
        if r["pending_version"] is not None or r["status"] == "indexing"
    }
    for rid in sorted(set(state.journal) | claimed):
        res = state.resources.get(rid)
        rows = state.journal.get(rid, [])
        if res is None or rid in deleting:
            continue  # journal rows of a deleted resource: purge removes them (leftovers)
        p = res["pending_version"]
        claim_rows = [
            j for j in rows if j["op"] == "ingest" and p is not None and j["version"] == p
        ]
        other_rows = [j for j in rows if j not in claim_rows]
        never_committed = res["status"] == "indexing" and res["version"] == 0
        if p is not None or never_committed:
            started_at = min((j["started_at"] for j in claim_rows), default=res["updated_at"])
            age = max(0.0, now - float(started_at))
            pids = tuple(sorted({int(j["pid"]) for j in claim_rows}))
            gone = bool(claim_rows) and all(
                claim_abandoned(int(j["pid"]), j["detail"]) for j in claim_rows
            )
            vectors = tuple(e for e in by_resource.get(rid, ()) if p is not None and e.version == p)
            claim = StuckClaim(
                resource_id=rid,
                pending_version=p,
                status=res["status"],
                committed_version=int(res["version"]),
                never_committed=never_committed,
                vectors=vectors,
                journal_ids=tuple(j["id"] for j in rows),
                age_s=round(age, 3),
                owner_pids=pids,
                reason="timeout" if age > timeout else ("owner gone" if gone else "in progress"),
            )
            if claim.reason == "in progress":
                pending.append(replace(claim, journal_ids=tuple(j["id"] for j in claim_rows)))
                if other_rows:  # superseded rows beside a live claim
                    stuck.append(_superseded(rid, res, other_rows, now))
            else:
                stuck.append(claim)
        elif rows:
            stuck.append(_superseded(rid, res, rows, now))
    return stuck, pending


def _vector_classes(
    state: StoreState,
) -> tuple[list[VectorEntry], list[VectorEntry], dict[str, list[VectorEntry]], set[str]]:
    """(orphan vectors, stale versions, tombstoned vectors by resource, live chunk ids)."""
    orphan_vectors: list[VectorEntry] = []
    stale: list[VectorEntry] = []
    tomb_vectors: dict[str, list[VectorEntry]] = {}
    live_ids: set[str] = set()
    for e in state.entries:
        if _is_live(e, state):
            live_ids.add(e.chunk_id)
            continue
        res = state.resources.get(e.resource_id)
        tomb = state.tombstones.get(e.resource_id)
        if res is None:
            if tomb is not None and e.version <= tomb:
                tomb_vectors.setdefault(e.resource_id, []).append(e)
            else:
                orphan_vectors.append(e)
        elif res["status"] == "deleting":
            tomb_vectors.setdefault(e.resource_id, []).append(e)
        elif res["pending_version"] is not None and e.version == res["pending_version"]:
            continue  # the claim's own vectors: undone with a stuck claim, else left alone
        elif e.version < res["version"]:
            stale.append(e)
        elif tomb is not None and e.version <= tomb:
            tomb_vectors.setdefault(e.resource_id, []).append(e)
        else:
            orphan_vectors.append(e)
    return orphan_vectors, stale, tomb_vectors, live_ids


def _chunk_classes(state: StoreState) -> tuple[list[ChunkRow], dict[str, list[int]]]:
    """(orphan chunk rows, tombstoned chunk rowids by resource)."""
    orphan_chunks: list[ChunkRow] = []
    tomb_chunks: dict[str, list[int]] = {}
    for row in state.chunks_by_id.values():
        rid = row["resource_id"]
        res = state.resources.get(rid)
        tomb = state.tombstones.get(rid)
        item = ChunkRow(row["id"], row["chunk_id"], rid, int(row["version"]))
        if res is None:
            if tomb is not None and item.version <= tomb:
                tomb_chunks.setdefault(rid, []).append(item.rowid)
            else:
                orphan_chunks.append(item)
        elif res["status"] == "deleting":
            tomb_chunks.setdefault(rid, []).append(item.rowid)
        elif item.version != res["version"]:
            orphan_chunks.append(item)
    return orphan_chunks, tomb_chunks


def _leftovers(
    state: StoreState,
    tomb_vectors: Mapping[str, list[VectorEntry]],
    tomb_chunks: Mapping[str, list[int]],
) -> list[TombstonedLeftover]:
    """What is left of deleted resources (finish the delete, or remove covered items)."""
    leftovers: list[TombstonedLeftover] = []
    deleting = {rid for rid, r in state.resources.items() if r["status"] == "deleting"}
    candidates = deleting | set(tomb_vectors) | set(tomb_chunks)
    candidates |= {rid for rid in state.journal if rid not in state.resources}
    for rid in sorted(candidates):
        res = state.resources.get(rid)
        finish = res is None or res["status"] == "deleting"
        leftovers.append(
            TombstonedLeftover(
                resource_id=rid,
                status=None if res is None else res["status"],
                tombstone_version=state.tombstones.get(rid),
                finish_delete=finish,
                vectors=tuple(tomb_vectors.get(rid, ())),
                chunk_rowids=tuple(tomb_chunks.get(rid, ())),
                journal_ids=tuple(j["id"] for j in state.journal.get(rid, ()))
                if finish
                else (),
            )
        )
    return leftovers


def _fts_classes(
    state: StoreState, orphan_chunk_rowids: set[int]
) -> tuple[list[FtsRow], list[FtsRow]]:
    """(lexical rows of nothing, current chunks and resources missing their lexical row)."""
    orphan_fts = [FtsRow("chunks_fts", r) for r in sorted(state.chunk_fts - state.chunk_rowids)]
    orphan_fts += [FtsRow("titles_fts", r) for r in sorted(state.title_fts - state.resource_rowids)]
    missing_fts: list[FtsRow] = []
    for row in state.chunks_by_id.values():
        res = state.resources.get(row["resource_id"])
        if (
            res is not None
            and res["status"] != "deleting"
            and row["id"] not in orphan_chunk_rowids
            and row["id"] not in state.chunk_fts
        ):
            missing_fts.append(FtsRow("chunks_fts", row["id"]))
    for res in state.resources.values():
        if res["version"] > 0 and res["status"] != "deleting" and res["id"] not in state.title_fts:
            missing_fts.append(FtsRow("titles_fts", res["id"]))
    return orphan_fts, missing_fts


def _missing_vectors(state: StoreState, live_ids: set[str]) -> list[MissingVectors]:
    """Current chunks of ready/disabled resources that have no live vector."""
    missing: list[MissingVectors] = []
    for rid, res in state.resources.items():
        if res["status"] not in ("ready", "disabled"):
            continue
        ids = tuple(
            c["chunk_id"]
            for c in state.chunks_by_resource.get(rid, ())
            if c["version"] == res["version"] and c["chunk_id"] not in live_ids
        )
        if ids:
            missing.append(MissingVectors(rid, int(res["version"]), ids))
    return missing


def _superseded(
    rid: str, res: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], now: float
) -> StuckClaim:
    rows = list(rows)
    return StuckClaim(
        resource_id=rid,
        pending_version=None,
        status=res["status"],
        committed_version=int(res["version"]),
        never_committed=False,
        vectors=(),
        journal_ids=tuple(j["id"] for j in rows),
        age_s=round(max(0.0, now - min(float(j["started_at"]) for j in rows)), 3),
        owner_pids=tuple(sorted({int(j["pid"]) for j in rows})),
        reason="superseded",
    )
