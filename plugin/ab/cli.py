"""The A/B commands of the ``hybridsag`` CLI: ``hybridsag ab list``, ``hybridsag ab report
EXPERIMENT [--tenant T] [--json]`` and ``hybridsag ab start|stop EXPERIMENT``, which the core CLI
adds (:func:`register`; ``hybridsag.ab`` is part of the core: the service and ``eval`` import it,
so it is not an entry-point plugin as ``hybridsag.consistency`` is). Each is parse -> backend -> render over
the command line's :class:`~hybridsag.backend.Backend`: with ``--server URL`` a running service
(its report is the one the token may see, an admin may name a ``--tenant``, and nothing is
written); otherwise the event store under the data dir, where ``ab report`` of every tenant's
traffic also writes report.json and report.png under ``<data_dir>/ab/EXPERIMENT`` (the only
writer of those files). (``eval --compare`` and ``eval --grid`` are flags of the eval command
itself.)
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

__all__ = ["cmd_ab_list", "cmd_ab_report", "cmd_ab_switch", "register"]


def register(sub: Any) -> None:
    """Add ``ab list``, ``ab report``, ``ab start`` and ``ab stop`` to the CLI
    (:func:`hybridsag.cli.build_parser` calls it)."""
    p = sub.add_parser("ab", help="online A/B experiments: list, report, start or stop one")
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
    q.add_argument(
        "--tenant",
        help="count only this tenant's traffic (through --server: an admin's choice; a tenant "
        "token's report is its own tenant's); no files are written for one tenant",
    )
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_ab_report)
    for name, what in (("start", "start an experiment (it takes traffic)"),
                       ("stop", "stop an experiment (its events stay)")):  # fmt: skip
        q = ab.add_parser(name, help=what)
        q.add_argument("experiment")
        q.add_argument("--json", action="store_true")
        q.set_defaults(fn=cmd_ab_switch)


def _row(row: dict[str, Any]) -> str:
    arms = ", ".join(a["name"] for a in row["arms"])
    state = "running" if row["active"] else "stopped"
    return f"{row['name']:<24} {row['mode']:<10} {state:<8} arms: {arms}\n"


def cmd_ab_list(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.commands.common import backend_from_args, print_json

    with backend_from_args(args) as backend:
        rows = backend.experiments()
    if args.json:
        print_json(rows, out)
        return 0
    for row in rows:
        out.write(_row(row))
    out.write(f"{len(rows)} experiments\n")
    return 0


def cmd_ab_report(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.ab.report import format_report
    from hybridsag.commands.common import backend_from_args, print_json

    with backend_from_args(args) as backend:
        report = backend.experiment_report(args.experiment, tenant=args.tenant)
        folder = backend.keep_experiment_report(args.experiment) if args.tenant is None else None
    if args.json:
        print_json(report, out)
        return 0
    out.write(format_report(report) + "\n")
    if folder is not None:
        out.write(f"report written to {folder / 'report.json'}")
        out.write(f" and {folder / report['chart']}\n" if report.get("chart") else "\n")
    return 0


def cmd_ab_switch(args: argparse.Namespace, out: TextIO) -> int:
    """``ab start NAME`` / ``ab stop NAME``: the experiment's new state."""
    from hybridsag.commands.common import backend_from_args, print_json

    with backend_from_args(args) as backend:
        row = backend.set_experiment_active(args.experiment, args.ab_command == "start")
    if args.json:
        print_json(row, out)
    else:
        out.write(_row(row))
    return 0
