"""A running ``hybridsag serve`` holds its data dir (``<data_dir>/service.json``): local commands
that would open the index say so in one line naming the ``--server`` form (exit 2) instead of
failing on Milvus Lite's lock, ``doctor`` says the service holds it, ``doctor --server`` checks
the service itself, and a dry-run reconcile writes no report it could not fill in.

The service is the real ``serve`` path (``tests/service_child.py``, a process of its own) on
Milvus Lite, the embedded default: here as the lexical index (``lexical.backend = "milvus"``),
the dense path off, so that no model loads. Milvus Lite serves one process per data dir, which is
what made these commands fail before.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_support import SAMPLES, run
from tests.servicesupport import ADMIN, service_process

pytestmark = pytest.mark.timeout(300)

READER = "held-reader-token-0123456789"
#: The service's settings, and the CLI's: the same data dir, Milvus Lite for the lexical index.
ENV = {
    "HYBRIDSAG_EMBEDDING__MODEL": "none",
    "HYBRIDSAG_LEXICAL__BACKEND": "milvus",
    "HYBRIDSAG_SERVER__RECONCILER": "false",
}


def _env(monkeypatch: pytest.MonkeyPatch, data: Path) -> None:
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", str(data))
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


def _start(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    tokens = json.dumps([{"token": READER, "role": "read", "tenant": "", "name": "reader"}])
    return service_process(
        data, HYBRIDSAG_SERVER__TOKEN=ADMIN, HYBRIDSAG_SERVER__TOKENS=tokens, **ENV
    )


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=120)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    data = tmp_path_factory.mktemp("held") / "data"
    proc, url = _start(data)
    try:
        yield data, url
    finally:
        if proc.poll() is None:
            _stop(proc)


def test_local_commands_say_the_service_holds_the_data_dir(
    served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, url = served
    _env(monkeypatch, data)
    lock = json.loads((data / "service.json").read_text("utf-8"))
    docs = Path.cwd() / "docs"
    shutil.copytree(SAMPLES, docs)
    held = f"the data dir {data} is held by a running service (pid {lock['pid']}, {url}); run: "
    for argv in (
        ["index", str(docs), "-q"],
        ["search", "ReActAgent"],
        ["list"],
        ["show", "guide/agents.md"],
        ["delete", "guide/agents.md"],
        ["disable", "guide/agents.md"],
        ["--data-dir", str(data), "reconcile", "--dry-run"],
    ):
        code, text = run(*argv)
        err = capsys.readouterr().err
        assert (code, text) == (2, ""), (argv, err)
        assert err.count("\n") == 1 and "Milvus Lite" not in err, err
        command = " ".join(a for a in argv if a not in ("--data-dir", str(data)))
        assert err == f"hybridsag: error: {held}hybridsag --server {url} {command}\n"
    # the refused dry run wrote no audit report (one whose headline would say "0 vectors")
    assert not (data / "reports").exists() or not any((data / "reports").iterdir())


def test_doctor_says_the_service_holds_it(
    served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, url = served
    _env(monkeypatch, data)
    code, text = run("doctor")
    assert code == 0, text
    assert "[FAIL]" not in text
    assert f"[  ok] service: the data dir is held by the running service at {url}" in text
    assert f"which answers /healthz; its store, models and Milvus are checked by: hybridsag --server {url} doctor" in text


def test_doctor_server_checks_the_running_service(
    served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, url = served
    _env(monkeypatch, data)
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    code, text = run("--server", url, "doctor", "--json")
    assert code == 0, text
    checks = {c["check"]: c for c in json.loads(text)["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    assert {"settings", "service", "token", "store", "lexical", "ready"} <= set(checks)
    assert checks["token"]["detail"] == "'admin', role admin (every tenant)"
    assert "Milvus full-text search at Milvus Lite" in checks["lexical"]["detail"]
    # a read token: the service and the token, and ready or not (the detail is an admin's)
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", READER)
    code, text = run("--server", url, "doctor")
    assert code == 0, text
    assert "[  ok] token: 'reader', role read (tenant '')" in text
    assert "[  ok] ready: ready (each component's check needs an admin token)" in text
    # a check that fails: exit 1, naming it
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", "not-a-known-token-000")
    code, text = run("--server", url, "doctor")
    assert code == 1
    assert "[FAIL] service: AuthError:" in text and "unknown bearer token" in text
    assert "not-a-known-token-000" not in text


def test_through_the_server_while_it_holds_the_data_dir(
    served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data, url = served
    _env(monkeypatch, data)
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "kite", "text": "The red kite soars."}) + "\n")
    code, text = run("--server", url, "index", "--jsonl", str(corpus), "-q", "--json")
    assert code == 0 and json.loads(text)["indexed"] == 1
    code, text = run("--server", url, "list", "--json")
    assert code == 0 and "kite" in [r["resource_id"] for r in json.loads(text)]
    code, text = run("--server", url, "reconcile", "--dry-run", "--json")
    assert code == 0 and json.loads(text)["dry_run"] is True


def test_the_lock_goes_with_the_service_and_a_killed_ones_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.parent.mkdir(exist_ok=True)
    _env(monkeypatch, data)
    proc, url = _start(data)
    assert json.loads((data / "service.json").read_text("utf-8"))["url"] == url
    assert _stop(proc) == -signal.SIGTERM  # graceful, as before: the signal ends it
    assert not (data / "service.json").exists()
    code, _ = run("list")
    assert code == 0, capsys.readouterr().err

    proc, url = _start(data)
    proc.kill()  # no shutdown: the record stays, naming a process that is gone
    proc.wait(timeout=60)
    assert json.loads((data / "service.json").read_text("utf-8"))["pid"] == proc.pid
    code, text = run("index", str(SAMPLES), "-q")
    assert code == 0, capsys.readouterr().err
    assert text.startswith("indexed 13 resources")


@pytest.mark.slow
def test_the_embedded_default_with_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The deployment of the issue as it is: the packaged model and Milvus Lite holding vectors
    (``doctor`` said ``[FAIL] milvus`` there, ``index`` failed on the Lite lock)."""
    data = tmp_path / "data"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kite.md").write_text("# Kite\n\nThe red kite soars over the hills.\n", "utf-8")
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", str(data))
    assert run("index", str(docs), "-q")[0] == 0  # vectors recorded, then the CLI exits
    proc, url = service_process(
        data, HYBRIDSAG_SERVER__TOKEN=ADMIN, HYBRIDSAG_SERVER__RECONCILER="false"
    )
    try:
        capsys.readouterr()
        assert run("index", str(docs), "-q") == (2, "")
        err = capsys.readouterr().err
        assert "is held by a running service" in err and "Milvus Lite" not in err
        code, text = run("doctor")
        assert code == 0 and "[FAIL]" not in text and "[  ok] service:" in text
        monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
        code, text = run("--server", url, "doctor")
        assert code == 0, text
        assert "[  ok] milvus: 1 vectors" in text, text
    finally:
        _stop(proc)
