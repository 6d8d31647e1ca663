"""JSON audit reports of reconcile runs, kept under ``settings.reports_dir``.

One file per run, ``reconcile-<UTC time>-<random>.json``; names sort in time order, so the newest
is the last. :func:`write_report` writes atomically (temporary file, then rename) and keeps the
newest ``keep`` files.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hybridsag.errors import HybridSagError

__all__ = ["latest_report", "list_reports", "write_report"]

PREFIX = "reconcile-"


def list_reports(reports_dir: Path) -> list[Path]:
    """Report files, oldest first (empty when the folder does not exist)."""
    folder = Path(reports_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(f"{PREFIX}*.json") if p.is_file())


def write_report(reports_dir: Path, report: dict[str, Any], *, keep: int) -> Path:
    """Write ``report`` as a new file and delete all but the newest ``keep``; returns its path.

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
    """The newest report as a dict (with ``"path"`` added), or None when there is none.

    Raises:
        HybridSagError: the newest file is not readable JSON.
    """
    files = list_reports(reports_dir)
    if not files:
        return None
    path = files[-1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HybridSagError(f"cannot read the audit report {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise HybridSagError(f"audit report {path} is not a JSON object")
    data["path"] = str(path)
    return data
