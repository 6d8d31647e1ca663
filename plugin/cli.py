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

This module is the entry point (:func:`main`) and builds the parser from each command's own
builder; the commands live by job in :mod:`hybridsag.commands` (``index``, ``resources``,
``search``, ``evaluate``, ``doctor``, ``mcp``), what they share in
:mod:`hybridsag.commands.common`.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TextIO

from hybridsag import __version__
from hybridsag.ab import cli as ab_cli
from hybridsag.commands import doctor, evaluate, index, mcp, resources, search
from hybridsag.commands.common import (
    INTERRUPTED,
    IngestBars,
    backend_from_args,
    error_line,
    in_process_only,
    print_json,
    settings_from_args,
    utf8_safe,
)
from hybridsag.errors import (
    AuthError,
    ConfigError,
    CorruptStoreError,
    HybridSagError,
    InputError,
    ServiceHoldsDataDir,
)

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

#: The command functions this module held before the commands were grouped by job, and the
#: module of :mod:`hybridsag.commands` each now lives in.
_MOVED = {
    "cmd_index": index, "cmd_rebuild_vectors": index, "cmd_list": resources,
    "cmd_show": resources, "cmd_delete": resources, "cmd_enable": resources,
    "cmd_include": resources, "cmd_search": search, "cmd_search_agent": search,
    "cmd_eval": evaluate, "cmd_doctor": doctor, "cmd_mcp": mcp,
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """A command function this module held before (``cmd_search``, ...), from its module of
    :mod:`hybridsag.commands`, with a DeprecationWarning naming that module."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"hybridsag.cli.{name} is deprecated: import it from {home.__name__}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(home, name)


#: Entry-point group through which other packages add subcommands: each entry point names a
#: callable ``register(subparsers)`` that adds parsers whose ``fn(args, out) -> int`` runs the
#: command (``hybridsag.consistency`` adds ``reconcile`` and ``audit`` this way, see
#: pyproject.toml). The core CLI never imports those packages by name, so the dependency points
#: from them to it (tests/unit/test_layering.py).
COMMANDS_GROUP = "hybridsag.commands"


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


def build_parser() -> argparse.ArgumentParser:
    """The ``hybridsag`` parser: the global flags, then each command's parser from its own
    builder, in the order ``--help`` lists them, then the commands the
    :data:`COMMANDS_GROUP` entry points add."""
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
    for add in (
        index.add_index,
        resources.add_list,
        resources.add_show,
        search.add_search,
        resources.add_writes,
        resources.add_include,
        index.add_rebuild_vectors,
        evaluate.add_eval,
        mcp.add_mcp,
        doctor.add_doctor,
        ab_cli.register,
    ):
        add(sub)
    _register_extensions(sub)
    return parser


def _query_from_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]
) -> None:
    """``search --save-exact``: argparse takes a query that starts with ``-`` for an unknown
    option; one unknown token where the query is missing is the query. Anything else unknown
    is argparse's usual error (exit 2)."""
    searching = getattr(args, "fn", None) is search.cmd_search
    if searching and args.query is None and len(unknown) == 1:
        args.query = unknown[0]
        return
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if searching and args.query is None:
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
    except HybridSagError as exc:
        if isinstance(exc, ServiceHoldsDataDir):
            command = _through(sys.argv[1:] if argv is None else list(argv))
            message = _one_line(exc.with_command(command))
        elif isinstance(exc, AuthError):
            message = str(exc)  # as it is written
        else:
            message = _one_line(exc)
        label, code = next((word, n) for kind, word, n in _FAILURES if isinstance(exc, kind))
        error_line(f"hybridsag: {label}: {message}")
        return code
    except KeyboardInterrupt:
        error_line("hybridsag: interrupted")
        return INTERRUPTED


#: an error's class -> the word the CLI's error line gives it and the exit code (the first class
#: the error is an instance of wins)
_FAILURES: tuple[tuple[type[HybridSagError], str, int], ...] = (
    (InputError, "error", 2),
    (AuthError, "refused", 2),
    (ConfigError, "configuration error", 2),
    (CorruptStoreError, "damaged store", 2),
    (HybridSagError, "failed", 1),
)


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
