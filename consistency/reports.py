"""JSON audit reports of reconcile runs, kept under ``settings.reports_dir``.

One file per run, ``reconcile-<UTC time>-<random>.json``, written atomically (temporary file,
then rename) by :func:`write_report`, which keeps the newest ``keep`` of them.

Reports are ordered by their own ``finished_at`` (then the file's mtime), never by file name, and
only files that have the shape the reconciler writes count: a regular file of at most
:data:`MAX_REPORT_BYTES` holding a JSON object with ``kind = "reconcile"``, this
:data:`REPORT_FORMAT`, and the fields :data:`REQUIRED` with their types, dated no later than
:data:`FUTURE_SLACK_S` from now. Anything else under the name pattern (a planted
``reconcile-9999....json``, a truncated file, a FIFO) is skipped with its reason, never read as a
report, and never deleted by the rotation (it is not ours).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hybridsag.errors import HybridSagError

__all__ = [
    "CLEAN",
    "ERROR",
    "FUTURE_SLACK_S",
    "MAX_REPORT_BYTES",
    "REPORT_FORMAT",
    "WORK",
    "ReportScan",
    "latest_report",
    "list_reports",
    "report_exit_code",
    "scan_reports",
    "write_report",
]

PREFIX = "reconcile-"
#: The ``format`` every report carries (bumped when its fields change meaning).
REPORT_FORMAT = 1
#: A report larger than this is not one the reconciler wrote (they hold samples, not items).
MAX_REPORT_BYTES = 4 * 1024 * 1024
#: How far in the future a report may be dated (clock differences between hosts).
FUTURE_SLACK_S = 300.0
#: Fields every report holds, with their JSON types.
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "owner": str,
    "data_dir": str,
    "dry_run": bool,
    "ok": bool,
    "started_at": str,
    "finished_at": str,
    "errors": list,
    "durations": dict,
}


@dataclass(frozen=True, slots=True)
class ReportScan:
    """What :func:`scan_reports` found: ``reports`` (path, data), oldest first by the
    report's own ``finished_at`` then mtime; ``skipped`` (path, reason) for every file under the
    name pattern that is not a report of this shape."""

    reports: tuple[tuple[Path, dict[str, Any]], ...]
    skipped: tuple[tuple[Path, str], ...]


def _read(path: Path, now: float) -> tuple[float, dict[str, Any]]:
    """(finished_at as epoch seconds, data) of a report file; ValueError says why it is not
    one. Never opens anything but a regular file (a FIFO would block)."""
    try:
        st = path.lstat()
    except OSError as exc:
        raise ValueError(f"cannot stat: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    if st.st_size > MAX_REPORT_BYTES:
        raise ValueError(f"{st.st_size} bytes, over {MAX_REPORT_BYTES}")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ValueError(f"not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("kind") != "reconcile" or data.get("format") != REPORT_FORMAT:
        raise ValueError(
            f"kind {data.get('kind')!r:.40} / format {data.get('format')!r:.20} is not a "
            f"reconcile report of format {REPORT_FORMAT}"
        )
    for key, kind in REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise ValueError(f"field {key!r} missing or not a {getattr(kind, '__name__', kind)}")
    try:
        finished = datetime.fromisoformat(data["finished_at"]).timestamp()
    except (ValueError, OverflowError, OSError) as exc:
        raise ValueError(f"finished_at {data['finished_at']!r:.40} is not a time: {exc}") from None
    if finished > now + FUTURE_SLACK_S:
        raise ValueError(f"dated in the future ({data['finished_at']!r:.40})")
    return finished, data


def scan_reports(reports_dir: Path, *, now: float | None = None) -> ReportScan:
    """Every report file under ``reports_dir`` read and checked (see the module docstring);
    empty when the folder does not exist. ``now`` (epoch seconds) defaults to the clock."""
    folder = Path(reports_dir)
    if not folder.is_dir():
        return ReportScan((), ())
    now = time.time() if now is None else now
    found: list[tuple[tuple[float, int, str], Path, dict[str, Any]]] = []
    skipped: list[tuple[Path, str]] = []
    for path in folder.glob(f"{PREFIX}*.json"):
        try:
            finished, data = _read(path, now)
        except ValueError as exc:
            skipped.append((path, str(exc)))
            continue
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            mtime = 0
        found.append(((finished, mtime, path.name), path, data))
    found.sort(key=lambda item: item[0])
    return ReportScan(
        tuple((path, data) for _, path, data in found),
        tuple(sorted(skipped, key=lambda s: s[0].name)),
    )


def list_reports(reports_dir: Path) -> list[Path]:
    """The report files, oldest first by their own time (files that are not reports left
    out: see :func:`scan_reports`)."""
    return [path for path, _ in scan_reports(reports_dir).reports]


def write_report(reports_dir: Path, report: dict[str, Any], *, keep: int) -> Path:
    """Write ``report`` as a new file and delete all but the newest ``keep`` reports (files
    that are not reports are left alone); returns its path.

    Raises:
        HybridSagError: the folder or file cannot be written (a failure, not a refusal).
    """
    folder = Path(reports_dir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    path = folder / f"{PREFIX}{stamp}-{uuid.uuid4().hex[:6]}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(report, fh, ensure_ascii=False, indent=2, default=str)
            fh.write("\n")
        os.replace(tmp, path)
        for old in list_reports(folder)[: -max(1, keep)]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        raise HybridSagError(f"cannot write the audit report in {folder}: {exc}") from exc
    return path


def latest_report(reports_dir: Path) -> dict[str, Any] | None:
    """The newest report as a dict, with ``"path"`` and ``"skipped"`` (``{"file", "reason"}``
    for each file that is not a report) added; None when there is no report at all (a
    :class:`ReportScan` from :func:`scan_reports` still names what was skipped)."""
    scan = scan_reports(reports_dir)
    if not scan.reports:
        return None
    path, data = scan.reports[-1]
    data["path"] = str(path)
    data["skipped"] = [{"file": str(p), "reason": why} for p, why in scan.skipped]
    return data


#: :func:`report_exit_code`'s answers (documented for cron: alert on anything but CLEAN).
CLEAN, WORK, ERROR = 0, 1, 2


def report_exit_code(report: Mapping[str, Any]) -> int:
    """The exit code of ``hybridsag reconcile`` and ``audit`` for ``report``: :data:`ERROR`
    (2) when the run was refused or failed (``refused``, ``errors``, or no plan at the end),
    :data:`WORK` (1) when the plan at the end has work (``counts_after``: a dry run's plan, or
    what is left after applying; every class counts, the source drift classes among them),
    :data:`CLEAN` (0) otherwise.

    >>> report_exit_code({"errors": [], "counts_after": {"orphan_vectors": 0}})
    0
    >>> report_exit_code({"errors": [], "counts_after": {"source_changed": 1}})
    1
    """
    counts = report.get("counts_after")
    if report.get("refused") or report.get("errors") or not isinstance(counts, Mapping):
        return ERROR
    return WORK if any(counts.values()) else CLEAN
