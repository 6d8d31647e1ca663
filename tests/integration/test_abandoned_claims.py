"""A claim of a process SIGKILLed mid-ingest is released by the next write or the next start of
the service, not by a reconcile (issue 23 item 14).

A real child process (``tests/consistency_crash_child.py``) ingests and SIGKILLs itself at one
step of the write path, leaving its claim: a pending version (or a never-committed ``indexing``
row) and a journal row naming its owner (``host:pid:start:boot``) and chunk count. Then, in this
process and with no reconcile run: the next write of that id (or the first write of this
process, whatever its ids) releases the dead claim through the write path's own release, the
vectors it wrote included, and a reconcile plan afterwards finds nothing at all. A claim of
another host is left alone; a claim whose pid now belongs to another process is released all
the same (the owner id holds the process start time). Real SQLite, Milvus Lite and the packaged
model for the dense cases; the owner cases run lexical-only (no model) to stay fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hybridsag.consistency import Reconciler
from hybridsag.documents import make_document
from hybridsag.search import HybridSearch

from tests.consistency_support import check_consistent, clear_env, make_settings, open_search

ROOT = Path(__file__).resolve().parents[2]


def _two_chunks(word: str) -> str:
    """About 700 characters in two paragraphs: two chunks at the 512-character target."""
    first = " ".join(f"The note {i} says that {word} matters for sentence {i}." for i in range(6))
    second = " ".join(f"Later record {i} adds that {word} helps in line {i}." for i in range(6))
    return f"{first}\n\n{second}\n"


BASE = {f"doc{n}": f"Document {n} says that fruit{n} grows in orchard {n}." for n in range(4)}
BASE["beta"] = _two_chunks("oldbetaword")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _index(data: Path, *, model: str | None) -> None:
    settings = make_settings(data, model=model)
    docs = [make_document(r, t, title=r.title()) for r, t in BASE.items()]
    hs = open_search(settings) if model is None else HybridSearch(settings)
    with hs:
        assert hs.ingest_documents(docs).indexed == len(BASE)


@pytest.fixture(scope="module")
def dense_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clear_env()
    data = tmp_path_factory.mktemp("abandoned-dense") / "data"
    _index(data, model=None)
    return data


@pytest.fixture(scope="module")
def lexical_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clear_env()
    data = tmp_path_factory.mktemp("abandoned-lexical") / "data"
    _index(data, model="none")
    return data


def _killed_copy(template: Path, dst: Path, step: str, target: str, text: str,
                 *, lexical_only: bool = False) -> Path:
    """A copy of ``template`` where a child ingesting ``target`` was SIGKILLed at ``step``."""
    data = shutil.copytree(template, dst)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    flag = ["--lexical-only"] if lexical_only else []
    proc = subprocess.run(
        [sys.executable, "-m", "tests.consistency_crash_child", *flag, str(data), "ingest", step,
         target, text],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=540,
    )
    assert proc.returncode == -9, f"not killed at {step}: {proc.stderr.decode()[-2000:]}"
    return data


def _journal(hs: HybridSearch) -> list[tuple[str, int, dict]]:
    rows = hs.components.store.connection().execute(
        "SELECT resource_id, version, detail FROM journal ORDER BY id"
    )
    return [(r[0], r[1], json.loads(r[2]) if r[2] else {}) for r in rows]


def _stuck(hs: HybridSearch) -> list[tuple[str, str]]:
    plan = Reconciler(hs.components).plan()
    return [(c.resource_id, c.reason) for c in plan.stuck_indexing]


def _clean(hs: HybridSearch) -> None:
    """A reconcile would find nothing: no class, no claim pending."""
    plan = Reconciler(hs.components).plan()
    assert plan.is_empty, plan.counts()
    assert not plan.pending_claims


@pytest.mark.slow
@pytest.mark.parametrize("step", ["upsert", "commit"])
def test_the_next_write_of_a_killed_reingest_releases_its_claim(
    dense_template: Path, tmp_path: Path, step: str
) -> None:
    new = _two_chunks("newbetaword")
    data = _killed_copy(dense_template, tmp_path / "data", step, "beta", new)
    with open_search(make_settings(data)) as hs:
        (claim,) = _journal(hs)
        assert claim[:2] == ("beta", 2) and claim[2]["chunks"] == 2
        assert claim[2]["owner"].split(":")[0] == socket.gethostname()
        assert _stuck(hs) == [("beta", "owner gone")]
        vectors = {v for c, r, v in hs.components.dense_index().iter_entries() if r == "beta"}
        assert vectors == {1, 2}  # the dead claim wrote (some of) its vectors
        again = _two_chunks("thirdbetaword")
        assert hs.ingest("beta", again, title="Beta").indexed == 1  # no reconcile ran
        assert _journal(hs) == []
        _clean(hs)
        assert check_consistent(hs) == []
        rec = hs.components.store.get_resource("beta")
        assert (rec.status, rec.version, rec.pending_version) == ("ready", 2, None)
        assert rec.content_sha256 == sha(again)
        assert hs.search("thirdbetaword", paths=["dense"], top_k=1).results[0].resource_id == "beta"
        assert not hs.search("newbetaword", paths=["bm25"]).results


@pytest.mark.slow
def test_the_first_write_of_a_process_releases_every_dead_claim(
    dense_template: Path, tmp_path: Path
) -> None:
    data = _killed_copy(dense_template, tmp_path / "data", "commit", "newcomer",
                        _two_chunks("newcomerword"))
    with open_search(make_settings(data)) as hs:
        assert hs.components.store.get_resource("newcomer").status == "indexing"
        assert _stuck(hs) == [("newcomer", "owner gone")]
        assert hs.ingest("doc9", "Document nine is new.", title="Doc9").indexed == 1
        assert hs.components.store.get_resource("newcomer") is None  # never committed: dropped
        _clean(hs)
        assert check_consistent(hs) == []
        assert hs.ingest("newcomer", _two_chunks("newcomerword")).indexed == 1
        assert hs.components.store.get_resource("newcomer").version == 1
        _clean(hs)


def _set_owner(hs: HybridSearch, resource_id: str, owner: str) -> None:
    """Rewrite the owner id of a claim's journal row (as another host or a reused pid has it)."""
    with hs.components.store.atomic() as c:
        row = c.execute(
            "SELECT id, detail FROM journal WHERE resource_id = ?", (resource_id,)
        ).fetchone()
        detail = {**json.loads(row[1]), "owner": owner}
        c.execute("UPDATE journal SET detail = ? WHERE id = ?", (json.dumps(detail), row[0]))


def test_a_claim_whose_pid_was_reused_is_released_one_of_another_host_is_not(
    lexical_template: Path, tmp_path: Path
) -> None:
    data = _killed_copy(lexical_template, tmp_path / "reused", "commit", "doc1",
                        "Document one, new text.", lexical_only=True)
    with HybridSearch(make_settings(data, model="none")) as hs:
        ((rid, version, detail),) = _journal(hs)
        host, _pid, start, boot = detail["owner"].split(":")
        # the dead owner's pid now belongs to a live process (this one's parent), started later
        _set_owner(hs, "doc1", f"{host}:{os.getppid()}:{start}:{boot}")
        assert _stuck(hs) == [("doc1", "owner gone")]
        assert hs.ingest("doc1", "Document one, newer text.", title="Doc1").indexed == 1
        assert _journal(hs) == []
        _clean(hs)
        rec = hs.components.store.get_resource("doc1")
        assert (rec.version, rec.content_sha256) == (2, sha("Document one, newer text."))

    data = _killed_copy(lexical_template, tmp_path / "foreign", "commit", "doc2",
                        "Document two, new text.", lexical_only=True)
    with HybridSearch(make_settings(data, model="none")) as hs:
        ((rid, version, detail),) = _journal(hs)
        foreign = "another-host:" + detail["owner"].split(":", 1)[1]
        _set_owner(hs, "doc2", foreign)
        plan = Reconciler(hs.components).plan()
        assert [c.resource_id for c in plan.pending_claims] == ["doc2"]  # maybe still running
        assert hs.ingest("doc2", "Document two, newer text.", title="Doc2").indexed == 1
        assert [(r, v) for r, v, _d in _journal(hs)] == [("doc2", 2)]  # left to its host
        assert hs.components.store.get_resource("doc2").version == 3
        assert _stuck(hs) == [("doc2", "superseded")]  # its claim no longer stands


def test_a_service_started_on_a_dead_claim_releases_it_before_it_is_ready(
    lexical_template: Path, tmp_path: Path
) -> None:
    """The next start releases a dead process's claims (the service load benchmark found one
    ``stuck_indexing`` after two SIGKILLs and restarts with no write of that id since)."""
    from tests.servicesupport import ADMIN, running_service
    from tests.settings_support import clean_env_settings

    data = _killed_copy(lexical_template, tmp_path / "data", "commit", "newcomer",
                        _two_chunks("newcomerword"), lexical_only=True)
    settings = clean_env_settings(
        data_dir=data, embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False},
    )  # fmt: skip
    with HybridSearch(make_settings(data, model="none")) as hs:
        assert _stuck(hs) == [("newcomer", "owner gone")]
    with running_service(settings, reconciler=False):
        pass  # ready, and no write ran
    with HybridSearch(make_settings(data, model="none")) as hs:
        assert hs.components.store.get_resource("newcomer") is None
        _clean(hs)
