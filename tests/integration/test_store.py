"""The SQLite system of record: WAL, named migrations, tokenizer fingerprint, filters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hybridsag.errors import IndexMismatchError, QueryError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters
from hybridsag.records.keys import resource_key, split_key
from hybridsag.records.schema import MIGRATIONS
from hybridsag.records.store import Store

FP = "test-tokenizer/1"


def test_store_runs_in_wal_mode(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3", tokenizer_fingerprint=FP)
    try:
        assert store.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store.set_meta("probe", "1")
        assert Path(str(store.path) + "-wal").exists()
    finally:
        store.close()


def test_named_migrations_are_recorded_once(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    names = [name for name, _ in MIGRATIONS]
    store = Store(path, tokenizer_fingerprint=FP)
    try:
        rows = store.connection().execute("SELECT name FROM migrations ORDER BY name").fetchall()
        assert [r[0] for r in rows] == names
        assert store.get_meta("schema_version") == names[-1]
        assert store.migrate() == []  # nothing pending in the same process
    finally:
        store.close()
    reopened = Store(path, tokenizer_fingerprint=FP)
    try:
        assert reopened.migrate() == []
        count = reopened.connection().execute("SELECT count(*) FROM migrations").fetchone()[0]
        assert count == len(names)
    finally:
        reopened.close()


def test_tokenizer_fingerprint_is_stored_and_enforced(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = Store(path, tokenizer_fingerprint="tok-a/1")
    assert store.get_meta("tokenizer") == "tok-a/1"
    store.close()
    with pytest.raises(IndexMismatchError) as info:
        Store(path, tokenizer_fingerprint="tok-b/2")
    assert "tok-a/1" in str(info.value) and "tok-b/2" in str(info.value)
    same = Store(path, tokenizer_fingerprint="tok-a/1")  # the right tokenizer still opens it
    assert same.get_meta("tokenizer") == "tok-a/1"
    same.close()


def test_hybridsearch_refuses_an_index_built_with_another_tokenizer(
    tmp_path: Path, settings: Settings
) -> None:
    with HybridSearch(settings) as hs:
        hs.ingest("doc", "plain text")
        built_with = hs.components.tokenizer.fingerprint()
    user_dict = tmp_path / "userdict.txt"
    user_dict.write_text("自定义词 10\n", "utf-8")
    other = settings.model_copy(
        update={"tokenizer": settings.tokenizer.model_copy(update={"user_dict": user_dict})}
    )
    with pytest.raises(IndexMismatchError) as info:
        HybridSearch(other)
    assert built_with in str(info.value) and "userdict.txt" in str(info.value)


# --------------------------------------------------------------------------- filters


RESOURCES: dict[str, dict[str, Any]] = {
    "pub": {"tenant": "", "acl": (), "metadata": {"lang": "en", "n": 1}},
    "t1-open": {"tenant": "t1", "acl": (), "metadata": {"lang": "zh", "flag": True}},
    "t1-team": {"tenant": "t1", "acl": ("team",), "metadata": {"flag": 1, "n": 1.0}},
    "t2-ops": {"tenant": "t2", "acl": ("ops", "admin"), "metadata": {"flag": False, "n": 2}},
    "nested": {"tenant": "t2", "acl": ("ops",), "metadata": {"lst": ["x"], "d": {"k": 1}}},
    "off": {"tenant": "t1", "acl": (), "metadata": {"lang": "en"}},
}


@pytest.fixture
def filled(hs: HybridSearch) -> HybridSearch:
    for rid, fields in RESOURCES.items():
        hs.ingest(rid, f"Shared body text of {rid}.", title=rid, **fields)
    assert hs.disable("off", tenant="t1")
    return hs


def _sql_ids(store: Store, flt: Filters) -> set[str]:
    where, params = flt.sql("r")
    sql = f"SELECT r.resource_id FROM resources r WHERE {where}"
    rows = store.connection().execute(sql, params)
    return {split_key(r[0])[1] for r in rows}


def _py_ids(store: Store, flt: Filters) -> set[str]:
    records = store.resources(resource_key(rid, f["tenant"]) for rid, f in RESOURCES.items())
    return {rec.resource_id for rec in records.values() if flt.allows(rec)}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, {"pub", "t1-open", "t1-team", "t2-ops", "nested"}),
        ({"tenant": "t1"}, {"t1-open", "t1-team"}),
        ({"tenant": ""}, {"pub"}),
        ({"tenant": "nobody"}, set()),
        ({"acl": ()}, {"pub", "t1-open"}),  # public resources have no tags
        ({"acl": ("team",)}, {"pub", "t1-open", "t1-team"}),
        ({"acl": ("admin", "nope")}, {"pub", "t1-open", "t2-ops"}),
        ({"tenant": "t2", "acl": ("ops",)}, {"t2-ops", "nested"}),
        ({"metadata": {"lang": "en"}}, {"pub"}),
        ({"metadata": {"flag": True}}, {"t1-open"}),  # true is not 1
        ({"metadata": {"flag": 1}}, {"t1-team"}),  # 1 is not true
        ({"metadata": {"flag": False}}, {"t2-ops"}),
        ({"metadata": {"n": 1}}, {"pub", "t1-team"}),  # 1 == 1.0
        ({"metadata": {"n": 2, "flag": False}}, {"t2-ops"}),
        ({"metadata": {"lst": '["x"]'}}, set()),  # a string never equals a stored list
        ({"metadata": {"missing": "x"}}, set()),
        ({"resource_ids": ("pub", "t2-ops", "off", "ghost")}, {"pub", "t2-ops"}),
        ({"resource_ids": ()}, set()),
        ({"resource_ids": ("t1-open", "pub"), "tenant": "t1"}, {"t1-open"}),  # its own ids only
        ({"resource_ids": ("t1-open",), "tenant": "t2"}, set()),
        ({"statuses": ("ready", "disabled"), "tenant": "t1"}, {"t1-open", "t1-team", "off"}),
        ({"statuses": ("disabled",)}, {"off"}),
    ],
)
def test_filters_sql_and_allows_agree(
    filled: HybridSearch, filters: dict[str, Any], expected: set[str]
) -> None:
    flt = Filters.from_mapping(filters)
    assert _sql_ids(filled.components.store, flt) == expected
    assert _py_ids(filled.components.store, flt) == expected


def test_search_applies_filters(filled: HybridSearch) -> None:
    def found(**filters: Any) -> set[str]:
        resp = filled.search("shared body text", top_k=20, paths=["bm25"], filters=filters)
        return {r.resource_id for r in resp.results}

    assert found() == {"pub", "t1-open", "t1-team", "t2-ops", "nested"}
    assert found(tenant="t1", acl=["team"]) == {"t1-open", "t1-team"}
    assert found(metadata={"flag": True}) == {"t1-open"}
    assert found(statuses=["ready", "disabled"], resource_ids=["off"]) == {"off"}


@pytest.mark.parametrize(
    ("filters", "named"),
    [
        ({"tenant": 5}, "5"),
        ({"acl": ["ok", ""]}, "''"),
        ({"acl": 7}, "7"),
        ({"metadata": {"bad key!": 1}}, "bad key!"),
        ({"metadata": {"k": [1, 2]}}, "[1, 2]"),
        ({"metadata": "lang=en"}, "lang=en"),
        ({"resource_ids": ["ok", 17]}, "17"),
        ({"resource_ids": 42}, "42"),
        ({"statuses": ["deleting"]}, "deleting"),
        ({"statuses": []}, "statuses"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_filters_raise_query_error_naming_the_value(
    hs: HybridSearch, filters: dict[str, Any], named: str
) -> None:
    with pytest.raises(QueryError) as info:
        Filters.from_mapping(filters)
    assert named in str(info.value)
    with pytest.raises(QueryError):
        hs.search("anything", filters=filters)


def test_a_bare_string_is_not_a_tuple_of_tags() -> None:
    with pytest.raises(QueryError, match="acl"):
        Filters(acl="team")  # type: ignore[arg-type]
    assert Filters.from_mapping({"acl": "team"}).acl == ("team",)
