"""The A/B commands of the ``hybridsag`` CLI: ``hybridsag ab list`` and ``hybridsag ab report
EXPERIMENT [--json]``, added through the ``hybridsag.commands`` entry point (:func:`register`).
With ``--server URL`` they ask a running service (its report is the one the token may see, and
nothing is written); otherwise they read the event store under the data dir, and ``ab report``
writes report.json and report.png under ``<data_dir>/ab/EXPERIMENT`` (the only writer of those
files). (``eval --compare`` and ``eval --grid`` are flags of the eval command itself.)
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

__all__ = ["cmd_ab_list", "cmd_ab_report", "register"]


def register(sub: Any) -> None:
    """Add ``ab list`` and ``ab report`` to the CLI (the ``hybridsag.commands`` entry point)."""
    p = sub.add_parser("ab", help="online A/B experiments: list them, report one")
    ab = p.add_subparsers(dest="ab_command", required=True)
    q = ab.add_parser("list", help="the experiments, their arms and whether they run")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_ab_list)
    q = ab.add_parser(
        "report",
        help="per arm CTR and MRR of clicks, the interleaving preference, which arm wins; "
        "writes report.json and report.png under <data_dir>/ab/EXPERIMENT",
    )
    q.add_argument("experiment")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_ab_report)


def _experiments(settings: Any) -> Any:
    from hybridsag.ab.online import Experiments

    return Experiments(settings)


def cmd_ab_list(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.cli import print_json, service_client, settings_from_args

    settings = settings_from_args(args)
    client = service_client(settings)
    if client is not None:
        with client:
            rows = client.experiments()
    else:
        with _experiments(settings) as exps:
            rows = [s.as_dict() for s in exps.list()]
    if args.json:
        print_json(rows, out)
        return 0
    for row in rows:
        arms = ", ".join(a["name"] for a in row["arms"])
        state = "running" if row["active"] else "stopped"
        out.write(f"{row['name']:<24} {row['mode']:<10} {state:<8} arms: {arms}\n")
    out.write(f"{len(rows)} experiments\n")
    return 0


def cmd_ab_report(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.ab.report import format_report
    from hybridsag.cli import print_json, service_client, settings_from_args

    settings = settings_from_args(args)
    client = service_client(settings)
    if client is not None:
        with client:
            report = client.experiment_report(args.experiment)
    else:
        with _experiments(settings) as exps:
            report = exps.write_report(args.experiment)
    if args.json:
        print_json(report, out)
        return 0
    out.write(format_report(report) + "\n")
    if client is None:
        folder = settings.ab_dir / args.experiment
        out.write(f"report written to {folder / 'report.json'}")
        out.write(f" and {folder / report['chart']}\n" if report.get("chart") else "\n")
    return 0
