"""Crash injection at every step of ingest and delete, then one reconcile.

Every scenario starts from a copy of one base corpus (real SQLite, real Milvus Lite, the real
packaged all-MiniLM-L6-v2 model) and breaks one write at one step:

- an exception raised there (in this process, by the step hook, or inside ``dense.upsert`` after
  half of the rows were written), or
- a child process SIGKILLed at that step (``tests/consistency_crash_child.py``). Milvus Lite lets
  one process at a time open a data dir, so children run on their own copies while this process
  has none of them open, and this process opens each copy only after its child is dead.

Then one ``Reconciler.run()``: afterwards an oracle written apart from the reconciler
(``check_consistent``) finds no orphan of any kind, a second plan is empty, and no ready resource
was lost: a resource whose re-ingest failed is still ready with its old text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.consistency import Reconciler
from hybridsag.errors import DenseError
from hybridsag.search import HybridSearch

from tests.consistency_support import (
    FaultyDense,
    InjectedFault,
    check_consistent,
    clear_env,
    make_settings,
    open_search,
    own_dense_index,
)
from tests.pgserver import PostgresServer, clone_database, new_database

ROOT = Path(__file__).resolve().parents[2]


def _two_chunks(topic: str, word: str) -> str:
    """About 700 characters in two paragraphs: the chunker (512-char target) makes 2 chunks."""
    first = " ".join(
        f"The {topic} note {i} says that {word} matters for sentence number {i} of this part."
        for i in range(4)
    )
    second = " ".join(
        f"Later the {topic} record {i} adds that {word} helps again in closing line {i}."
        for i in range(4)
    )
    return f"{first}\n\n{second}\n"


BASE = {
    name: f"The {name} resource says that {name}fruit grows in orchard number {n}."
    for n, name in enumerate(
        ["alpha", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    )
}
BASE["beta"] = _two_chunks("beta", "oldbetaword")
NEW_TEXT = _two_chunks("newcomer", "newcomerword")
REINGEST_TEXT = _two_chunks("beta", "newbetaword")

# (operation, target, text) by scenario name
OPS = {
    "ingest-new": ("ingest", "newcomer", NEW_TEXT),
    "reingest": ("ingest", "beta", REINGEST_TEXT),
    "delete": ("delete", "gamma", ""),
}
STEPS = {
    "ingest-new": ("claim", "vectors", "upsert", "commit"),
    "reingest": ("claim", "vectors", "upsert", "commit"),
    "delete": ("tombstone", "vectors_delete", "purge"),
}
SCENARIOS = [(op, step) for op, steps in STEPS.items() for step in steps]
IDS = [f"{op}-{step}" for op, step in SCENARIOS]

# What the plan must find before the reconcile, by mode and scenario. An exception is compensated
# by the write path itself (nothing left) except after the tombstone of a delete; a kill leaves
# the claim (stuck: its owner is gone) or the tombstoned resource for the reconciler.
EXPECT_EXCEPTION = {
    ("delete", "vectors_delete"): {"tombstoned_leftovers": 1},
    ("delete", "purge"): {"tombstoned_leftovers": 1},
}
EXPECT_KILL = {
    ("ingest-new", "vectors"): {"stuck_indexing": 1},
    ("ingest-new", "upsert"): {"stuck_indexing": 1},
    ("ingest-new", "commit"): {"stuck_indexing": 1},
    ("reingest", "vectors"): {"stuck_indexing": 1},
    ("reingest", "upsert"): {"stuck_indexing": 1},
    ("reingest", "commit"): {"stuck_indexing": 1},
    ("delete", "vectors_delete"): {"tombstoned_leftovers": 1},
    ("delete", "purge"): {"tombstoned_leftovers": 1},
}
# Vectors of the broken claim that the plan must count (kill mode): none before the upsert, half
# of the two chunks inside it, both at commit.
EXPECT_KILL_CLAIM_VECTORS = {"vectors": 0, "upsert": 1, "commit": 2}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base corpus, indexed once and closed (copied per scenario)."""
    clear_env()
    data = tmp_path_factory.mktemp("crash-template") / "data"
    with open_search(make_settings(data)) as hs:
        report = hs.ingest_documents(_docs(BASE))
        assert report.indexed == len(BASE)
        assert hs.components.dense_index().count() == len(BASE) + 1  # beta has two chunks
    return data


def _docs(texts: dict[str, str]) -> list:
    from hybridsag.documents import make_document

    return [make_document(rid, text, title=rid.title()) for rid, text in texts.items()]


def _copy(template: Path, dst: Path) -> Path:
    shutil.copytree(template, dst)
    return dst


def _expected_after(op: str, step: str) -> dict[str, str]:
    """resource id -> text of every resource that must be ready after the reconcile."""
    ready = dict(BASE)
    if op == "delete" and step != "tombstone":
        del ready["gamma"]  # the delete was committed (tombstone): reconcile finishes it
    return ready


def _reconcile_and_check(
    data: Path,
    op: str,
    step: str,
    expect_before: dict[str, int],
    store_url: str | None = None,
    lexical: str = "fts5",
) -> dict:
    settings = make_settings(data, store_url, lexical=lexical)
    with open_search(settings) as hs:
        rec = Reconciler(hs.components)
        plan = rec.plan()
        found = {k: v for k, v in plan.counts().items() if v}
        assert found == expect_before, f"plan before reconcile: {found}"
        report = rec.run()
        assert report["ok"], report["errors"]
        assert not any(report["counts_after"].values()), report["counts_after"]
        assert rec.plan().is_empty
        assert check_consistent(hs) == []
        _check_resources(hs, op, step)
    return {"plan": plan, "report": report}


def _check_resources(hs: HybridSearch, op: str, step: str) -> None:
    ready = _expected_after(op, step)
    conn = hs.components.store.connection()
    rows = {
        r["resource_id"]: r
        for r in conn.execute("SELECT resource_id, status, version, content_sha256 FROM resources")
    }
    assert set(rows) == set(ready), sorted(set(rows) ^ set(ready))
    for rid, text in ready.items():
        assert rows[rid]["status"] == "ready"
        assert rows[rid]["content_sha256"] == sha(text), f"{rid} lost its text"
        assert rows[rid]["version"] == 1
        assert "".join(c.text for c in hs.components.store.resource_chunks(rid))  # its chunks are there
    if op == "delete" and step != "tombstone":
        tomb = conn.execute("SELECT version FROM tombstones WHERE resource_id = 'gamma'").fetchone()
        assert tomb is not None and tomb[0] == 1
    if op == "reingest":
        # the old text is still what every path finds
        hits = hs.search("oldbetaword", top_k=5).results
        assert hits and hits[0].resource_id == "beta"
        assert not hs.search("newbetaword", top_k=5, paths=["bm25"]).results


# -- (a) an exception at each step --------------------------------------------------------------


@pytest.mark.parametrize(("op", "step"), SCENARIOS, ids=IDS)
def test_exception_at_step_then_reconcile(
    template: Path, tmp_path: Path, op: str, step: str
) -> None:
    _exception_then_reconcile(_copy(template, tmp_path / "data"), None, op, step)


@pytest.fixture(scope="module")
def pg_template(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> tuple[Path, str]:
    """The base corpus in a PostgreSQL store (and its Milvus Lite dir), indexed once and closed."""
    clear_env()
    data = tmp_path_factory.mktemp("crash-pg-template") / "data"
    url = new_database(postgres_server)
    with open_search(make_settings(data, url)) as hs:
        assert hs.ingest_documents(_docs(BASE)).indexed == len(BASE)
    return data, url


@pytest.mark.parametrize(("op", "step"), SCENARIOS, ids=IDS)
def test_exception_at_step_then_reconcile_on_postgres(
    pg_template: tuple[Path, str], postgres_server: PostgresServer, tmp_path: Path, op: str,
    step: str,
) -> None:
    data, url = pg_template
    copy = _copy(data, tmp_path / "data")
    _exception_then_reconcile(copy, clone_database(postgres_server, url), op, step)


@pytest.fixture(scope="module")
def milvus_lexical_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base corpus with the lexical index on Milvus full-text search, indexed once."""
    clear_env()
    data = tmp_path_factory.mktemp("crash-milvus-lexical-template") / "data"
    with open_search(make_settings(data, lexical="milvus")) as hs:
        assert hs.ingest_documents(_docs(BASE)).indexed == len(BASE)
    return data


@pytest.mark.parametrize(("op", "step"), SCENARIOS, ids=IDS)
def test_exception_at_step_then_reconcile_with_milvus_lexical(
    milvus_lexical_template: Path, tmp_path: Path, op: str, step: str
) -> None:
    copy = _copy(milvus_lexical_template, tmp_path / "data")
    _exception_then_reconcile(copy, None, op, step, lexical="milvus")


def _exception_then_reconcile(
    data: Path, store_url: str | None, op: str, step: str, lexical: str = "fts5"
) -> None:
    kind, target, text = OPS[op]
    settings = make_settings(data, store_url, lexical=lexical)

    def hook(name: str, resource_id: str) -> None:
        if name == step and resource_id == target:
            raise InjectedFault(f"injected at {name} of {resource_id}")

    dense = None
    if step == "upsert":
        inner = own_dense_index(settings)
        dense = FaultyDense(inner, upsert_fault="raise", only_resource=target)
    with open_search(settings, dense_index=dense, step_hook=hook) as hs:
        with pytest.raises((InjectedFault, DenseError)):
            if kind == "ingest":
                hs.ingest(target, text, title=target.title())
            else:
                hs.delete(target)
        if kind == "delete" and step != "tombstone":
            # invisible on every path from the tombstone on, before any reconcile
            assert hs.components.store.get_resource("gamma").status == "deleting"
            assert all(r.resource_id != "gamma" for r in hs.search("gammafruit").results)
    _reconcile_and_check(
        data, op, step, EXPECT_EXCEPTION.get((op, step), {}), store_url, lexical
    )


# -- (b) a child process SIGKILLed at each step ---------------------------------------------------


# A guard against a hung child, not a speed check: the 8 ingest children load torch and the model
# (the 3 delete children load neither), and on a loaded 2-core machine they need minutes;
# pytest-timeout (600 s) stays the outer bound.
HUNG_CHILDREN_S = 540.0


@pytest.fixture(scope="module")
def killed(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Run every kill scenario in its own child process on its own copy (3 at a time)."""
    base = tmp_path_factory.mktemp("crash-kill")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    pending = []
    for op, step in SCENARIOS:
        data = _copy(template, base / f"{op}-{step}")
        kind, target, text = OPS[op]
        cmd = [sys.executable, "-m", "tests.consistency_crash_child", str(data), kind, step,
               target, text]
        pending.append(((op, step), data, cmd))
    results: dict[tuple[str, str], tuple[Path, int, str]] = {}
    running: list[tuple[tuple[str, str], Path, subprocess.Popen[bytes]]] = []
    started = time.monotonic()
    try:
        while pending or running:
            while pending and len(running) < 3:
                key, data, cmd = pending.pop(0)
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
                running.append((key, data, proc))
            key, data, proc = running[0]
            left = HUNG_CHILDREN_S - (time.monotonic() - started)
            _, err = proc.communicate(timeout=max(10.0, left))
            running.pop(0)
            results[key] = (data, proc.returncode, err.decode("utf-8", "replace")[-2000:])
    finally:  # a hung child fails the fixture; none is left running behind it
        for _, _, proc in running:
            proc.kill()
            proc.communicate()
    yield results


@pytest.mark.slow
@pytest.mark.parametrize(("op", "step"), SCENARIOS, ids=IDS)
def test_sigkill_at_step_then_reconcile(killed: dict, op: str, step: str) -> None:
    data, returncode, stderr = killed[(op, step)]
    assert returncode == -9, f"child was not killed at {step} (exit {returncode}): {stderr}"
    out = _reconcile_and_check(data, op, step, EXPECT_KILL.get((op, step), {}))
    plan = out["plan"]
    if step in EXPECT_KILL_CLAIM_VECTORS:
        (claim,) = plan.stuck_indexing
        assert claim.reason == "owner gone"
        assert len(claim.vectors) == EXPECT_KILL_CLAIM_VECTORS[step]
        assert claim.never_committed == (op == "ingest-new")
