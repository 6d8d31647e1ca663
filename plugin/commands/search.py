"""``hybridsag search``: the human, JSON and agent formats of a search's answer."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, TextIO

from hybridsag.commands.common import backend_from_args, print_json
from hybridsag.errors import InputError
from hybridsag.output.budget import DEFAULT_BUDGET, check_budget
from hybridsag.paths import path_names

__all__ = ["add_search", "cmd_search", "cmd_search_agent"]


def add_search(sub: Any) -> None:
    """The ``search`` command's parser."""
    p = sub.add_parser(
        "search",
        help="search the index",
        epilog="A query that starts with '-' works as it is (hybridsag search --save-exact) "
        "unless it is one of these options; after -- anything is the query "
        "(hybridsag search -k 3 -- -k).",
    )
    p.add_argument("query", nargs="?")
    p.add_argument("-k", type=int, default=None, help="results to return (default 10)")
    p.add_argument(
        "--paths", help=f"comma-separated: {','.join(path_names())} (default: search.paths)"
    )
    p.add_argument("--tenant")
    p.add_argument("--acl", action="append", help="caller's ACL tag (repeat)")
    p.add_argument("--meta", action="append", help="metadata equality KEY=VALUE (repeat)")
    p.add_argument(
        "--include-stale",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show results whose source file changed since indexing, marked stale (default: "
        "search.include_stale, on); --no-include-stale hides them and says how many",
    )
    p.add_argument(
        "--judge-order",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep what the SAG2 judge scored in its order (default: fusion.judge_order); "
        "--no-judge-order lets the other paths re-vote",
    )
    p.add_argument(
        "--min-confidence",
        type=_confidence_arg,
        default=None,
        metavar="P",
        help="0..1: return no results when the response's confidence (the calibrated "
        "probability that its top result answers the query) is below P; the output still says "
        "the confidence and why (\"no good match\" when the index seems to hold no answer)",
    )
    p.add_argument("--json", action="store_true", help="everything, internals included, as JSON")
    p.add_argument("--brief", action="store_true", help="one line per result, no snippet")
    p.add_argument(
        "--format",
        choices=("human", "json", "agent"),
        default="human",
        help="agent: results grouped by file and heading with line numbers and short quotes, "
        "in at most --budget characters (docs/AGENTS.md); json: as --json",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help=f"characters of the agent format (default {DEFAULT_BUDGET})",
    )
    p.set_defaults(fn=cmd_search)


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    flt: dict[str, Any] = {}
    if args.tenant is not None:
        flt["tenant"] = args.tenant
    if args.acl:
        flt["acl"] = tuple(args.acl)
    if args.meta:
        meta = {}
        for item in args.meta:
            if "=" not in item:
                raise InputError(f"--meta {item!r}: expected KEY=VALUE")
            key, value = item.split("=", 1)
            meta[key] = value
        flt["metadata"] = meta
    return flt


def _search_options(args: argparse.Namespace) -> Any:
    """The :class:`~hybridsag.backend.SearchOptions` of a search from its flags."""
    from hybridsag.backend import SearchOptions

    return SearchOptions(
        top_k=args.k,
        paths=_paths_arg(args),
        filters=_filters(args),
        include_stale=args.include_stale,
        judge_order=args.judge_order,
        min_confidence=args.min_confidence,
    )


def _confidence_arg(text: str) -> float:
    """``--min-confidence``: a number in 0..1 (argparse names anything else, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be a number in 0..1, got {text!r}")
    return value


def _paths_arg(args: argparse.Namespace) -> tuple[str, ...] | None:
    """``--paths`` as a tuple (None: the configured default)."""
    return tuple(p.strip() for p in args.paths.split(",")) if args.paths else None


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    if args.format == "agent":
        return cmd_search_agent(args, out)
    from hybridsag.output.render import render_response

    as_json = args.json or args.format == "json"
    options = _search_options(args)
    with backend_from_args(args) as backend:
        warm = backend.warm(options.paths, query=args.query)
        startup_ms = round((time.perf_counter() - args.started) * 1000, 3)
        response = backend.search(args.query, options)
        terms = [] if as_json else backend.query_terms(response.query)
    if as_json:
        data = response.as_dict()  # the CLI's edge: JSON only here
        # start-up (imports, settings, model load, Milvus open, paths built) is its own
        # stage, so that startup_ms + total_ms is the command's wall time up to the output
        before = round(startup_ms - sum(warm.values()), 3)
        data["stages"]["startup"] = {"imports_and_settings_ms": before, **warm}
        wall_ms = round((time.perf_counter() - args.started) * 1000, 3)
        data["timings"] = {"startup_ms": startup_ms, **data["timings"], "wall_ms": wall_ms}
        print_json(data, out)
        return 0
    color = bool(getattr(out, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ
    out.write(
        render_response(
            response, terms=terms, color=color, brief=args.brief, width=_terminal_width(),
            startup_ms=startup_ms,
        )  # fmt: skip
    )
    return 0


def _terminal_width() -> int:
    """The terminal's width (80 when unknown), at most 120."""
    import shutil

    return min(shutil.get_terminal_size((80, 24)).columns, 120)


def cmd_search_agent(args: argparse.Namespace, out: TextIO) -> int:
    """``search --format agent``: the results grouped by file and heading with line numbers
    and short quotes, in at most ``--budget`` characters (through the service when
    ``--server`` is set: it sends ``format: "agent"``)."""
    try:
        budget = check_budget(args.budget)
    except ValueError as exc:
        raise InputError(f"--budget: {exc}") from None
    options = _search_options(args)
    with backend_from_args(args) as backend:
        text = backend.search_agent(args.query, options, budget)
    out.write(text + "\n")
    return 0
