"""The reconciler against a careless operator and a hostile reports folder: a lease left by a
reconciler killed with SIGKILL is taken over at once, and ``audit`` picks the newest report the
reconciler wrote (by its own time, shape checked), naming the files it skipped.

Real SQLite and real child processes; the dense path is off (nothing here needs vectors).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hybridsag.cli import main
from hybridsag.consistency import Lease, Reconciler, latest_report, list_reports, write_report
from hybridsag.errors import ConsistencyError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

#: A child that takes the reconcile lease (10 minutes) and dies without releasing it; with
#: ``hold`` it instead says so and waits until it is killed.
CHILD = """
import os, signal, sys
from hybridsag.consistency import Lease
from hybridsag.records.store import Store
path, fingerprint, mode = sys.argv[1:4]
lease = Lease(Store(path, tokenizer_fingerprint=fingerprint), ttl_s=600)
lease.acquire()
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
print(lease.owner, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hs(tmp_path: Path) -> Iterator[HybridSearch]:
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    with HybridSearch(settings) as search:
        search.ingest("a", "Apples grow in the orchard.")
        yield search


def _child(hs: HybridSearch, mode: str) -> subprocess.Popen[str]:
    store = hs.components.store
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store.path), str(store.get_meta("tokenizer")), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_lease_of_a_reconciler_killed_with_sigkill_is_taken_over(hs: HybridSearch) -> None:
    child = _child(hs, "kill")
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    held = Lease(hs.components.store, ttl_s=1).holder()
    assert held is not None and not held["expired"]  # 10 minutes left on a dead owner's lease
    assert held["owner"].split(":")[1] == str(child.pid)
    report = Reconciler(hs.components).run()
    assert report["ok"] and report["refused"] is None
    assert Lease(hs.components.store, ttl_s=1).holder() is None


def test_a_lease_of_a_live_process_is_still_refused(hs: HybridSearch) -> None:
    child = _child(hs, "hold")
    try:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        assert owner.split(":")[1] == str(child.pid)
        with pytest.raises(ConsistencyError, match=owner):
            Reconciler(hs.components).run()
        other_host = Lease(hs.components.store, ttl_s=600, owner="elsewhere:1:dead")
        with pytest.raises(ConsistencyError, match=owner):
            other_host.acquire()
    finally:
        child.kill()
        child.communicate(timeout=60)


def test_a_lease_of_another_host_waits_for_its_expiry(hs: HybridSearch) -> None:
    Lease(hs.components.store, ttl_s=600, owner="elsewhere:1:dead").acquire()
    with pytest.raises(ConsistencyError, match="elsewhere:1:dead"):
        Reconciler(hs.components).run()


# -- audit ---------------------------------------------------------------------------------------


def _run_audit(settings: Settings, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    import io

    out = io.StringIO()
    code = main(["--data-dir", str(settings.data_dir), "audit", "--json"], out=out)
    err = capsys.readouterr().err
    return code, (json.loads(out.getvalue()) if out.getvalue() else {}), err


def test_audit_picks_the_newest_real_report_and_names_what_it_skipped(
    hs: HybridSearch, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = hs.settings
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    rec = Reconciler(hs.components)
    first = rec.run(dry_run=True)
    time.sleep(0.01)
    newest = rec.run()
    folder = settings.reports_dir
    planted = dict(first, started_at="9999-01-01T00:00:00.000+00:00", owner="planted")
    planted["finished_at"] = planted["started_at"]
    (folder / "reconcile-99991231T235959.999999Z-ffffff.json").write_text(json.dumps(planted))
    (folder / "reconcile-99991231T235959.999999Z-eeeeee.json").write_text("[1, 2, 3]")
    (folder / "reconcile-99991231T235959.999999Z-dddddd.json").write_text("{not json")
    (folder / "reconcile-99991231T235959.999999Z-cccccc.json").write_text(
        json.dumps({"kind": "reconcile", "format": 1, "finished_at": "yesterday"})
    )
    os.mkfifo(folder / "reconcile-99991231T235959.999999Z-bbbbbb.json")  # never opened

    report = latest_report(folder)
    assert report is not None and report["path"] == newest["path"]
    assert sorted(Path(s["file"]).name[-11:] for s in report["skipped"]) == [
        "bbbbbb.json",
        "cccccc.json",
        "dddddd.json",
        "eeeeee.json",
        "ffffff.json",
    ]
    code, data, err = _run_audit(settings, capsys)
    assert code == 0 and data["path"] == newest["path"] and data["owner"] == rec.owner
    assert err.count("skipped") == 5 and "in the future" in err and "not a JSON object" in err
    assert "not a regular file" in err

    # the rotation keeps the newest real reports by their own time, never a foreign file
    written = write_report(folder, {k: v for k, v in newest.items() if k != "path"}, keep=1)
    assert list_reports(folder) == [written]
    assert len(list(folder.glob("reconcile-9999*.json"))) == 5


def test_audit_without_any_valid_report_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedding={"model": "none"})
    settings.reports_dir.mkdir(parents=True)
    (settings.reports_dir / "reconcile-1.json").write_text('{"kind": "other"}')
    code, data, err = _run_audit(settings, capsys)
    assert code == 1 and data == {}
    assert "no reconcile report" in err and "reconcile-1.json" in err
