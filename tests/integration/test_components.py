"""The composition root: parts built once (also when the first search comes from many threads),
no model where none is needed, paths and judges from registries, FTS5 SQL in one module,
the ledger's SQL in one module, nested transactions, and failures reported instead of dropped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hybridsag.components import Components
from hybridsag.vectors.contract import VectorRow
from hybridsag.vectors.embedder import EMBEDDERS, SentenceTransformerEmbedder
from hybridsag.errors import DenseError, QueryError
from hybridsag.evaluation.harness import run_eval
from hybridsag.fusion.types import Hit
from hybridsag.judges.features import FeatureJudge
from hybridsag.lexical.fts5 import build_best_chunks_sql, build_tops_sql, build_title_search_sql
from hybridsag.paths import PathResult, PathSpec, Peers, register_path, unregister_path
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

from tests.consistency_support import MODEL, FaultyDense, own_dense_index, shared_embedder

ROOT = Path(__file__).resolve().parents[2]

DOCS = {
    "alpha": ("Alpha guide", "Alpha installs the orrery service on Linux with one command."),
    "beta": ("Beta notes", "Beta explains how the orrery scheduler retries a failed job."),
    "gamma": ("Gamma FAQ", "Gamma answers: reset the orrery with E-1234 when it hangs."),
}


def _settings(data_dir: Path, **fields: Any) -> Settings:
    return Settings(
        data_dir=data_dir, embedding={"model": MODEL, **fields.pop("embedding", {})}, **fields
    )


@pytest.fixture(scope="module")
def vector_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose resources have vectors on Milvus Lite (closed again: reopened per
    test), made by the sentence-transformers backend: the index of an older build, which
    ``auto`` must keep on torch (the tests of the built-once embedder count torch ones)."""
    data = tmp_path_factory.mktemp("components") / "data"
    torch_embedder = SentenceTransformerEmbedder(_settings(data))
    with HybridSearch(_settings(data), embedder=torch_embedder) as hs:
        for rid, (title, text) in DOCS.items():
            hs.ingest(rid, text, title=title)
    return data


# -- built once ----------------------------------------------------------------------------------

_BUILT: list[SentenceTransformerEmbedder] = []
_BUILT_LOCK = threading.Lock()


class _CountingEmbedder(SentenceTransformerEmbedder):
    """The real sentence-transformers embedder, counting how many are constructed."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        with _BUILT_LOCK:
            _BUILT.append(self)


@pytest.fixture
def counting_backend() -> Iterator[str]:
    EMBEDDERS["counting"] = _CountingEmbedder
    try:
        yield "counting"
    finally:
        del EMBEDDERS["counting"]
        _BUILT.clear()


TRIALS = 50
THREADS = 8


def test_first_search_from_8_threads_builds_one_embedder_and_loads_one_model(
    vector_index: Path, counting_backend: str
) -> None:
    settings = _settings(vector_index, embedding={"backend": counting_backend})
    for trial in range(TRIALS):
        _BUILT.clear()
        hs = HybridSearch(settings)
        barrier = threading.Barrier(THREADS)
        errors: list[BaseException] = []
        results: list[list[str]] = []

        def first_search() -> None:
            try:
                barrier.wait()
                resp = hs.search("how does the orrery retry a job", top_k=3)
                results.append([r.resource_id for r in resp.results])
                assert not resp.degraded, resp.reasons
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=first_search) for _ in range(THREADS)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            hs.close()
        assert errors == [], f"trial {trial}: {errors!r}"
        assert len(_BUILT) == 1, f"trial {trial}: {len(_BUILT)} embedders were built"
        assert _BUILT[0].loaded, f"trial {trial}: the model was never loaded"
        assert len(results) == THREADS and all(r == results[0] for r in results), results


def test_each_part_is_built_once(vector_index: Path) -> None:
    with Components(_settings(vector_index)) as parts:
        assert parts.embedder() is parts.embedder()
        assert parts.dense_index() is parts.dense_index()
        assert parts.judge() is parts.judge()
        assert parts.writer() is parts.writer()
        assert parts.retriever("sag2") is parts.retriever("sag2")
        assert parts.retriever("sag2").judge is parts.judge()  # type: ignore[attr-defined]


# -- no model where none is needed -------------------------------------------------------------

_CHILD = """
import json, sys, time
from hybridsag.cli import main
data = sys.argv[1]
t0 = time.perf_counter()
rc_delete = main(["--data-dir", data, "delete", "beta", "--json"])
rc_plan = main(["--data-dir", data, "reconcile", "--dry-run", "--json"])
rc_doctor = main(["--data-dir", data, "doctor", "--json"])
from hybridsag import HybridSearch, Settings
with HybridSearch(Settings(data_dir=data)) as hs:
    disabled, enabled = hs.disable("gamma"), hs.enable("gamma")
print(json.dumps({
    "rc": [rc_delete, rc_plan, rc_doctor],
    "toggled": [disabled, enabled],
    "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules),
}))
"""


def _run_child(code: str, data: Path | str, cwd: Path) -> tuple[Any, str]:
    """Run ``code`` in a fresh Python (the packaged model configured, no other HYBRIDSAG_
    variable) with ``data`` as its argument: the JSON of its last stdout line, and its stderr."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HYBRIDSAG_")}
    env["HYBRIDSAG_EMBEDDING__MODEL"] = MODEL
    proc = subprocess.run(
        [sys.executable, "-c", code, str(data)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_delete_disable_reconcile_plan_and_doctor_never_import_torch(
    vector_index: Path, tmp_path: Path
) -> None:
    import shutil

    data = tmp_path / "copy"
    shutil.copytree(vector_index, data)
    with Components(_settings(data)) as parts:
        dense = parts.stored_dense_index()
        assert dense is not None
        before = dense.count()
    out, stderr = _run_child(_CHILD, data, tmp_path)
    assert out == {"rc": [0, 0, 0], "toggled": [True, True], "heavy": []}, stderr
    with Components(_settings(data)) as parts:  # the delete removed the vectors, not only rows
        dense = parts.stored_dense_index()
        assert dense is not None and dense.count() == before - 1


_LEXICAL_CHILD = """
import io, json, sys
from hybridsag.cli import main
data = sys.argv[1]
runs = {}
for name, argv in {
    "bm25": ["search", "orrery scheduler", "--paths", "bm25", "--json"],
    "title": ["search", "Gamma FAQ", "--paths", "title", "--json"],
    "list": ["list", "--json"],
    "show": ["show", "beta", "--json"],
}.items():
    out = io.StringIO()
    rc = main(["--data-dir", data, *argv], out=out)
    runs[name] = [rc, out.getvalue()]
heavy = ("torch", "transformers", "sentence_transformers", "onnxruntime", "pymilvus",
         "milvus_lite", "grpc", "pandas", "numpy", "jieba", "httpx", "hybridsag.ingest.writer",
         "hybridsag.vectors.index", "hybridsag.vectors.milvus_dense")
print(json.dumps({"runs": runs, "heavy": sorted(m for m in heavy if m in sys.modules)}))
"""


def test_lexical_searches_list_and_show_import_no_model_milvus_nor_numpy(
    vector_index: Path, tmp_path: Path
) -> None:
    """A bm25 or title search, ``list`` and ``show`` of a data dir that holds vectors (the dense
    path on) load neither a model nor Milvus, nor numpy, jieba (English text), httpx (no remote
    model is called: the search's remote meter needs no HTTP client) or the write path: what a
    cold CLI process pays for them is the lexical work alone."""
    import shutil

    data = tmp_path / "copy"
    shutil.copytree(vector_index, data)
    out, stderr = _run_child(_LEXICAL_CHILD, data, tmp_path)
    assert out["heavy"] == [], stderr
    assert {name: rc for name, (rc, _) in out["runs"].items()} == dict.fromkeys(out["runs"], 0)
    bm25 = json.loads(out["runs"]["bm25"][1])
    assert bm25["paths"] == ["bm25"] and bm25["results"][0]["resource_id"] == "beta"
    title = json.loads(out["runs"]["title"][1])
    assert title["results"][0]["resource_id"] == "gamma"
    assert {r["resource_id"] for r in json.loads(out["runs"]["list"][1])} == set(DOCS)
    assert json.loads(out["runs"]["show"][1])["resource_id"] == "beta"


_PARSER_CHILD = """
import json, sys
from hybridsag.cli import build_parser
parser = build_parser()
commands = {argv[0]: parser.parse_args(argv).fn.__name__
            for argv in (["ab", "list"], ["reconcile", "--dry-run"], ["audit"], ["serve"])}
behind = ("hybridsag.ab.offline", "hybridsag.ab.online", "hybridsag.ab.report",
          "hybridsag.ab.events", "hybridsag.ab.arms", "hybridsag.consistency.reconciler",
          "hybridsag.consistency.plan", "hybridsag.consistency.scheduler", "hybridsag.backend",
          "hybridsag.search", "hybridsag.settings", "pydantic")
print(json.dumps({"commands": commands, "behind": sorted(m for m in behind if m in sys.modules)}))
"""


def test_building_the_parser_imports_no_subcommand_implementation(tmp_path: Path) -> None:
    """The parser has every command the ``hybridsag.commands`` entry points add, and building
    it imports only their ``register`` modules: the A/B experiments, reports and offline
    compare, the reconciler, the backend and the settings load when a command runs."""
    out, stderr = _run_child(_PARSER_CHILD, tmp_path, tmp_path)
    assert out["commands"] == {
        "ab": "cmd_ab_list", "reconcile": "cmd_reconcile", "audit": "cmd_audit", "serve": "cmd_serve"
    }  # fmt: skip
    assert out["behind"] == [], stderr


_SERVER_CHILD = """
import io, json, os, sys
from hybridsag.cli import main
os.environ["HYBRIDSAG_SERVER__CLIENT_TOKEN"] = "{token}"
out = io.StringIO()
rc = main(["--server", sys.argv[1], "search", "orrery scheduler", "--json"], out=out)
behind = ("hybridsag.search", "hybridsag.remote_calls", "hybridsag.paths.bm25", "jieba", "numpy",
          "pymilvus", "torch", "onnxruntime", "hybridsag.components", "hybridsag.lexical.index",
          "hybridsag.lexical.contract", "hybridsag.lexical.queries", "hybridsag.paths.base")
print(json.dumps({{"rc": rc, "response": json.loads(out.getvalue()),
                  "behind": sorted(m for m in behind if m in sys.modules)}}))
"""


def test_a_search_through_the_service_loads_nothing_behind_the_client(tmp_path: Path) -> None:
    """``hybridsag --server URL search`` needs the settings, the client (httpx) and the result
    types it renders (:mod:`hybridsag.results`): not the search façade, its paths, the
    composition root (the service checks path and judge names), the lexical index, jieba,
    numpy, Milvus nor a model."""
    from tests.servicesupport import ADMIN, running_service

    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False},
    )
    with HybridSearch(settings) as hs:
        for rid, (title, text) in DOCS.items():
            hs.ingest(rid, text, title=title)
    with running_service(settings, reconciler=False) as url:
        out, stderr = _run_child(_SERVER_CHILD.format(token=ADMIN), url, tmp_path)
    assert out["rc"] == 0, stderr
    assert out["response"]["results"][0]["resource_id"] == "beta", out["response"]
    assert out["behind"] == [], stderr


def test_no_vectors_recorded_means_nothing_to_remove(tmp_path: Path) -> None:
    with Components(_settings(tmp_path / "fresh")) as parts:
        assert parts.stored_dense_index() is None
        assert not parts.writer().embeds or parts.writer() is not None
    with Components(Settings(data_dir=tmp_path / "off", embedding={"model": "none"})) as parts:
        assert parts.stored_dense_index() is None and not parts.dense_enabled


# -- a recall path from a test module, in one registration -------------------------------------


class _NewestFirst:
    """A toy recall path: the first chunk of every visible resource, newest resource first."""

    name = "newest"

    def __init__(self, parts: Any) -> None:
        self.store = parts.store

    def retrieve(
        self, query: str, *, limit: int, filters: Filters, peers: Peers | None = None
    ) -> PathResult:
        conn = self.store.connection()
        filter_sql, params = filters.sql("r")
        rows = conn.execute(
            f"SELECT r.resource_id FROM resources r WHERE {filter_sql} ORDER BY r.id DESC",
            params,
        ).fetchall()
        first = self.store.first_chunks([row[0] for row in rows])
        hits = [
            Hit(first[rid][0], self.name, i, float(-i), float(-i), {"resource_id": rid})
            for i, rid in enumerate((row[0] for row in rows if row[0] in first), start=1)
            if i <= limit
        ]
        return PathResult(hits=hits)


@pytest.fixture
def toy_path() -> Iterator[str]:
    register_path(PathSpec("newest", _NewestFirst, "toy: newest resource first"))
    try:
        yield "newest"
    finally:
        unregister_path("newest")


def test_a_registered_path_runs_in_search_and_in_fused_eval(tmp_path: Path, toy_path: str) -> None:
    settings = Settings(data_dir=tmp_path / "d", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        for rid, (title, text) in DOCS.items():
            hs.ingest(rid, text, title=title)
        alone = hs.search("anything at all", paths=[toy_path], top_k=3)
        assert [r.resource_id for r in alone.results] == ["gamma", "beta", "alpha"]
        fused = hs.search("orrery scheduler retries", paths=["bm25", toy_path], top_k=3)
        assert fused.paths == ("bm25", toy_path)
        assert any(toy_path in r.paths and "bm25" in r.paths for r in fused.results)
        with pytest.raises(
            QueryError, match=r"unknown path 'nope'; valid: bm25, sag2, dense, title, newest"
        ):
            hs.search("x", paths=["nope"])
    data = tmp_path / "set"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": rid, "title": title, "text": text}) + "\n"
            for rid, (title, text) in DOCS.items()
        ),
        "utf-8",
    )
    (data / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "how does the scheduler retry"}) + "\n", "utf-8"
    )
    (data / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tbeta\t1\n", "utf-8")
    summary = run_eval(
        settings,
        data,
        paths=("bm25", toy_path, "fused"),
        fuse=("bm25", toy_path),
        out=tmp_path / "o",
    )
    assert set(summary["paths"]) == {"bm25", toy_path, "fused"}
    assert summary["fused_paths"] == ["bm25", toy_path]
    assert summary["paths"][toy_path]["recall@2"] == 1.0  # beta is the second newest


# -- FTS5 SQL has one owner ----------------------------------------------------------------------

FTS_NAMES = re.compile(r"\b(chunks_fts|titles_fts|chunks_vocab)\b")
SQL_WORDS = re.compile(r"\b(SELECT|INSERT|DELETE|UPDATE|CREATE|MATCH|FROM|JOIN)\b")


def sql_constants(source: str, *patterns: re.Pattern[str]) -> list[tuple[int, str]]:
    """String constants of ``source`` (with their lines) that match every one of ``patterns``."""
    import ast

    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and all(p.search(node.value) for p in patterns)
    ]


def fts_statements(source: str) -> list[tuple[int, str]]:
    """String constants of ``source`` that are SQL naming an FTS5 table or view."""
    return sql_constants(source, FTS_NAMES, SQL_WORDS)


def test_only_the_lexical_module_holds_fts5_sql() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{lineno}: {text.strip()[:80]}"
        for folder in ("plugin", "consistency")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != ROOT / "plugin" / "lexical" / "fts5.py"
        for lineno, text in fts_statements(path.read_text("utf-8"))
    ]
    assert offenders == []
    # and the check can fail
    assert fts_statements('x = "DELETE FROM chunks_fts WHERE rowid = ?"') == [
        (1, "DELETE FROM chunks_fts WHERE rowid = ?")
    ]
    assert fts_statements('"""rows of ``chunks_fts`` without a chunk row"""') == []


# -- the ledger's SQL has one owner -------------------------------------------------------------

LEDGER_TABLE = r"(resources|chunks|chunk_vectors|tombstones|journal|meta)\b"
LEDGER_SQL = re.compile(rf"\b(FROM|INTO|UPDATE|JOIN)\s+{LEDGER_TABLE}")
LEDGER_WRITE = re.compile(rf"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{LEDGER_TABLE}")
#: where a ledger table may be read: the schema's migrations (schema), meta and a search's reads
#: (store), and the reads the lexical engines make of chunks and resources (index_reads: the
#: engines join their own rows with them through it)
LEDGER_READERS = (
    "plugin/records/ledger.py",
    "plugin/records/store.py",
    "plugin/records/schema.py",
    "plugin/records/index_reads.py",
)
#: where one may be written: the ledger (the record's state), the store (meta) and the schema
#: (its migrations)
LEDGER_WRITERS = (
    "plugin/records/ledger.py",
    "plugin/records/store.py",
    "plugin/records/schema.py",
)


def ledger_statements(source: str, pattern: re.Pattern[str] = LEDGER_SQL) -> list[tuple[int, str]]:
    """String constants of ``source`` that are SQL on a ledger table (matching ``pattern``)."""
    return sql_constants(source, pattern)


def test_only_the_ledger_writes_the_records_state() -> None:
    """SQL on ``resources``, ``chunks``, ``chunk_vectors``, ``tombstones``, ``journal`` and
    ``meta`` lives in ``ledger.py`` (every write of the record's state and the reads of the
    write path and the reconciler), ``store.py`` (``meta``, the reads a search makes) and
    ``schema.py`` (the schema and its migrations); ``index_reads.py`` may read them (the reads the lexical engines make
    of chunks and resources), never write them. Any other module of ``plugin/`` or
    ``consistency/`` holding such SQL fails."""
    offenders = []
    for folder in ("plugin", "consistency"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            source = path.read_text("utf-8")
            if name not in LEDGER_READERS:
                found = ledger_statements(source)
            elif name not in LEDGER_WRITERS:
                found = ledger_statements(source, LEDGER_WRITE)
            else:
                continue
            offenders += [f"{name}:{lineno}: {text.strip()[:80]}" for lineno, text in found]
    assert offenders == []
    # and the check can fail
    assert ledger_statements('x = "DELETE FROM journal WHERE id = ?"') == [
        (1, "DELETE FROM journal WHERE id = ?")
    ]
    assert ledger_statements('"SELECT 1 FROM chunks_fts"') == []
    assert ledger_statements('"the chunks of a resource"') == []
    fts_delete = '"DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks)"'
    assert ledger_statements(fts_delete, LEDGER_WRITE) == []


def _squash(sql: str) -> str:
    return " ".join(sql.split())


def test_generated_search_sql() -> None:
    assert _squash(build_tops_sql(2, "r.status IN (?)")) == (
        "SELECT top.q, top.id, top.s, c.chunk_id, c.resource_id, EXISTS( SELECT 1 FROM "
        "resources r WHERE r.resource_id = c.resource_id AND r.version = c.version AND "
        "r.status IN (?)) FROM (SELECT 0 AS q, id, s FROM (SELECT rowid AS id, "
        "bm25(chunks_fts, ?, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s "
        "LIMIT ?) UNION ALL SELECT 1 AS q, id, s FROM (SELECT rowid AS id, "
        "bm25(chunks_fts, ?, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s "
        "LIMIT ?)) AS top LEFT JOIN chunks c ON c.id = top.id"
    )
    assert _squash(build_title_search_sql("1")) == (
        "SELECT r.resource_id, top.s FROM (SELECT rowid AS id, bm25(titles_fts) AS s FROM "
        "titles_fts WHERE titles_fts MATCH ?) AS top JOIN resources r ON r.id = top.id "
        "WHERE 1 ORDER BY top.s, r.id LIMIT ?"
    )
    assert "WHERE resource_id IN (?,?,?))" in _squash(build_best_chunks_sql(3))


# -- nested transactions -----------------------------------------------------------------------


def test_atomic_nests_with_savepoints(tmp_path: Path) -> None:
    with Components(Settings(data_dir=tmp_path / "d", embedding={"model": "none"})) as parts:
        store = parts.store
        with store.atomic() as conn:
            conn.execute("INSERT INTO meta VALUES ('outer', '1')")
            with pytest.raises(RuntimeError), store.atomic() as inner:
                inner.execute("INSERT INTO meta VALUES ('inner', '1')")
                raise RuntimeError("undo the inner part only")
            with store.atomic() as kept:
                kept.execute("INSERT INTO meta VALUES ('kept', '1')")
        assert (store.get_meta("outer"), store.get_meta("inner"), store.get_meta("kept")) == (
            "1",
            None,
            "1",
        )
        with pytest.raises(RuntimeError), store.atomic() as conn:
            conn.execute("INSERT INTO meta VALUES ('gone', '1')")
            with store.atomic() as inner:
                inner.execute("INSERT INTO meta VALUES ('gone2', '1')")
            raise RuntimeError("the outer failure undoes the released savepoint too")
        assert store.get_meta("gone") is None and store.get_meta("gone2") is None


# -- errors reported, not dropped --------------------------------------------------------------


def test_a_judge_without_its_query_embedding_is_reported_as_degraded(tmp_path: Path) -> None:
    def vectors(ids: Sequence[str]) -> dict[str, np.ndarray]:
        return {cid: np.full(4, 0.5, dtype=np.float32) for cid in ids}

    def no_embedding(question: str) -> np.ndarray:
        raise DenseError("the embedding service is down")

    settings = Settings(data_dir=tmp_path / "d", embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        judge = FeatureJudge(
            tokens=hs.components.tokenizer.tokenize, vectors=vectors, embed_query=no_embedding
        )
    with HybridSearch(settings, judge=judge) as hs:
        for rid, (title, text) in DOCS.items():
            hs.ingest(rid, text, title=title)
        resp = hs.search("orrery scheduler", paths=["sag2"])
        assert resp.results, "the path still answers"
        assert resp.degraded
        assert (
            "judged without embeddings: DenseError: the embedding service is down"
            in (resp.reasons["sag2"])
        )


class _BrokenDense(FaultyDense):
    """A dense index whose writes and deletes fail (the dependency fails, the write path is
    real)."""

    def upsert(self, rows: Sequence[VectorRow]) -> None:
        raise DenseError("upsert refused")

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        raise DenseError("delete refused")

    def delete_resource(self, resource_id: str) -> None:
        raise DenseError("delete refused")

    def delete_resources(self, resource_ids: Sequence[str]) -> None:
        raise DenseError("delete refused")


def test_a_failed_compensation_is_noted_on_the_error(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "d")
    broken = _BrokenDense(own_dense_index(settings))
    with HybridSearch(settings, embedder=shared_embedder(), dense_index=broken) as hs:
        with pytest.raises(DenseError, match="upsert refused") as info:
            hs.ingest("alpha", DOCS["alpha"][1], title=DOCS["alpha"][0])
        notes = getattr(info.value, "__notes__", [])
        assert any("compensation left 1 vector(s) to the reconciler" in n for n in notes), notes
        # the claim stays for the reconciler (its journal row names it); nothing is visible
        row = (
            hs.components.store.connection()
            .execute("SELECT count(*) FROM journal WHERE resource_id = 'alpha'")
            .fetchone()
        )
        assert row[0] == 1
        assert hs.search("orrery", paths=["bm25"]).results == ()


class _OtherVectors(SentenceTransformerEmbedder):
    """The same model, presented as a backend whose vectors differ (another fingerprint)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.fingerprint = f"{settings.embedding.model}|other-int4"


def test_an_index_refuses_an_embedder_that_makes_other_vectors(vector_index: Path) -> None:
    from hybridsag.errors import IndexMismatchError

    EMBEDDERS["other"] = _OtherVectors
    try:
        with Components(_settings(vector_index)) as parts:
            assert parts.store.get_meta("embedding_fingerprint") == f"{MODEL}|sentence-transformers-fp32"
        with Components(_settings(vector_index, embedding={"backend": "other"})) as parts:
            assert parts.stored_dense_index() is not None  # opening needs no embedder
            with pytest.raises(IndexMismatchError, match=r"other-int4.*rebuild the index"):
                parts.embedder()
    finally:
        del EMBEDDERS["other"]


def test_vectors_of_the_first_int8_recipe_are_stale(tmp_path: Path) -> None:
    """An index whose vectors came from the first int8 export (per-tensor scales, recorded as
    ``onnx-int8``) keeps the int8 backend under auto, whose row-wise export makes other
    vectors: opening it for embedding says to rebuild instead of mixing the two."""
    from hybridsag.errors import IndexMismatchError

    with Components(_settings(tmp_path / "data")) as parts:
        parts.store.set_meta("embedding_model", MODEL)
        parts.store.set_meta("embedding_fingerprint", f"{MODEL}|onnx-int8")
    with Components(_settings(tmp_path / "data")) as parts:
        assert parts.embedding_backend() == "onnx"
        with pytest.raises(IndexMismatchError, match=r"onnx-int8'.*onnx-int8-rowwise-w7.*rebuild"):
            parts.embedder()


# -- embedding.backend = "auto" ------------------------------------------------------------------


def test_auto_keeps_the_backend_an_index_was_built_with(vector_index: Path) -> None:
    """The default backend reopens a torch-built index with torch (another backend would give
    other vectors), without being told."""
    with Components(_settings(vector_index)) as parts:
        assert parts.settings.embedding.backend == "auto"
        assert parts.embedding_backend() == "sentence-transformers"
        assert parts.embedder().fingerprint == f"{MODEL}|sentence-transformers-fp32"


def test_auto_gives_a_new_index_the_onnx_backend(tmp_path: Path) -> None:
    """A new index under the default backend is built with ONNX float32, the packaged BERT
    model's fused graph (exported once into the user's cache: the session's stand-in), and
    finds by meaning; reopened, it keeps that graph."""
    with HybridSearch(_settings(tmp_path / "data")) as hs:
        for rid, (title, text) in DOCS.items():
            hs.ingest(rid, text, title=title)
        assert hs.components.store.get_meta("embedding_fingerprint") == f"{MODEL}|onnx-fp32-fused"
        hits = hs.search("how does the scheduler try a job again?", paths=["dense"]).results
        assert hits and hits[0].resource_id == "beta"
    with Components(_settings(tmp_path / "data")) as parts:
        assert parts.embedding_backend() == "onnx"
        assert parts.embedder().fingerprint == f"{MODEL}|onnx-fp32-fused"


_READ_SIDE_CHILD = """
import io, json, sys
from hybridsag.cli import main
data = sys.argv[1]
out = io.StringIO()
rc = main(["--data-dir", data, "search", "orrery scheduler", "--json"], out=out)
write_side = ("hybridsag.ingest.chunker", "hybridsag.ingest.writer", "hybridsag.ingest.folders", "hybridsag.ingest.sources",
              "hybridsag.ingest.manifest")
print(json.dumps({"rc": rc, "response": json.loads(out.getvalue()),
                  "write_side": sorted(m for m in write_side if m in sys.modules)}))
"""


def test_a_fused_search_never_loads_the_write_side(vector_index: Path, tmp_path: Path) -> None:
    """A search with every default path (sag2 reads sentences of stored chunks, the evidence
    set too) loads neither the chunker nor the write path: the sentence splitter both sides use
    is :mod:`hybridsag.fusion.text.sentences`."""
    import shutil

    data = tmp_path / "copy"
    shutil.copytree(vector_index, data)
    out, stderr = _run_child(_READ_SIDE_CHILD, data, tmp_path)
    assert out["rc"] == 0, stderr
    assert {"sag2", "dense"} <= set(out["response"]["paths"])
    assert out["response"]["results"], out["response"]
    assert out["write_side"] == [], stderr
