"""The ``reconcile``, ``audit`` and ``serve`` subcommands of the ``hybridsag`` CLI.

They reach the CLI through the ``hybridsag.commands`` entry-point group (pyproject.toml): the core
CLI (:mod:`hybridsag.cli`) loads every ``register(subparsers)`` published there and never names
this package, so the layering rule "plugin never imports consistency" holds.

Each command is parse -> backend -> render: ``reconcile`` and ``audit`` call the
:class:`~hybridsag.backend.Backend` of the command line (in process, or the running service
with ``--server``), so a data dir that a running service holds is refused in one line naming
the ``--server`` form, before anything is opened and before any report is written.

Exit codes of ``reconcile`` (a dry run or not) and ``audit``, for cron
(:func:`~hybridsag.consistency.reports.report_exit_code`): 0 clean (nothing to fix, or all of it
fixed), 1 the plan has work (``--dry-run``, ``audit``) or work is left after applying (and
``audit`` with no report yet), 2 error (refused: lease held, attach mode, mass-delete guard; a
failed plan or batch; the service unreachable; bad input).

``serve`` refuses a data dir another running service holds (naming it) before it binds, and
holds the data dir itself while it runs (:mod:`hybridsag.records.service_lock`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from hybridsag.consistency.reports import ERROR, WORK, report_exit_code
from hybridsag.errors import (
    AuthError,
    ConfigError,
    ConsistencyError,
    HybridSagError,
    InputError,
    NotFoundError,
)

__all__ = ["cmd_audit", "cmd_reconcile", "cmd_serve", "register"]


def register(sub: Any) -> None:
    """Add ``reconcile`` and ``audit`` to the CLI's subparsers (the entry point)."""
    p = sub.add_parser(
        "reconcile", help="find and remove orphaned vectors and rows (plan, then apply)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--force", action="store_true", help="override the mass-delete guard")
    p.add_argument("--json", action="store_true", help="print the audit report as JSON")
    p.add_argument(
        "--schedule",
        action="store_true",
        help="run on consistency.cron in the foreground until interrupted",
    )
    p.set_defaults(fn=cmd_reconcile)
    p = sub.add_parser("audit", help="print the latest reconcile audit report")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_audit)
    p = sub.add_parser(
        "serve", help="run the HTTP service (FastAPI on uvicorn; needs hybridsag[service])"
    )
    p.add_argument("--host", help="address to listen on (default: server.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: server.port, 8765)")
    p.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help="worker processes sharing the data dir (default: server.workers, 1); worth "
        "raising when searches queue on one process and the machine has spare cores",
    )
    p.add_argument(
        "--watch",
        action="append",
        default=[],
        metavar="DIR",
        help="keep this folder in sync: index it at start, then follow its file events "
        "(repeatable; added to [sources] watch, tenant '')",
    )
    p.set_defaults(fn=cmd_serve)


def _workers(text: str) -> int:
    """``--workers N``: a whole number from 1 to 64 (argparse's error names the value)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--workers must be a whole number of worker processes from 1 to 64, got {text!r}"
        ) from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(
            f"--workers must be from 1 to 64 worker processes, got {n}"
        )
    return n


def _work(counts: dict[str, Any]) -> str:
    """The classes of ``counts`` with work, in words (``"1 source_changed, 3 orphan_fts_rows"``),
    or ``"none"``."""
    return ", ".join(f"{n} {name}" for name, n in counts.items() if n) or "none"


def _headline(report: dict[str, Any], mode: str) -> str:
    """The first line: what was looked at and every class with work (index and source drift)."""
    totals = report.get("totals_before") or {}
    head = f"reconcile {mode} of {report.get('data_dir')} at {report.get('started_at')}: "
    before = report.get("counts_before")
    if before is None:
        return head + "no plan was made (see the errors below)"
    head += (
        f"{totals.get('collection_size', 0)} vectors, {totals.get('resources', 0)} resources, "
        f"{totals.get('chunks', 0)} chunks; "
    )
    if report.get("dry_run"):
        return head + (f"to repair: {_work(before)}" if any(before.values()) else "clean")
    after = report.get("counts_after") or {}
    return head + f"found: {_work(before)}; left after the run: {_work(after)}"


def _sources_lines(sources: dict[str, Any] | None) -> list[str]:
    """What the source drift says that is no work: roots not checked, touched, skipped."""
    if not sources:
        return []
    lines = [f"  not checked: {x['root']}: {x['why']}" for x in sources.get("not_checked", [])]
    if sources.get("touched"):
        lines.append(
            f"  touched: {sources['touched']} file(s) whose bytes did not change (a run "
            "refreshes their recorded stat)"
        )
    for x in sources.get("skipped", [])[:5]:
        lines.append(f"  skipped source {x['where']}: {x['why']}")
    more = sources.get("skipped_count", 0) - min(5, len(sources.get("skipped", [])))
    if more > 0:
        lines.append(f"  ... and {more} more skipped (see the report)")
    return lines


def _format(report: dict[str, Any]) -> str:
    before = report.get("counts_before") or {}
    after = report.get("counts_after") or {}
    mode = "dry run" if report.get("dry_run") else ("forced run" if report.get("force") else "run")
    lines = [_headline(report, mode), f"  {'class':<22}{'before':>8}{'after':>8}  sample"]
    samples = report.get("samples_before") or {}
    for name in before:
        sample = ", ".join(samples.get(name, [])[:3])
        lines.append(f"  {name:<22}{before[name]:>8}{after.get(name, 0):>8}  {sample}")
    lines.extend(_sources_lines(report.get("sources_after") or report.get("sources_before")))
    if report.get("would_refuse"):
        lines.append(f"  a run would be refused: {report['would_refuse']}")
    if report.get("apply"):
        done = ", ".join(f"{k} {v}" for k, v in sorted(report["apply"]["totals"].items()))
        lines.append(f"  applied: {done or 'nothing to do'}")
    for err in report.get("errors") or []:
        lines.append(f"  error: {err}")
    durations = report.get("durations") or {}
    lines.append(f"  took {durations.get('total_s', 0):.2f} s; report {report.get('path')}")
    return "\n".join(lines) + "\n"


def cmd_reconcile(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.backend import open_backend
    from hybridsag.commands.common import settings_from_args

    settings = settings_from_args(args)
    if args.schedule:
        from hybridsag.commands.common import in_process_only
        from hybridsag.consistency.scheduler import run_scheduler
        from hybridsag.records.service_lock import holder

        in_process_only(settings, "reconcile --schedule (a service runs the schedule itself)")
        held = holder(settings.data_dir)
        if held is not None:
            raise InputError(
                f"the data dir {settings.data_dir} is held by a running service (pid {held.pid}, "
                f"{held.url}); the service runs consistency.cron itself (server.reconciler = "
                "true): schedule it there, not beside it"
            )
        if args.dry_run or args.force:
            raise InputError("--schedule runs the scheduled reconcile; drop --dry-run/--force")
        c = settings.consistency
        sys.stderr.write(
            f"hybridsag: reconcile scheduled on {c.cron!r} ({c.timezone}, jitter {c.jitter_s} s); "
            "Ctrl-C stops\n"
        )
        run_scheduler(settings, blocking=True)
        return 0
    try:
        with open_backend(settings) as backend:
            report = backend.reconcile(dry_run=args.dry_run, force=args.force)
    except ConsistencyError as exc:
        sys.stderr.write(f"hybridsag: refused: {exc}\n")
        return ERROR
    except (InputError, AuthError, ConfigError):
        raise  # the CLI's one-line messages (exit 2), a data dir a service holds among them
    except HybridSagError as exc:  # the plan failed (its report is written): an error for cron
        sys.stderr.write(f"hybridsag: failed: {' '.join(str(exc).split())}\n")
        return ERROR
    return _show(args, report, out)


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.commands.common import backend_from_args, utf8_safe

    try:
        with backend_from_args(args) as backend:
            report = backend.audit()
    except NotFoundError as exc:  # no report yet: cron hears of it (exit 1)
        sys.stderr.write(utf8_safe(f"hybridsag: {' '.join(str(exc).split())}") + "\n")
        return WORK
    except (InputError, AuthError, ConfigError):
        raise
    except HybridSagError as exc:  # the service unreachable, say: an error for cron
        sys.stderr.write(f"hybridsag: failed: {' '.join(str(exc).split())}\n")
        return ERROR
    for skipped in report.get("skipped") or ():
        sys.stderr.write(
            utf8_safe(f"hybridsag: skipped {skipped['file']}: {skipped['reason']}") + "\n"
        )
    return _show(args, report, out)


def _show(args: argparse.Namespace, report: dict[str, Any], out: TextIO) -> int:
    """Write a reconcile or audit ``report`` (JSON with ``--json``, else the summary); its exit
    code (:func:`report_exit_code`)."""
    from hybridsag.commands.common import print_json

    if args.json:
        print_json(report, out)
    else:
        out.write(_format(report))
    return report_exit_code(report)


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """Run the HTTP service until SIGTERM/Ctrl-C, with this package's reconciler wired in, and
    the folders of ``--watch`` (with those of ``[sources] watch``) kept in sync.

    Everything that can refuse comes before "serving" is printed: the settings, a missing token
    or watched folder (ConfigError, exit 2) and binding the address (a port in use: ConfigError,
    exit 2)."""
    from hybridsag.cli import service_logging
    from hybridsag.commands.common import settings_from_args

    from hybridsag.consistency.service import ServiceReconciler

    server: dict[str, Any] = {}
    if args.host is not None:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    if args.workers is not None:
        server["workers"] = args.workers
    settings = settings_from_args(args, **({"server": server} if server else {}))
    if args.watch:  # added to the configured folders, not in their place
        watched = [w.model_dump() for w in settings.sources.watch]
        watched += [{"path": folder} for folder in args.watch]
        overrides: dict[str, Any] = {"sources": {"watch": watched}}
        if server:
            overrides["server"] = server
        settings = settings_from_args(args, **overrides)
    from hybridsag.service.server import bind, build_server, serve
    from hybridsag.records.service_lock import holder

    held = holder(settings.data_dir)  # a second service on one data dir: refused, named
    if held is not None:
        raise InputError(
            f"the data dir {settings.data_dir} is already served by pid {held.pid} at "
            f"{held.url}: stop it first, or give this service another --data-dir"
        )

    service_logging(args.verbose)
    s = settings.server
    app_server = build_server(settings, reconciler=ServiceReconciler())
    sock = bind(settings)
    if not s.auth:
        sys.stderr.write(
            "\n" + "!" * 78 + f"\nhybridsag: AUTH IS OFF (server.auth = false): every caller on "
            f"{s.host}:{s.port} is an ADMIN.\nOnly for a single-user machine; set "
            "HYBRIDSAG_SERVER__TOKEN to turn auth on.\n" + "!" * 78 + "\n\n"
        )
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    watching = "".join(f"; watching {w.path}" for w in settings.sources.watch)
    workers = f"{s.workers} workers; " if s.workers > 1 else ""
    sys.stderr.write(
        f"hybridsag: serving {settings.data_dir} on http://{shown}:{port} ({workers}"
        f"reconcile job {'on ' + repr(settings.consistency.cron) if s.reconciler else 'off'}"
        f"{watching})\n"
    )
    sys.stderr.flush()
    try:
        if s.workers > 1:
            from functools import partial

            from hybridsag.service.workers import serve_workers

            # app_server above only checked the settings; each worker builds its own
            serve_workers(
                settings,
                sockets=[sock],
                reconciler=ServiceReconciler,
                setup=partial(service_logging, args.verbose),
            )
        else:
            serve(settings, sockets=[sock], server=app_server)
    finally:
        sock.close()
    return 0
