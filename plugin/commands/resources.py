"""The commands on resources: ``list``, ``show``, ``delete``, ``disable``, ``enable`` and
``include``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from hybridsag.commands.common import backend_from_args, print_json
from hybridsag.errors import InputError
from hybridsag.records.schema import STATUSES
from hybridsag.request import ListingOptions

__all__ = [
    "add_include",
    "add_list",
    "add_show",
    "add_writes",
    "cmd_delete",
    "cmd_enable",
    "cmd_include",
    "cmd_list",
    "cmd_show",
]


def add_list(sub: Any) -> None:
    """The ``list`` command's parser."""
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


def add_show(sub: Any) -> None:
    """The ``show`` command's parser."""
    p = sub.add_parser("show", help="one resource's record and chunks")
    p.add_argument("resource_id")
    p.add_argument(
        "--tenant", help="the resource's tenant (default: none; through --server: the token's own)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_show)


def add_writes(sub: Any) -> None:
    """The ``delete``, ``disable`` and ``enable`` commands' parsers."""
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


def add_include(sub: Any) -> None:
    """The ``include`` command's parser."""
    p = sub.add_parser(
        "include", help="bring back a folder file that delete keeps out of its folder's index"
    )
    p.add_argument("resource_id")
    p.add_argument("--tenant", help="the file's tenant (default: none)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_include)


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    with backend_from_args(args) as backend:
        if args.excluded:
            return _list_excluded(backend.exclusions(tenant=args.tenant), args, out)
        rows = backend.list_resources(
            ListingOptions(
                tenant=args.tenant, status=args.status, prefix=args.prefix, limit=args.limit
            )
        )
        excluded = len(backend.exclusions(tenant=args.tenant))
    if args.json:
        print_json(rows, out)
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
        print_json(list(rows), out)
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
        print_json(detail, out)
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


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    with backend_from_args(args) as backend:
        done = backend.delete(args.resource_id, tenant=args.tenant)
        excluded = done and bool(
            backend.exclusions(tenant=args.tenant or "", resource_id=args.resource_id)
        )
    if args.json:
        print_json(
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
        print_json(report, out)
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
        print_json({"resource_id": args.resource_id, "tenant": args.tenant or "", key: done}, out)
    else:
        said = (f"{args.command}d " if done else "no such resource: ") + args.resource_id
        out.write(said + _of_tenant(args.tenant) + "\n")
    return 0 if done else 2


def _of_tenant(tenant: str | None) -> str:
    """`` (tenant T)`` for a message about a resource of tenant ``T``, else nothing."""
    return f" (tenant {tenant!r})" if tenant else ""
