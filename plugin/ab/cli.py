"""The A/B commands of the ``hybridsag`` CLI.

- ``hybridsag eval --compare A,B[,C...]`` and ``hybridsag eval --grid`` (flags added to the eval
  command by :func:`add_compare_arguments`, run by :func:`cmd_compare`);
- ``hybridsag ab list`` and ``hybridsag ab report EXPERIMENT [--json]``, added through the
  ``hybridsag.commands`` entry point (:func:`register`). With ``--server URL`` they ask a
  running service; otherwise they read the event store under the data dir.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from hybridsag.errors import InputError

__all__ = ["add_compare_arguments", "cmd_ab_list", "cmd_ab_report", "cmd_compare", "register"]


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated numbers") from None


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """The eval flags of paired comparisons and the grid."""
    p.add_argument(
        "--compare",
        metavar="A,B[,C...]",
        help="paired comparison of arms on the same questions: a path (sag2, dense, ...), "
        "fused, a path set (sag2+dense), options (fused:k=30,dense=1.0,rounds=2,"
        "judge_order=false), a settings file (*.toml) or a TREC run (*.trec); needs "
        "hybridsag[ab]",
    )
    p.add_argument(
        "--stat-test",
        choices=("student", "fisher"),
        default="student",
        help="--compare's paired test (ranx): paired t-test or Fisher's randomization test",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="--compare's significance level")
    p.add_argument(
        "--grid",
        action="store_true",
        help="sweep RRF k, path weights and sag2 rounds for the --fuse paths; print the table",
    )
    p.add_argument("--grid-k", help="--grid's RRF k values (default 10,30,60,100)")
    p.add_argument("--grid-weights", help="--grid's weights per path (default 0,0.25,...,4)")
    p.add_argument("--grid-rounds", help="--grid's sag2 rounds (default 0,1,2)")


def cmd_compare(args: argparse.Namespace, settings: Any, out: TextIO, progress: Any) -> int:
    """Run ``eval --compare`` or ``eval --grid`` for parsed ``args``."""
    from hybridsag.ab.offline import compare_arms, format_compare, format_grid, grid_search
    from hybridsag.cli import print_json

    if args.compare and args.grid:
        raise InputError("--compare and --grid are separate runs: give one")
    out_dir = Path(args.out) if args.out else None
    if args.compare:
        if not 0 < args.alpha < 0.5:
            raise InputError(f"--alpha {args.alpha} must be in (0, 0.5)")
        summary = compare_arms(
            settings,
            Path(args.data),
            args.compare,
            limit=args.limit,
            out=out_dir,
            stat_test=args.stat_test,
            alpha=args.alpha,
            progress=progress,
        )
        text = format_compare(summary)
    else:
        fuse = [p.strip() for p in args.fuse.split(",") if p.strip()] if args.fuse else None
        options: dict[str, Any] = {}
        if (ks := _floats(args.grid_k, "--grid-k")) is not None:
            options["ks"] = ks
        if (ws := _floats(args.grid_weights, "--grid-weights")) is not None:
            if 1.0 not in ws:
                raise InputError("--grid-weights must include 1 (weights are relative)")
            options["weights"] = ws
        if (rs := _floats(args.grid_rounds, "--grid-rounds")) is not None:
            options["rounds"] = tuple(int(r) for r in rs)
        summary = grid_search(
            settings,
            Path(args.data),
            fuse=fuse,
            limit=args.limit,
            out=out_dir,
            progress=progress,
            **options,
        )
        text = format_grid(summary)
    if args.json:
        print_json(summary, out)
    else:
        out.write(text + "\n")
        out.write(f"reports written to {summary['out']}\n")
    return 0


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
            report = exps.report(args.experiment)
    if args.json:
        print_json(report, out)
        return 0
    out.write(format_report(report) + "\n")
    if client is None:
        folder = settings.ab_dir / args.experiment
        out.write(f"report written to {folder / 'report.json'}")
        out.write(f" and {folder / report['chart']}\n" if report.get("chart") else "\n")
    return 0
