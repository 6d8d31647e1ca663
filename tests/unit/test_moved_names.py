"""Names that moved when a module was split by job (issue 41) still import from their old module
for one release: the same object as the new owner's, with a DeprecationWarning that names the new
home; a name that never lived there is still an AttributeError."""

from __future__ import annotations

import importlib

import pytest

#: The split modules: each keeps a ``MOVED`` table of ``name -> owner module``.
SPLIT = (
    "hybridsag.lexical.index",
    "hybridsag.vectors.index",
    "hybridsag.backend.protocol",
    "hybridsag.vectors.onnx_embedder",
)


def _moved() -> list[tuple[str, str, str]]:
    out = []
    for module in SPLIT:
        moved = importlib.import_module(module).MOVED
        out += [(module, name, owner) for name, owner in sorted(moved.items())]
    return out


@pytest.mark.parametrize(("module", "name", "owner"), _moved())
def test_a_moved_name_imports_from_its_old_module_with_a_warning(
    module: str, name: str, owner: str
) -> None:
    old = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} moved to {owner}\.{name}"):
        got = getattr(old, name)
    assert got is getattr(importlib.import_module(owner), name)
    assert name in importlib.import_module(owner).__all__


@pytest.mark.parametrize("module", SPLIT)
def test_a_name_that_never_lived_there_is_still_an_attribute_error(module: str) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(importlib.import_module(module), "no_such_name")


def test_the_moved_tables_are_what_the_old_modules_exported() -> None:
    """Every name the old ``__all__`` listed is still reachable: defined there or moved."""
    before = {
        "hybridsag.lexical.index": {
            "FTS_MIGRATIONS", "ChunkTokens", "Fts5Statements", "LexicalEngine", "LexicalIndex",
            "LexicalQueries", "LexicalQuery", "LexicalTables", "PG_LEXICAL_MIGRATIONS",
            "PostgresStatements", "Ranked", "StoreLexicalIndex", "StoreStatements",
            "build_best_chunks_sql", "build_match", "build_pg_bm25_sql", "build_tops_sql",
            "build_title_search_sql", "build_tsquery", "build_tsvector", "count_store_chunks",
            "fold_term", "near_terms_in", "quote_term",
        },
        "hybridsag.vectors.index": {
            "DENSE_INDEXES", "DenseFilter", "DenseIndex", "DenseIndexFactory", "LEGACY_COLLECTION",
            "MilvusDenseIndex", "OWNER_PROPERTY", "VectorRow", "check_vector", "default_collection",
            "filter_expression", "make_dense_index",
            "PATH",  # not in its __all__, imported by no one, but importable
        },
    }  # fmt: skip
    for module, names in before.items():
        mod = importlib.import_module(module)
        assert names <= set(mod.__all__) | set(mod.MOVED), module


#: What ``hybridsag.records.store`` exported before the records were split by job (its
#: ``__all__`` and its other public names): each still imports from there, as the very object
#: its new owner defines.
STORE_BEFORE = {
    "BACKFILL_META": "schema", "BACKFILL_BATCH": "schema", "MIGRATIONS": "schema",
    "SEARCHABLE_STATUSES": "schema", "STATUSES": "schema",
    "Backend": "dialect", "SqliteBackend": "dialect", "check_store_file": "dialect",
    "is_postgres_url": "dialect", "placeholders": "dialect", "select_in": "dialect",
    "SQLITE_MAGIC": "dialect",
    "ChunkRecord": "rows", "Exclusion": "rows", "ResourceRecord": "rows", "facts_columns": "rows",
    "Filters": "filters", "MAX_FILTER_CHARS": "filters", "MAX_FILTER_IDS": "filters",
    "MAX_FILTER_TAGS": "filters",
    "KEY_SEP": "keys", "chunk_id_for": "keys", "chunk_id_suffix": "keys", "public_id_sql": "keys",
    "resource_key": "keys", "split_key": "keys",
    "Store": "store",
}  # fmt: skip


@pytest.mark.parametrize(("name", "owner"), sorted(STORE_BEFORE.items()))
def test_the_store_still_exports_every_name_it_exported(name: str, owner: str) -> None:
    import warnings

    store = importlib.import_module("hybridsag.records.store")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the store's names are re-exported, not deprecated
        got = getattr(store, name)
    assert got is getattr(importlib.import_module(f"hybridsag.records.{owner}"), name)
    assert name in importlib.import_module(f"hybridsag.records.{owner}").__all__
    assert set(store.__all__) <= set(STORE_BEFORE)


@pytest.mark.parametrize(
    ("module", "name", "owner"),
    [
        ("hybridsag.sentences", "split_sentences", "hybridsag.fusion.text.sentences"),
        ("hybridsag.fusion.markdown", "atx_heading", "hybridsag.fusion.text.markdown"),
    ],
)
def test_a_whole_moved_module_warns_and_refuses_as_the_split_ones_do(
    module: str, name: str, owner: str
) -> None:
    """One helper for moved names (fusion.text.moved_names): a module moved whole says the same
    as a split one, and an unknown name names the old module (fails before: it named the new
    one, and the warning did not say where to import from)."""
    old = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} moved to {owner}\.{name}; import"):
        assert getattr(old, name) is getattr(importlib.import_module(owner), name)
    with pytest.raises(AttributeError, match=rf"module '{module}' has no attribute 'no_such_name'"):
        getattr(old, "no_such_name")
