"""``hybridsag doctor``: the settings in effect and what the backend checks."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from hybridsag.commands.common import print_json, settings_from_args, settings_overrides
from hybridsag.errors import HybridSagError

__all__ = ["add_doctor", "cmd_doctor"]


def add_doctor(sub: Any) -> None:
    """The ``doctor`` command's parser."""
    p = sub.add_parser(
        "doctor",
        help="check settings, store, judge, models and Milvus (with --server: the running "
        "service); show the settings",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--all-settings", action="store_true", help="list every setting, defaults included"
    )
    p.set_defaults(fn=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    """Check the settings, then what the backend checks (:meth:`Backend.health`: in process the
    store, judge, model files, Milvus, lexical index and fusion; with ``--server`` the running
    service: that it answers, its version, the token's role and its ``/readyz`` checks; on a
    data dir a running service holds, that the service answers and how to check it); exit 1 if
    anything failed. Lists the settings in effect and where each came from (secrets masked).
    Nothing is embedded and no embedding model is loaded in process."""
    from hybridsag.backend import open_backend
    from hybridsag.config import setting_origins, settings_table

    checks: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    try:
        settings = settings_from_args(args)
        table = settings_table(settings, setting_origins(settings_overrides(args), origin="command line"))
        changed = sum(1 for row in table if row["origin"] != "default")
        detail = f"data dir {settings.data_dir.resolve()}; {changed} set, the rest defaults"
        checks.append({"check": "settings", "ok": True, "detail": detail})
    except HybridSagError as exc:
        checks.append({"check": "settings", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
    else:
        with open_backend(settings) as backend:
            health = backend.health()
        for name, text in health.items():
            failed = text.startswith("failed")
            for prefix in ("ok: ", "failed: "):
                text = text.removeprefix(prefix)
            checks.append({"check": name, "ok": not failed, "detail": text})
    ok = all(c["ok"] for c in checks)
    if args.json:
        print_json({"ok": ok, "checks": checks, "settings": table}, out)
        return 0 if ok else 1
    for c in checks:
        out.write(f"[{'ok' if c['ok'] else 'FAIL':>4}] {c['check']}: {c['detail']}\n")
    shown = table if args.all_settings else [r for r in table if r["origin"] != "default"]
    if table:
        title = "settings in effect" if args.all_settings else "settings not at their default"
        out.write(f"\n{title} (--all-settings lists every one):\n" if shown else "")
        for row in shown:
            value = json.dumps(row["value"], ensure_ascii=False, default=str)
            out.write(f"  {row['key']} = {value}  [{row['origin']}]\n")
        if not shown:
            out.write("\nevery setting is at its default (--all-settings lists them)\n")
    return 0 if ok else 1
