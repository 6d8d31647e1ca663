"""Running the ``hybridsag`` CLI in-process, as the CLI tests do."""

from __future__ import annotations

import io

from hybridsag.cli import main

__all__ = ["run"]


def run(*argv: str) -> tuple[int, str]:
    """``main(argv)`` with stdout captured: (exit code, what it printed)."""
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()
