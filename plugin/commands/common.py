"""What every command of the command line shares: its settings and backend from the flags,
its JSON output, progress bars, one-line errors and the exit code of an interrupted command.

:mod:`hybridsag.cli` re-exports the public names (commands added through its
``COMMANDS_GROUP`` import them from there or from here). Nothing heavy is imported here: the
settings, the backend and tqdm load when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from hybridsag.errors import InputError
from hybridsag.ingest.progress import IngestProgress

__all__ = [
    "INTERRUPTED",
    "IngestBars",
    "backend_from_args",
    "error_line",
    "in_process_only",
    "print_json",
    "progress_factory",
    "settings_from_args",
    "settings_overrides",
    "utf8_safe",
]

#: Exit code of a command stopped with Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def progress_factory(enabled: bool) -> Callable[[str, int], Callable[[int], None]]:
    """A ``(label, total) -> tick(n)`` maker of tqdm bars on stderr (ticks that do nothing
    when not ``enabled``)."""

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


def settings_overrides(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """Settings given on the command line (``--data-dir``, ``--server``) over ``overrides``."""
    out = dict(overrides)
    data_dir = getattr(args, "data_dir", None)
    if data_dir is not None:
        out["data_dir"] = Path(data_dir)
    server = getattr(args, "server", None)
    if server:
        out["server"] = {**out.get("server", {}), "url": server}
    return out


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """``Settings`` for a command (``--data-dir`` and ``--server`` applied, then the keyword
    ``overrides``, e.g. ``server={"port": 9000}``, merged over the environment and files);
    ConfigError on bad settings. Path and judge names are checked against their registries
    before anything is opened; through a service (``server.url``) the names are the service's
    to check (it answers 422 naming a bad one), so a client loads no registry. For commands
    added through :data:`hybridsag.cli.COMMANDS_GROUP` too."""
    from hybridsag.config import load_settings

    settings = load_settings(settings_overrides(args, **overrides), origin="command line")
    if settings.server.url is None:
        from hybridsag.components import check_names

        check_names(settings)
    return settings


def print_json(obj: Any, out: TextIO) -> None:
    """Write ``obj`` as indented JSON (the ``--json`` output of every command)."""
    out.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


def utf8_safe(text: str) -> str:
    """``text`` with every lone surrogate (what a byte that is not UTF-8 becomes in ``argv``
    or a file name) written as its ``\\udcXX`` escape: always encodable as UTF-8, and inside
    a JSON string the escape reads back as the same character."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_line(message: str) -> None:
    """``message`` as one line on stderr."""
    sys.stderr.write(utf8_safe(message) + "\n")


def backend_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """The :class:`~hybridsag.backend.Backend` of a command: over ``--server`` (or
    ``server.url``) a :class:`~hybridsag.backend.RemoteBackend`, else a
    :class:`~hybridsag.backend.LocalBackend` of the data dir (opened on its first operation;
    refused while a running service holds the data dir). The caller closes it. For commands
    added through :data:`hybridsag.cli.COMMANDS_GROUP` too."""
    from hybridsag.backend import open_backend

    return open_backend(settings_from_args(args, **overrides))


def in_process_only(settings: Any, what: str) -> None:
    """InputError (exit 2) when ``server.url`` is set for a command (``what``) that runs only
    in process: it says so rather than ignore ``--server``."""
    if settings.server.url is not None:
        raise InputError(
            f"{what} runs in process, on this machine's data dir; it cannot go through the "
            f"service at {settings.server.url}: drop --server (and HYBRIDSAG_SERVER__URL)"
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
