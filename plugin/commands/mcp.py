"""``hybridsag mcp``: the MCP server over stdio (the ``mcp`` extra)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from hybridsag.commands.common import settings_from_args
from hybridsag.errors import InputError

__all__ = ["add_mcp", "cmd_mcp"]


def add_mcp(sub: Any) -> None:
    """The ``mcp`` command's parser."""
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


def cmd_mcp(args: argparse.Namespace, out: TextIO) -> int:
    """``hybridsag mcp``: the MCP server over stdio until the client closes it (the ``mcp``
    extra; see :mod:`hybridsag.integrations.mcp_server`)."""
    settings = settings_from_args(args)
    if args.allow_writes and settings.server.url is not None:
        raise InputError(
            "--allow-writes means nothing through --server: the service token's role decides "
            "whether the ingest and delete tools are offered; drop --allow-writes"
        )
    from hybridsag.integrations.mcp_server import run_stdio

    run_stdio(settings, allow_writes=True if args.allow_writes else None)
    return 0
