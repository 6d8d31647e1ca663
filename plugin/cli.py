"""The ``hybridsag`` command line: each command parses its flags, calls one operation of a
:class:`~hybridsag.backend.Backend`, and renders the answer.

Exit codes: 0 ok, 1 failure, 2 bad input (bad query, bad file, bad flag, bad settings value, a
damaged store, a token the service refused, a data dir a running service holds), 130
interrupted (Ctrl-C; ``eval`` writes the results of what ran first). Settings come from the
environment / ``.env`` / TOML (see :mod:`hybridsag.settings`); ``--data-dir`` overrides the data
dir. With ``--server URL`` (or ``HYBRIDSAG_SERVER__URL``) every command that reaches the index
(search, index, list, show, delete, enable, disable, reconcile, audit, doctor, ab, mcp) goes to a
running ``hybridsag serve`` instead (:func:`~hybridsag.backend.open_backend`); a command that
only runs in process (``eval``, ``rebuild-vectors``, ``reconcile --schedule``) refuses
``--server`` in one line rather than ignore it. While a service holds the data dir
(``<data_dir>/service.json``), a local command that would open the index is refused in one line
naming the ``--server`` command to run instead. Every error is one line on stderr, never a
traceback.

Logging is set up here and nowhere in the library: records go to stderr as one line each (no
traceback). By default only hybridsag's own errors are shown (what a command could not do is its
one-line error anyway); ``-v`` shows warnings of every library, ``-vv`` info, ``-vvv`` debug with
tracebacks. pymilvus' own stderr handlers (set up when it is imported) are removed so its records
follow the same rule, and gRPC's C core is told to stay quiet (``GRPC_VERBOSITY=NONE`` unless set)
before it loads: its keepalive ``GOAWAY ... too_many_pings`` lines, pymilvus' ``failed to get
mvccTs`` warnings and the in-process Milvus Lite server's ``Method not implemented`` errors are
noise to a person at a terminal; ``--json`` output is on stdout, never mixed with them.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from hybridsag import __version__
from hybridsag.output.budget import DEFAULT_BUDGET, check_budget
from hybridsag.errors import (
    AuthError,
    ConfigError,
    CorruptStoreError,
    HybridSagError,
    InputError,
    ServiceHoldsDataDir,
)
from hybridsag.judges import judge_names
from hybridsag.paths import path_names
from hybridsag.ingest.progress import IngestProgress
from hybridsag.records.schema import STATUSES

__all__ = [
    "COMMANDS_GROUP",
    "INTERRUPTED",
    "IngestBars",
    "build_parser",
    "main",
    "backend_from_args",
    "in_process_only",
    "print_json",
    "service_logging",
    "settings_from_args",
    "utf8_safe",
]

#: Entry-point group through which other packages add subcommands: each entry point names a
#: callable ``register(subparsers)`` that adds parsers whose ``fn(args, out) -> int`` runs the
#: command (``hybridsag.consistency`` adds ``reconcile`` and ``audit`` this way, see
#: pyproject.toml). The core CLI never imports those packages by name, so the dependency points
#: from them to it (tests/unit/test_layering.py).
COMMANDS_GROUP = "hybridsag.commands"
#: Exit code of a command stopped with Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def _progress_factory(enabled: bool) -> Callable[[str, int], Callable[[int], None]]:
    def factory(label: str, total: int) -> Callable[[int], None]:
        if not enabled:
            return lambda n: None
        from tqdm import tqdm

        bar = tqdm(total=total, desc=label, unit="it", file=sys.stderr, leave=False, disable=None)

        def tick(n: int) -> None:
            bar.update(n)
            if bar.n >= total:
                bar.close()

        return tick

    return factory


def _overrides(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """Settings given on the command line (``--data-dir``, ``--server``) over ``overrides``."""
    out = dict(overrides)
    data_dir = getattr(args, "data_dir", None)
    if data_dir is not None:
        out["data_dir"] = Path(data_dir)
    server = getattr(args, "server", None)
    if server:
        out["server"] = {**out.get("server", {}), "url": server}
    return out


def _settings(args: argparse.Namespace, **overrides: Any) -> Any:
    """The settings (ConfigError for a bad one), path and judge names checked against their
    registries before anything is opened. Through a service (``server.url``) the names are the
    service's to check (it answers 422 naming a bad one), so a client loads no registry."""
    from hybridsag.config import load_settings

    settings = load_settings(_overrides(args, **overrides), origin="command line")
    if settings.server.url is None:
        from hybridsag.components import check_names

        check_names(settings)
    return settings


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


def utf8_safe(text: str) -> str:
    """``text`` with every lone surrogate (what a byte that is not UTF-8 becomes in ``argv``
    or a file name) written as its ``\\udcXX`` escape: always encodable as UTF-8, and inside
    a JSON string the escape reads back as the same character."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Utf8Out:
    """A text stream that writes :func:`utf8_safe` text to ``inner`` (the CLI's output is
    valid UTF-8 whatever the data holds)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        return self._inner.write(utf8_safe(text))

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _error(message: str) -> None:
    sys.stderr.write(utf8_safe(message) + "\n")


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """``Settings`` for a command (``--data-dir`` and ``--server`` applied, then the keyword
    ``overrides``, e.g. ``server={"port": 9000}``, merged over the environment and files);
    ConfigError on bad settings. For commands added through :data:`COMMANDS_GROUP`."""
    return _settings(args, **overrides)


def backend_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """The :class:`~hybridsag.backend.Backend` of a command: over ``--server`` (or
    ``server.url``) a :class:`~hybridsag.backend.RemoteBackend`, else a
    :class:`~hybridsag.backend.LocalBackend` of the data dir (opened on its first operation;
    refused while a running service holds the data dir). The caller closes it. For commands
    added through :data:`COMMANDS_GROUP` too."""
    from hybridsag.backend import open_backend

    return open_backend(_settings(args, **overrides))


def in_process_only(settings: Any, what: str) -> None:
    """InputError (exit 2) when ``server.url`` is set for a command (``what``) that runs only
    in process: it says so rather than ignore ``--server``."""
    if settings.server.url is not None:
        raise InputError(
            f"{what} runs in process, on this machine's data dir; it cannot go through the "
            f"service at {settings.server.url}: drop --server (and HYBRIDSAG_SERVER__URL)"
        )


def print_json(obj: Any, out: TextIO) -> None:
    """Write ``obj`` as indented JSON (the ``--json`` output of every command)."""
    _print_json(obj, out)


def _register_extensions(sub: Any) -> None:
    """Let every ``hybridsag.commands`` entry point add its subcommands. One that fails to load
    is named on stderr and left out; the other commands still work."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            register = ep.load()
            register(sub)
        except Exception as exc:  # noqa: BLE001 - a broken extension must not break the CLI
            sys.stderr.write(
                f"hybridsag: warning: commands from {ep.value} not loaded: "
                f"{type(exc).__name__}: {exc}\n"
            )


class IngestBars(IngestProgress):
    """The progress of ``hybridsag index`` on stderr (tqdm): a ``files`` bar against the total
    counted before reading (with the chunks made so far and an ETA) and an ``embed`` bar for the
    chunks being embedded, which dominates the time with the dense path on. Shown on a terminal
    only (``disable=None``) unless ``force``."""

    def __init__(self, *, file: TextIO | None = None, force: bool = False) -> None:
        self._file = file or sys.stderr
        self._disable = False if force else None
        self.files: Any = None
        self.embed: Any = None
        self.chunks = 0

    def _bar(self, label: str, total: int | None, unit: str) -> Any:
        from tqdm import tqdm

        return tqdm(
            total=total, desc=label, unit=unit, file=self._file, leave=False, disable=self._disable
        )

    def start(self, documents: int | None) -> None:
        self.files = self._bar("files", documents, "file")

    def prepared(self, documents: int, chunks: int) -> None:
        if self.files is None:
            self.files = self._bar("files", None, "file")
        self.chunks += chunks
        self.files.set_postfix(chunks=self.chunks, refresh=False)
        self.files.update(documents)

    def embedding(self, chunks: int) -> None:
        if self.embed is None:
            self.embed = self._bar("embed", chunks, "chunk")
        else:
            self.embed.total += chunks
            self.embed.refresh()

    def embedded(self, chunks: int) -> None:
        if self.embed is not None:
            self.embed.update(chunks)

    def close(self) -> None:
        for bar in (self.files, self.embed):
            if bar is not None:
                bar.close()


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    if getattr(args, "tenant", None) is not None or getattr(args, "acl", None):
        from hybridsag.records.filters import Filters

        try:  # checked as a search's filters are, before anything is opened
            Filters(tenant=args.tenant or "", acl=tuple(args.acl or ()))
        except HybridSagError as exc:
            raise InputError(f"index --tenant/--acl: {exc}") from None
    if not args.jsonl and not args.path:
        raise InputError("index needs a PATH (a folder or a file) or --jsonl FILE")
    bars = IngestBars() if not args.quiet else None
    try:
        with backend_from_args(args) as backend:
            if args.jsonl:
                report = backend.ingest_jsonl(Path(args.jsonl), mode=args.mode, progress=bars)
            else:
                report = backend.sync_folder(
                    Path(args.path),
                    tenant=args.tenant or "",
                    acl=tuple(args.acl or ()),
                    prune=not args.no_prune,
                    progress=bars,
                )
    finally:
        if bars is not None:
            bars.close()
    if args.json:
        _print_json(report, out)
        return 0
    from hybridsag.output.render import counted

    pruned = report.get("pruned", [])
    out.write(
        f"indexed {counted(report['indexed'], 'resource')} ({report['chunks']} chunks, "
        f"{report['vectors']} vectors), {report['unchanged']} unchanged, "
        f"{len(report['errors'])} skipped, {len(pruned)} removed in {report['seconds']:.2f} s\n"
    )
    if report.get("root"):
        out.write(f"  ids are relative to {report['root']}\n")
    for note in report.get("notes", []):
        out.write(f"  note: {note}\n")
    for rid in pruned:
        out.write(f"  removed {rid}: its file is gone\n")
    for rid in report.get("excluded", []):
        out.write(f"  excluded {rid}: deleted by hand (hybridsag include {rid} brings it back)\n")
    for where, why in sorted(report["errors"].items()):
        out.write(f"  skipped {where}: {why}\n")
    for warning in report.get("warnings", []):
        out.write(f"  warning: {warning}\n")
    return 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    with backend_from_args(args) as backend:
        if args.excluded:
            return _list_excluded(backend.exclusions(tenant=args.tenant), args, out)
        rows = backend.list_resources(
            tenant=args.tenant, status=args.status, prefix=args.prefix, limit=args.limit
        )
        excluded = len(backend.exclusions(tenant=args.tenant))
    if args.json:
        _print_json(rows, out)
        return 0
    from hybridsag.output.render import counted, display_width, pad

    width = max([len("RESOURCE"), *(display_width(r["resource_id"]) for r in rows)])
    # a resource is (tenant, id): the tenant column shows where any resource has one
    tenants = any(r["tenant"] for r in rows)
    tw = max([len("TENANT"), *(len(r["tenant"]) for r in rows)]) if tenants else 0
    head = f"{'TENANT':<{tw}}  " if tenants else ""
    out.write(f"{head}{'RESOURCE':<{width}}  {'STATUS':<9} {'VER':>4} {'CHUNKS':>6}  SOURCE\n")
    for r in rows:
        lead = f"{r['tenant'] or '-':<{tw}}  " if tenants else ""
        out.write(
            f"{lead}{pad(r['resource_id'], width)}  {r['status']:<9} {r['version']:>4} "
            f"{r['chunks']:>6}  {r['source_uri'] or '-'}\n"
        )
    out.write(f"{counted(len(rows), 'resource')}\n")
    if excluded:
        out.write(
            f"{counted(excluded, 'file')} deleted by hand and kept out of "
            "the index: hybridsag list --excluded\n"
        )
    return 0


def _list_excluded(rows: Sequence[Any], args: argparse.Namespace, out: TextIO) -> int:
    """``list --excluded``: the folder files ``delete`` keeps out of their folders' index."""
    rows = [r for r in rows if not args.prefix or r["resource_id"].startswith(args.prefix)]
    rows = rows[: args.limit] if args.limit else rows
    if args.json:
        _print_json(list(rows), out)
        return 0
    from hybridsag.output.render import display_width, pad

    width = max([len("RESOURCE"), *(display_width(r["resource_id"]) for r in rows)])
    out.write(f"{'TENANT':<8}  {'RESOURCE':<{width}}  STATUS    SOURCE\n")
    for r in rows:
        out.write(
            f"{r['tenant'] or '-':<8}  {pad(r['resource_id'], width)}  excluded  {r['source_uri']}\n"
        )
    out.write(f"{len(rows)} excluded (hybridsag include ID brings one back)\n")
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.output.render import stale_words

    with backend_from_args(args) as backend:
        detail = backend.show(args.resource_id, tenant=args.tenant)
    if detail is None:
        raise InputError(f"no such resource: {args.resource_id!r}" + _of_tenant(args.tenant))
    if args.json:
        _print_json(detail, out)
        return 0
    fields = {
        "resource": detail["resource_id"],
        "title": detail["title"],
        "status": detail["status"]
        + (f" (stale: {stale_words(detail.get('stale_reason'))})" * bool(detail["stale"])),
        "version": detail["version"],
        "source": detail["source_uri"] or "-",
        "root": detail["source_root"] or "-",
        "tenant": detail["tenant"] or "-",
        "acl": ", ".join(detail["acl"]) or "- (public)",
        "metadata": json.dumps(dict(detail["metadata"]), ensure_ascii=False),
        "chunks": len(detail["chunks"]),
    }
    for key, value in fields.items():
        out.write(f"{key + ':':<10} {value}\n")
    for c in detail["chunks"]:
        head = f"  [{c['heading_path']}]" if c["heading_path"] else ""
        out.write(
            f"  #{c['ordinal']:<4} lines {c['start_line']}-{c['end_line']}, {c['chars']} chars{head}\n"
        )
    return 0


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
    from hybridsag.output.render import render_search

    as_json = args.json or args.format == "json"
    options = _search_options(args)
    with backend_from_args(args) as backend:
        warm = backend.warm(options.paths, query=args.query)
        startup_ms = round((time.perf_counter() - args.started) * 1000, 3)
        data = backend.search(args.query, options)
        terms = [] if as_json else backend.query_terms(data["query"])
    if as_json:
        # start-up (imports, settings, model load, Milvus open, paths built) is its own
        # stage, so that startup_ms + total_ms is the command's wall time up to the output
        before = round(startup_ms - sum(warm.values()), 3)
        data["stages"]["startup"] = {"imports_and_settings_ms": before, **warm}
        wall_ms = round((time.perf_counter() - args.started) * 1000, 3)
        data["timings"] = {"startup_ms": startup_ms, **data["timings"], "wall_ms": wall_ms}
        _print_json(data, out)
        return 0
    color = bool(getattr(out, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ
    out.write(
        render_search(
            data, terms=terms, color=color, brief=args.brief, width=_terminal_width(),
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


def cmd_mcp(args: argparse.Namespace, out: TextIO) -> int:
    """``hybridsag mcp``: the MCP server over stdio until the client closes it (the ``mcp``
    extra; see :mod:`hybridsag.integrations.mcp_server`)."""
    settings = _settings(args)
    if args.allow_writes and settings.server.url is not None:
        raise InputError(
            "--allow-writes means nothing through --server: the service token's role decides "
            "whether the ingest and delete tools are offered; drop --allow-writes"
        )
    from hybridsag.integrations.mcp_server import run_stdio

    run_stdio(settings, allow_writes=True if args.allow_writes else None)
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    with backend_from_args(args) as backend:
        done = backend.delete(args.resource_id, tenant=args.tenant)
        excluded = done and bool(
            backend.exclusions(tenant=args.tenant or "", resource_id=args.resource_id)
        )
    if args.json:
        _print_json(
            {
                "resource_id": args.resource_id,
                "tenant": args.tenant or "",
                "deleted": done,
                "excluded": excluded,
            },
            out,
        )
    else:
        said = "deleted " if done else "no such resource: "
        out.write(said + args.resource_id + _of_tenant(args.tenant) + "\n")
        if excluded:
            out.write(_excluded_note(args.resource_id, args.tenant))
    return 0 if done else 2


def _excluded_note(resource_id: str, tenant: str | None) -> str:
    """What ``delete`` says of a folder file it excluded, naming the command that lifts it."""
    flag = f" --tenant {tenant}" if tenant else ""
    return (
        "  its file is still on disk: it stays out of the index of its folder "
        f"(run: hybridsag include {resource_id}{flag} to bring it back)\n"
    )


def cmd_include(args: argparse.Namespace, out: TextIO) -> int:
    """``include ID``: lift the exclusion a ``delete`` left on a folder file and index it."""
    with backend_from_args(args) as backend:
        report = backend.include(args.resource_id, tenant=args.tenant)
    if args.json:
        _print_json(report, out)
        return 0 if not report["errors"] else 1
    out.write(
        f"included {args.resource_id}{_of_tenant(args.tenant)} again: indexed "
        f"{report['indexed']}, {report['unchanged']} unchanged\n"
    )
    for where, why in sorted(report["errors"].items()):
        out.write(f"  skipped {where}: {why}\n")
    return 0 if not report["errors"] else 1


def cmd_enable(args: argparse.Namespace, out: TextIO) -> int:
    """``enable ID`` / ``disable ID``: make a resource searchable again, or hide it (kept)."""
    enabled = args.command == "enable"
    with backend_from_args(args) as backend:
        done = backend.set_enabled(args.resource_id, enabled, tenant=args.tenant)
    if args.json:
        key = "enabled" if enabled else "disabled"
        _print_json({"resource_id": args.resource_id, "tenant": args.tenant or "", key: done}, out)
    else:
        said = (f"{args.command}d " if done else "no such resource: ") + args.resource_id
        out.write(said + _of_tenant(args.tenant) + "\n")
    return 0 if done else 2


def _of_tenant(tenant: str | None) -> str:
    """`` (tenant T)`` for a message about a resource of tenant ``T``, else nothing."""
    return f" (tenant {tenant!r})" if tenant else ""


def cmd_rebuild_vectors(args: argparse.Namespace, out: TextIO) -> int:
    bars = IngestBars() if not args.quiet else None
    try:
        with backend_from_args(args) as backend:
            report = backend.rebuild_vectors(progress=bars)
    finally:
        if bars is not None:
            bars.close()
    if args.json:
        _print_json(report, out)
    else:
        out.write(
            f"wrote {report['vectors']} vectors into collection {report['collection']} of index "
            f"{report['index_id']}; an older collection this data dir used is left as it was\n"
        )
    return 0


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.evaluation.harness import format_table, run_eval

    settings = _settings(args)
    in_process_only(settings, "eval")
    if args.compare or args.grid:
        return _cmd_eval_compare(args, settings, out)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    fuse = [p.strip() for p in args.fuse.split(",") if p.strip()] if args.fuse else None
    common = dict(
        fuse=fuse,
        limit=args.limit,
        out=Path(args.out) if args.out else None,
        judge=args.judge,
        rounds=args.rounds,
        progress=_progress_factory(not args.quiet),
    )
    if args.tune_weights:
        from hybridsag.evaluation.harness import tune_weights

        summary = tune_weights(
            settings, Path(args.data), method=args.grid_method, **common  # type: ignore[arg-type]
        )
        if args.json:
            _print_json(summary, out)
        else:
            c = summary["chosen"]
            out.write(
                f"tuned on {summary['dataset']} ({summary['questions']} questions), paths "
                f"{', '.join(summary['fused_paths'])}: R@2 {c['recall@2']:.4f}  R@5 "
                f"{c['recall@5']:.4f}  R@10 {c['recall@10']:.4f}\n"
            )
            e = summary["configured"]
            out.write(f"the configured fusion ({e['method']}):  R@10 {e['recall@10']:.4f}\n")
            for name, m in summary["single_paths"].items():
                out.write(f"{name} alone:  R@10 {m['recall@10']:.4f}\n")
            out.write("\nsettings to use (TOML):\n" + summary["settings_toml"])
            out.write("or in the environment:\n")
            for key, value in summary["settings_env"].items():
                out.write(f"  {key}='{value}'\n")
        return 0
    summary = run_eval(settings, Path(args.data), paths=paths, **common)  # type: ignore[arg-type]
    if args.json:
        _print_json(summary, out)
    else:
        out.write(format_table(summary) + "\n")
        out.write(f"reports written to {summary['out']}\n")
    if "partial" in summary:
        _error(f"hybridsag: interrupted: partial results of what ran written to {summary['out']}")
        return INTERRUPTED
    return 0


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
        settings = _settings(args)
        table = settings_table(settings, setting_origins(_overrides(args), origin="command line"))
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
        _print_json({"ok": ok, "checks": checks, "settings": table}, out)
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


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated numbers") from None


def _add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """The eval flags of paired comparisons and the grid."""
    p.add_argument(
        "--compare",
        metavar="A,B[,C...]",
        help="paired comparison of arms on the same questions: a path (sag2, dense, ...), "
        "fused, a path set (sag2+dense), options (fused:method=rrf,k=30,dense=1.0,rounds=2,"
        "judge_order=false; k is rrf's: refused under convex), a settings file (*.toml) or a "
        "TREC run (*.trec); needs hybridsag[ab]",
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
        help="sweep a fused search over the --fuse paths: the path weights and sag2 rounds, and "
        "the --grid-method's own parameter (rrf: k; convex: the normalisation); every point is "
        "fused as a search fuses, trust step included; print the best points",
    )
    p.add_argument(
        "--grid-method",
        choices=("convex", "rrf"),
        help="the fusion method --grid and --tune-weights sweep (default: fusion.method)",
    )
    p.add_argument(
        "--grid-k",
        help="rrf only: --grid's RRF k values (default 10,30,60,100); refused for convex",
    )
    p.add_argument(
        "--grid-normalisation",
        help="convex only: --grid's normalisations, minmax,zscore (default: "
        "fusion.normalisation); refused for rrf",
    )
    p.add_argument("--grid-weights", help="--grid's weights per path (default 0,0.25,...,4)")
    p.add_argument("--grid-rounds", help="--grid's sag2 rounds (default 0,1,2)")


def _cmd_eval_compare(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    """``eval --compare`` and ``eval --grid`` (hybridsag.ab.offline)."""
    from hybridsag.ab.offline import (
        compare_arms,
        format_compare,
        format_grid,
        grid_search,
    )

    progress = _progress_factory(not args.quiet)
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
        options: dict[str, Any] = {"method": args.grid_method}
        if (ks := _floats(args.grid_k, "--grid-k")) is not None:
            options["ks"] = ks
        if args.grid_normalisation is not None:
            norms = args.grid_normalisation.split(",")
            options["normalisations"] = tuple(n.strip() for n in norms if n.strip())
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
        _print_json(summary, out)
    else:
        out.write(text + "\n")
        out.write(f"reports written to {summary['out']}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridsag", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="data dir (default: HYBRIDSAG_DATA_DIR or ./.hybridsag)")
    parser.add_argument("--version", action="version", version=f"hybridsag {__version__}")
    parser.add_argument(
        "--server",
        metavar="URL",
        help="send the command to a running service (default: HYBRIDSAG_SERVER__URL; token "
        "from HYBRIDSAG_SERVER__CLIENT_TOKEN, else HYBRIDSAG_SERVER__TOKEN)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log to stderr: -v warnings, -vv info, -vvv debug with tracebacks (default: errors)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "index", help="index a folder or one file (md, markdown, txt, rst, ...) or a JSONL file"
    )
    p.add_argument("path", nargs="?", help="folder or file to index")
    p.add_argument("--jsonl", help="JSONL file (_id, title, text per line; BEIR corpus.jsonl)")
    p.add_argument("--mode", choices=("sag", "passage"), help="chunking mode (default: settings)")
    p.add_argument("--tenant", help="tenant of the folder's resources")
    p.add_argument("--acl", action="append", help="ACL tag of the folder's resources (repeat)")
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="keep resources of the folder whose files are gone (default: remove them)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_index)

    p = sub.add_parser("list", help="list resources with status, version, chunks and source")
    p.add_argument(
        "--tenant",
        help="only this tenant's resources (through --server a tenant token lists its own only)",
    )
    p.add_argument("--status", choices=STATUSES, help="only resources in this status")
    p.add_argument("--prefix", help="only ids starting with this")
    p.add_argument("--limit", type=int, help="at most this many")
    p.add_argument(
        "--excluded",
        action="store_true",
        help="list the folder files deleted by hand, kept out of their folders' index",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("show", help="one resource's record and chunks")
    p.add_argument("resource_id")
    p.add_argument(
        "--tenant", help="the resource's tenant (default: none; through --server: the token's own)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_show)

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

    for name, what, fn in (
        ("delete", "delete a resource on every path", cmd_delete),
        ("disable", "hide a resource from every search, keeping it", cmd_enable),
        ("enable", "make a disabled resource searchable again", cmd_enable),
    ):
        p = sub.add_parser(name, help=what)
        p.add_argument("resource_id")
        p.add_argument(
            "--tenant",
            help="the resource's tenant (default: none; through --server: the token's own)",
        )
        p.add_argument("--json", action="store_true")
        p.set_defaults(fn=fn)

    p = sub.add_parser(
        "include", help="bring back a folder file that delete keeps out of its folder's index"
    )
    p.add_argument("resource_id")
    p.add_argument("--tenant", help="the file's tenant (default: none)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_include)

    p = sub.add_parser(
        "rebuild-vectors",
        help="give this data dir its own collection (index id) and re-embed every chunk into it",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_rebuild_vectors)

    p = sub.add_parser("eval", help="evaluate paths on a BEIR-style folder")
    p.add_argument("--data", required=True, help="folder with corpus.jsonl, queries.jsonl, qrels.tsv")
    p.add_argument(
        "--paths", default="bm25", help=f"comma-separated: {','.join(path_names())},fused"
    )
    p.add_argument(
        "--fuse", help="paths the fused run merges (default: search.paths, as a search does)"
    )
    p.add_argument("--limit", type=int, help="first N questions only")
    p.add_argument("--judge", help=f"judge of the sag2 path: {', '.join(judge_names())}")
    p.add_argument(
        "--tune-weights",
        action="store_true",
        help="pick the fusion weights and judge order of the --fuse paths (with rrf's k or "
        "convex's normalisation: --grid-method) on this labelled set, each candidate fused as "
        "a search fuses, trust step included; print the settings",
    )
    p.add_argument("--rounds", type=int, help="sag2 expansion rounds (0..2)")
    p.add_argument("--out", help="report folder (default <data-dir>/eval/<dataset>)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    _add_compare_arguments(p)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser(
        "mcp",
        help="serve search (and with --allow-writes ingest and delete) as MCP tools over stdio "
        "(pip install 'hybridsag[mcp]')",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="in process, also serve the ingest and delete tools (default: mcp.allow_writes); "
        "refused with --server, where the token's role decides",
    )
    p.set_defaults(fn=cmd_mcp)

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

    _register_extensions(sub)
    return parser


def _query_from_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]
) -> None:
    """``search --save-exact``: argparse takes a query that starts with ``-`` for an unknown
    option; one unknown token where the query is missing is the query. Anything else unknown
    is argparse's usual error (exit 2)."""
    if getattr(args, "fn", None) is cmd_search and args.query is None and len(unknown) == 1:
        args.query = unknown[0]
        return
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "fn", None) is cmd_search and args.query is None:
        parser.error("search: the query is missing (hybridsag search QUERY)")


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    started = time.perf_counter()
    out = _Utf8Out(out or sys.stdout)
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        _query_from_unknown(parser, args, unknown)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return int(exc.code or 0)
    args.started = started
    _configure_logging(args.verbose)
    try:
        return int(args.fn(args, out))
    except ServiceHoldsDataDir as exc:
        command = _through(sys.argv[1:] if argv is None else list(argv))
        _error(f"hybridsag: error: {_one_line(exc.with_command(command))}")
        return 2
    except InputError as exc:
        _error(f"hybridsag: error: {_one_line(exc)}")
        return 2
    except AuthError as exc:
        _error(f"hybridsag: refused: {exc}")
        return 2
    except ConfigError as exc:
        _error(f"hybridsag: configuration error: {_one_line(exc)}")
        return 2
    except CorruptStoreError as exc:
        _error(f"hybridsag: damaged store: {_one_line(exc)}")
        return 2
    except HybridSagError as exc:
        _error(f"hybridsag: failed: {_one_line(exc)}")
        return 1
    except KeyboardInterrupt:
        _error("hybridsag: interrupted")
        return INTERRUPTED


def _one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split())


def _through(argv: Sequence[str]) -> str:
    """``argv`` without its ``--server``/``--data-dir`` options, quoted for a shell: the
    command to run through the service that holds the data dir."""
    import shlex

    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--server", "--data-dir"):
            skip = True
        elif not arg.startswith(("--server=", "--data-dir=")):
            rest.append(arg)
    return shlex.join(rest)


# ------------------------------------------------------------------------------------- logging

_LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)
_HANDLER: logging.Handler | None = None


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class _OneLineFormatter(logging.Formatter):
    """``hybridsag: warning: <logger>: <message>`` on one line; tracebacks only when asked."""

    def __init__(self, tracebacks: bool) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        line = " ".join(record.getMessage().split())
        text = f"hybridsag: {record.levelname.lower()}: {record.name}: {line}"
        if self.tracebacks and record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def _configure_logging(verbosity: int) -> None:
    """The CLI's logging (see the module docstring); safe to call again (tests run ``main``
    many times in one process)."""
    global _HANDLER
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # read by gRPC's C core when it loads
    level = _LEVELS[min(max(verbosity, 0), len(_LEVELS) - 1)]
    root = logging.getLogger()
    if _HANDLER is None:
        _HANDLER = _StderrHandler()
        root.addHandler(_HANDLER)
    _HANDLER.setLevel(level)
    _HANDLER.setFormatter(_OneLineFormatter(tracebacks=level <= logging.DEBUG))
    _HANDLER.filters = [] if verbosity > 0 else [_own_records]
    if root.level > level:
        root.setLevel(level)
    if "pymilvus" in sys.modules:
        _own_pymilvus_logs()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("pymilvus", _own_pymilvus_logs))


def service_logging(verbosity: int) -> None:
    """The logging of ``hybridsag serve``: the CLI's (:func:`_configure_logging`), with the
    service's own records from INFO up (warm-up, the access log ``hybridsag.service.access``,
    errors) and tracebacks always: a 5xx must be seen with its cause."""
    _configure_logging(verbosity)
    assert _HANDLER is not None
    level = min(_HANDLER.level, logging.INFO)
    _HANDLER.setLevel(level)
    _HANDLER.setFormatter(_OneLineFormatter(tracebacks=True))
    own = logging.getLogger("hybridsag")
    own.setLevel(min(own.getEffectiveLevel(), level))


def _own_records(record: logging.LogRecord) -> bool:
    """Only hybridsag's own records (the default, without ``-v``)."""
    return record.name == "hybridsag" or record.name.startswith("hybridsag.")


def _own_pymilvus_logs() -> None:
    """pymilvus gives its loggers their own stderr handlers when it is imported; take them
    away so its records go through the CLI's handler like everyone's."""
    for name in list(logging.root.manager.loggerDict):
        if name == "pymilvus" or name.startswith("pymilvus."):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True
            logger.setLevel(logging.NOTSET)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` once, right after the top-level module ``name`` has been executed."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; the usual finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            self.then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
