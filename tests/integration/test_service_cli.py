"""The CLI as a client of a running service (``--server`` / ``HYBRIDSAG_SERVER__URL``), and
graceful shutdown: SIGTERM finishes the write in flight and leaves nothing to repair."""

from __future__ import annotations

import io
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsag.cli import main
from hybridsag.consistency import Reconciler
from hybridsag.search import HybridSearch
from tests.servicesupport import ADMIN, running_service, service_process
from tests.settings_support import clean_env_settings

READER = "cli-reader-token-0123456789"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = clean_env_settings(
        data_dir=tmp_path_factory.mktemp("cli") / "data",
        embedding={"model": "none"},
        server={
            "token": ADMIN,
            "tokens": [{"token": READER, "role": "read", "tenant": "", "name": "cli-reader"}],
            "reconciler": False,
        },
    )
    with running_service(settings) as base:
        yield base


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_index_search_delete_reconcile_audit_through_the_service(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    corpus = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"_id": "osprey", "title": "Osprey", "text": "The osprey dives for fish."}),
        "not json",
        json.dumps({"_id": " bad id", "text": "refused by the service"}),
        json.dumps({"_id": 7, "title": "Seven", "text": "An integer id becomes a string."}),
    ]
    corpus.write_text("\n".join(lines) + "\n")
    code, out = run("--server", url, "index", "--jsonl", str(corpus), "--json", "-q")
    assert code == 0
    report = json.loads(out)
    assert report["indexed"] == 2
    assert sorted(report["errors"]) == [f"{corpus}:2", f"{corpus}:3"]
    assert "leading or trailing whitespace" in report["errors"][f"{corpus}:3"]

    monkeypatch.setenv("HYBRIDSAG_SERVER__URL", url)  # the environment instead of --server
    code, out = run("search", "osprey dives", "-k", "3", "--json")
    assert code == 0 and json.loads(out)["results"][0]["resource_id"] == "osprey"
    code, out = run("search", "osprey dives", "-k", "3")
    assert code == 0 and "Osprey" in out and "sag2 #1" in out and "before the rules" in out
    assert run("search", "   ")[0] == 2
    assert run("delete", "osprey")[1] == "deleted osprey\n"
    assert run("delete", "osprey") == (2, "no such resource: osprey\n")
    code, out = run("reconcile", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    code, out = run("audit", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    assert run("index", "somefolder")[0] == 2  # a folder is indexed in-process only


def test_token_refusals_exit_2(url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYBRIDSAG_SERVER__URL", url)
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", READER)
    assert run("search", "osprey")[0] == 0
    assert run("delete", "anything")[0] == 2
    assert "role 'read'" in capsys.readouterr().err
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", "not-a-known-token-000")
    assert run("search", "osprey")[0] == 2
    err = capsys.readouterr().err
    assert "unknown bearer token" in err and "not-a-known-token-000" not in err


def test_unreachable_service_exits_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    assert run("--server", "http://127.0.0.1:9", "search", "x")[0] == 1
    assert "no answer from the service" in capsys.readouterr().err


def test_sigterm_finishes_the_write_in_flight(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, base = service_process(
        data,
        "--hold",
        "held",
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_EMBEDDING__MODEL="none",
        HYBRIDSAG_SERVER__RECONCILER="false",
    )
    held, release = Path(f"{data}.held"), Path(f"{data}.release")
    answers: list[httpx.Response] = []
    docs = [{"_id": "held", "text": "written while the service stops"}] + [
        {"_id": f"r{i}", "text": f"resource {i}"} for i in range(20)
    ]

    def write() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120) as c:
            answers.append(c.post("/v1/resources", json=docs))

    writer = threading.Thread(target=write)
    try:
        writer.start()
        deadline = time.monotonic() + 60
        while not held.exists():
            assert time.monotonic() < deadline, "the write never reached its commit step"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None, "the service stopped with a write in flight"
        release.touch()
        writer.join(60)
        assert proc.wait(60) == -signal.SIGTERM  # uvicorn re-raises SIGTERM after shutdown
        log = (data.parent / "service.log").read_text()
        assert "Waiting for application shutdown" in log and "Application shutdown complete" in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers and answers[0].status_code == 200, answers[0].text if answers else None
    assert answers[0].json()["indexed"] == len(docs)
    settings = clean_env_settings(data_dir=data, embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        assert hs.counts()["resources_ready"] == len(docs)
        report = Reconciler(hs.components).run(dry_run=True)
    assert set(report["counts_before"].values()) == {0}
