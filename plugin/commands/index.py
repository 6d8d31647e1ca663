"""``hybridsag index`` (a folder, one file or a JSONL file) and ``hybridsag rebuild-vectors``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from hybridsag.commands.common import IngestBars, backend_from_args, print_json
from hybridsag.errors import HybridSagError, InputError
from hybridsag.request import FolderOptions

__all__ = ["add_index", "add_rebuild_vectors", "cmd_index", "cmd_rebuild_vectors"]


def add_index(sub: Any) -> None:
    """The ``index`` command's parser."""
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


def add_rebuild_vectors(sub: Any) -> None:
    """The ``rebuild-vectors`` command's parser."""
    p = sub.add_parser(
        "rebuild-vectors",
        help="give this data dir its own collection (index id) and re-embed every chunk into it",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_rebuild_vectors)


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    try:  # checked before anything is opened
        folder = FolderOptions(
            tenant=args.tenant or "", acl=args.acl or (), prune=not args.no_prune
        )
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
                report = backend.sync_folder(Path(args.path), folder, progress=bars)
    finally:
        if bars is not None:
            bars.close()
    if args.json:
        print_json(report, out)
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


def cmd_rebuild_vectors(args: argparse.Namespace, out: TextIO) -> int:
    bars = IngestBars() if not args.quiet else None
    try:
        with backend_from_args(args) as backend:
            report = backend.rebuild_vectors(progress=bars)
    finally:
        if bars is not None:
            bars.close()
    if args.json:
        print_json(report, out)
    else:
        out.write(
            f"wrote {report['vectors']} vectors into collection {report['collection']} of index "
            f"{report['index_id']}; an older collection this data dir used is left as it was\n"
        )
    return 0
