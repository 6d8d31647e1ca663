"""The live index end to end (issue 24): ``hybridsag serve --watch DIR`` on the embedded default
(Milvus Lite under the data dir, the packaged model), driven as a user drives it from the
command line.

While the service runs, an edited file is searchable in its new form, an added one is found and
a deleted one is gone, through ``--server`` search and ``list``; a local ``index`` of its data
dir is refused in one line naming the ``--server`` form; the audit through the service is clean
(the watcher repaired everything). Then, with the service stopped, a file is edited and another
deleted on disk: the nightly audit sees the drift (``reconcile --dry-run`` and ``audit`` exit 1,
naming both classes), ``reconcile`` repairs it, and the next dry run exits 0.

Every wait polls what the service answers, within a generous bound (never sleep-and-assert).
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsag.cli import main
from tests.integration.test_watch import eventually
from tests.servicesupport import ADMIN, child_env, free_socket, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _docs(root: Path) -> Path:
    docs = root / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "index.md").write_text(
        "---\ntitle: Okapi manual\nsection: 1\n---\n\n# Okapi\n\nThe okapi tool indexes burrows.\n",
        "utf-8",
    )
    (docs / "guide" / "install.md").write_text(
        "# Install\n\nRun `okapi install --burrow` to set up the burrow.\n", "utf-8"
    )
    (docs / "guide" / "config.md").write_text(
        "# Configuration\n\nThe `burrow-depth` option sets how deep the okapi digs.\n", "utf-8"
    )
    return docs


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _top(url: str, query: str) -> str | None:
    code, text = _cli("--server", url, "search", query, "-k", "1", "--json")
    assert code == 0, text
    results = json.loads(text)["results"]
    return results[0]["resource_id"] if results else None


def _texts(url: str, query: str) -> str:
    code, text = _cli("--server", url, "search", query, "-k", "3", "--json")
    assert code == 0, text
    return "\n".join(r["text"] for r in json.loads(text)["results"])


def test_a_watched_folder_stays_in_sync_and_the_audit_sees_what_changed_while_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _docs(tmp_path)
    data = tmp_path / "data"
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    url = f"http://127.0.0.1:{port}"
    env = child_env(
        data,
        HYBRIDSAG_SERVER__TOKEN=ADMIN,
        HYBRIDSAG_SERVER__PORT=str(port),
        HYBRIDSAG_SERVER__RECONCILER="false",
        HYBRIDSAG_SOURCES__DEBOUNCE_MS="100",
    )
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", str(data))
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hybridsag.cli", "serve", "--watch", str(docs)],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_ready(url, proc=proc, timeout_s=300)
        eventually(lambda: _top(url, "okapi install --burrow") == "guide/install.md",
                   what="the first index of the watched folder")  # fmt: skip
        # front matter gives the title and is never the lead chunk
        code, text = _cli("--server", url, "show", "index.md", "--json")
        assert code == 0 and json.loads(text)["title"] == "Okapi manual"
        assert "section: 1" not in _texts(url, "Okapi manual")

        # edit, add, delete: search follows within seconds
        (docs / "guide" / "config.md").write_text(
            "# Configuration\n\nThe `tunnel-width` option sets how wide the okapi digs.\n", "utf-8"
        )
        eventually(lambda: "tunnel-width" in _texts(url, "tunnel-width"), what="the edited file")
        (docs / "guide" / "upgrade.md").write_text(
            "# Upgrade\n\nRun `okapi upgrade --keep-burrows` before a new release.\n", "utf-8"
        )
        eventually(lambda: _top(url, "okapi upgrade --keep-burrows") == "guide/upgrade.md",
                   what="the added file")  # fmt: skip
        (docs / "guide" / "install.md").unlink()
        eventually(lambda: _top(url, "okapi install --burrow") != "guide/install.md",
                   what="the deleted file gone")  # fmt: skip
        code, text = _cli("--server", url, "list", "--json")
        assert code == 0
        assert sorted(r["resource_id"] for r in json.loads(text)) == [
            "guide/config.md", "guide/upgrade.md", "index.md",
        ]  # fmt: skip

        # the data dir is the service's: a local index is refused, naming the --server form
        capsys.readouterr()
        assert _cli("index", str(docs))[0] == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"hybridsag --server {url}" in err, err
        # the audit through the service: the watcher left nothing to repair
        code, text = _cli("--server", url, "reconcile", "--dry-run")
        assert code == 0, text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)

    # changed while the service was down: the nightly audit sees it, cron hears exit 1
    (docs / "guide" / "config.md").write_text(
        "# Configuration\n\nThe `tunnel-width` option; the `den-count` option counts dens.\n",
        "utf-8",
    )
    (docs / "guide" / "upgrade.md").unlink()
    code, text = _cli("reconcile", "--dry-run")
    assert code == 1, text
    headline = text.splitlines()[0]
    assert "source_changed" in headline and "source_deleted" in headline, headline
    code, text = _cli("audit")
    assert code == 1, text
    code, text = _cli("reconcile")
    assert code == 0, text
    code, text = _cli("reconcile", "--dry-run")
    assert code == 0 and "clean" in text.splitlines()[0], text
    code, text = _cli("search", "den-count", "-k", "1", "--json")
    assert code == 0 and json.loads(text)["results"][0]["resource_id"] == "guide/config.md"
    code, text = _cli("list", "--json")
    assert sorted(r["resource_id"] for r in json.loads(text)) == ["guide/config.md", "index.md"]
