"""The first hour on a changing real documentation folder (issue 24), timed (not a test).

A copy of a docs folder (default: npm's own docs, 91 Markdown files, when npm is installed) is
served with ``hybridsag serve --watch``; then, as a user would: a search through the service,
``touch`` on every file (what a ``git pull`` or a docs build does), an appended line, a new file
and a deleted one, each timed from the change to the moment a ``--server`` search shows it; an
unchanged ``--server index`` of the folder; the audit through the service; and, with the service
stopped, an edit and a delete that the nightly audit must see (exit 1), repair and then call
clean (exit 0).

Usage: ``python benchmarks/first_hour_live.py [--docs DIR] [--work DIR] [--model none]``
(``--model none``: the lexical and title paths only; default: the packaged embedding model).
Prints one line per step and writes ``first_hour_live.json`` in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

NPM_DOCS = Path("/usr/lib/node_modules/npm/docs/content")
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(env: dict[str, str], *argv: str) -> tuple[int, str]:
    proc = subprocess.run(
        [str(BIN / "hybridsag"), *argv], env=env, capture_output=True, text=True, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def _search(env: dict[str, str], query: str, k: int = 3) -> list[str]:
    code, out = _cli(env, "search", query, "-k", str(k), "--json")
    if code != 0:
        raise SystemExit(f"search {query!r} failed: {out[-2000:]}")
    return [r["resource_id"] for r in json.loads(out)["results"]]


def _until(probe: Any, bound_s: float = 300.0) -> float:
    """Seconds until ``probe()`` is true (polled), or raise after ``bound_s``."""
    start = time.monotonic()
    while not probe():
        if time.monotonic() - start > bound_s:
            raise SystemExit("gave up waiting")
        time.sleep(0.05)
    return time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=Path, default=NPM_DOCS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/first-hour-live"))
    ap.add_argument("--model", default=None, help="embedding.model (none: no dense path)")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    docs = args.work / "docs"
    shutil.copytree(args.docs, docs)
    token = secrets.token_hex(16)
    port = _port()
    env = {
        **os.environ,
        "HYBRIDSAG_DATA_DIR": str(args.work / "index"),
        "HYBRIDSAG_SERVER__TOKEN": token,
        "HYBRIDSAG_SERVER__PORT": str(port),
        "HYBRIDSAG_SERVER__RECONCILER": "false",
    }
    if args.model is not None:
        env["HYBRIDSAG_EMBEDDING__MODEL"] = args.model
    client = {
        **env,
        "HYBRIDSAG_SERVER__URL": f"http://127.0.0.1:{port}",
        "HYBRIDSAG_SERVER__CLIENT_TOKEN": token,
    }
    files = sorted(docs.rglob("*.md"))
    out: dict[str, Any] = {"docs": str(args.docs), "files": len(files), "model": args.model}

    def step(name: str, value: Any) -> None:
        out[name] = value
        print(f"{name}: {value}", flush=True)

    log = (args.work / "serve.log").open("w")
    start = time.monotonic()
    serve = subprocess.Popen(
        [str(BIN / "hybridsag"), "serve", "--watch", str(docs)], env=env, stdout=log, stderr=log
    )
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from wait_ready import wait_ready

        if not wait_ready(client["HYBRIDSAG_SERVER__URL"], 1800):
            raise SystemExit("the service did not get ready: see serve.log")
        step("serve_to_ready_with_first_index_s", round(time.monotonic() - start, 2))
        step("search_peerDependencies_top3", _search(client, "peerDependencies"))
        for path in files:
            path.touch()
        time.sleep(2)  # let the watcher see the touches
        step("after_touch_all_top3", _search(client, "peerDependencies"))
        target = docs / "commands" / "npm-install.md"
        line = "\nA fresh okapi-burrow token rotates on every install.\n"
        with target.open("a", encoding="utf-8") as fh:
            fh.write(line)
        rid = target.relative_to(docs).as_posix()
        step("edit_to_searchable_s", round(_until(
            lambda: rid in _search(client, "okapi-burrow token rotates", 1)
        ), 2))  # fmt: skip
        new = docs / "using-npm" / "okapi.md"
        new.write_text("# Okapi\n\nThe okapi-badger flag is new.\n", "utf-8")
        step("new_file_to_searchable_s", round(_until(
            lambda: "using-npm/okapi.md" in _search(client, "okapi-badger flag", 1)
        ), 2))  # fmt: skip
        gone = docs / "commands" / "npm-star.md"
        gone.unlink()
        step("delete_to_gone_s", round(_until(
            lambda: "commands/npm-star.md" not in _search(client, "npm star", 10)
        ), 2))  # fmt: skip
        t = time.monotonic()
        code, text = _cli(client, "index", str(docs))
        step("server_index_unchanged", {"exit": code, "s": round(time.monotonic() - t, 2),
                                        "said": text.strip().splitlines()[0]})  # fmt: skip
        code, text = _cli(client, "reconcile", "--dry-run")
        step("audit_through_service", {"exit": code, "headline": text.splitlines()[0]})
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(120)
        log.close()
    with (docs / "commands" / "npm-ls.md").open("a", encoding="utf-8") as fh:
        fh.write("\nA line written while the service was down.\n")
    (docs / "commands" / "npm-team.md").unlink()
    for name, argv in (
        ("audit_drift", ("reconcile", "--dry-run")),
        ("repair", ("reconcile",)),
        ("audit_after_repair", ("reconcile", "--dry-run")),
    ):
        code, text = _cli(env, *argv)
        step(name, {"exit": code, "headline": text.splitlines()[0]})
    (args.work / "first_hour_live.json").write_text(json.dumps(out, indent=2), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
