"""The reads a lexical index makes of the record tables (:mod:`hybridsag.records.index_reads`),
on a real SQLite store: what they let through, and what they refuse. The engines' searches over
them run in ``tests/conformance/test_lexical_backends.py`` and ``test_store_backends.py``
(PostgreSQL)."""

from __future__ import annotations

import pytest
from hybridsag.records.index_reads import ChunkRef, IndexReads
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key
from hybridsag.search import HybridSearch


def _rows(hs: HybridSearch) -> dict[str, int]:
    """``chunks.id`` of each resource's (one) chunk, by public id."""
    conn = hs.components.store.connection()
    reads = IndexReads(hs.components.store)
    return {
        rid: reads.chunk_rowids(conn, resource_key(rid, tenant))[0]
        for rid, tenant in (("alpha", ""), ("beta", "t1"), ("gamma", ""))
    }


def test_visible_chunks_apply_the_filters_and_the_condition(hs: HybridSearch) -> None:
    hs.ingest("alpha", "Alpha rivers carry water.", title="Alpha")
    hs.ingest("beta", "Beta trains run on rails.", title="Beta", tenant="t1")
    hs.ingest("gamma", "Gamma bees collect nectar.", title="Gamma")
    hs.disable("gamma")
    rows = _rows(hs)
    reads = IndexReads(hs.components.store)
    every = list(rows.values()) + [10**9]  # a row no chunk has

    current = reads.visible_chunks(every)  # no filter: every current chunk
    assert sorted(current) == sorted(rows.values())
    alpha = current[rows["alpha"]]
    assert alpha == ChunkRef(rows["alpha"], alpha.chunk_id, "alpha")

    ready, params = Filters().sql("r")
    assert sorted(reads.visible_chunks(every, ready, params)) == sorted(
        [rows["alpha"], rows["beta"]]
    )
    tenant, params = Filters(tenant="t1").sql("r")
    assert list(reads.visible_chunks(every, tenant, params)) == [rows["beta"]]
    both, params = Filters(statuses=("ready", "disabled"), tenant="").sql("r")
    assert sorted(reads.visible_chunks(every, both, params)) == sorted(
        [rows["alpha"], rows["gamma"]]
    )
    held = reads.visible_chunks(
        every, ready, Filters().sql("r")[1],
        condition="c.chunk_id = ?", condition_params=[alpha.chunk_id],
    )
    assert list(held) == [rows["alpha"]]
    assert reads.visible_chunks([]) == {}
    assert reads.count_chunks() == 3
    assert reads.count_chunks(*Filters().sql("r")) == 2


def test_the_audit_reads_see_an_engine_table_and_refuse_another_name(hs: HybridSearch) -> None:
    hs.ingest("alpha", "Alpha rivers carry water.", title="Alpha")
    store = hs.components.store
    reads = IndexReads(store)
    with store.atomic() as conn:
        rowid = reads.chunk_rowids(conn, "alpha")[0]
        title = reads.resource_rowid(conn, "alpha")
        assert title is not None and reads.resource_rowid(conn, "nobody") is None
        conn.execute("CREATE TEMP TABLE side(id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO side(id) VALUES (?)", [(rowid,), (10**9,)])
        assert reads.orphan_rows(conn, "side", of="chunks") == {10**9}
        states = reads.chunk_states(conn, [rowid, 10**9 + 1], kept_in="side")
        assert list(states) == [rowid] and states[rowid].kept and states[rowid].status == "ready"
        assert reads.title_states(conn, [title])[title].version == 1
        assert reads.has_chunk_row(conn, rowid) and not reads.has_chunk_row(conn, 10**9)
        with pytest.raises(ValueError, match="not a table name: 'side; DROP TABLE chunks'"):
            reads.orphan_rows(conn, "side; DROP TABLE chunks", of="chunks")
        with pytest.raises(ValueError, match="not a table name"):
            reads.chunk_states(conn, [rowid], kept_in="side m JOIN x")
        conn.execute("DROP TABLE side")
