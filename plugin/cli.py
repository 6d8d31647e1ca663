"""The ``hybridsag`` command line: a thin layer over :class:`~hybridsag.search.HybridSearch`.

Exit codes: 0 ok, 1 failure, 2 bad input (bad query, bad file, bad flag, bad settings value, a
token the service refused). Settings come from the environment / ``.env`` / TOML (see
:mod:`hybridsag.settings`); ``--data-dir`` overrides the data dir. With ``--server URL`` (or
``HYBRIDSAG_SERVER__URL``) search, index --jsonl, delete, reconcile and audit are sent to a
running ``hybridsag serve`` instead of running in-process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from hybridsag import __version__
from hybridsag.errors import AuthError, ConfigError, HybridSagError, InputError
from hybridsag.judges import judge_names
from hybridsag.paths import path_names
from hybridsag.store import STATUSES
from hybridsag.writer import IngestProgress

__all__ = [
    "COMMANDS_GROUP",
    "IngestBars",
    "build_parser",
    "format_search",
    "main",
    "print_json",
    "service_client",
    "settings_from_args",
]

#: Entry-point group through which other packages add subcommands: each entry point names a
#: callable ``register(subparsers)`` that adds parsers whose ``fn(args, out) -> int`` runs the
#: command (``hybridsag.consistency`` adds ``reconcile`` and ``audit`` this way, see
#: pyproject.toml). The core CLI never imports those packages by name, so the dependency points
#: from them to it (tests/unit/test_layering.py).
COMMANDS_GROUP = "hybridsag.commands"


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


def _settings(args: argparse.Namespace, **overrides: Any) -> Any:
    from hybridsag.settings import Settings
    from pydantic import ValidationError

    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    if getattr(args, "server", None):
        overrides.setdefault("server", {})["url"] = args.server
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Any:
    """``Settings`` for a command (``--data-dir`` and ``--server`` applied, then the keyword
    ``overrides``, e.g. ``server={"port": 9000}``, merged over the environment and files);
    ConfigError on bad settings. For commands added through :data:`COMMANDS_GROUP`."""
    return _settings(args, **overrides)


def service_client(settings: Any) -> Any:
    """A :class:`~hybridsag.client.ServiceClient` when ``server.url`` (``--server``) is set,
    else None: the command then runs in-process."""
    s = settings.server
    if s.url is None:
        return None
    from hybridsag.client import ServiceClient

    token = s.client_token or s.token
    return ServiceClient(
        s.url,
        token=token.get_secret_value() if token is not None else None,
        timeout=s.client_timeout_s,
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


def _jsonl_lines(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open("rb") as fh:  # closed at once: no ResourceWarning
        return sum(1 for line in fh if line.strip())


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    settings = _settings(args)
    client = service_client(settings)
    if client is not None:
        if not args.jsonl:
            raise InputError(
                "through --server only --jsonl FILE is sent; a folder (PATH) is indexed in-process"
            )
        path = Path(args.jsonl)
        progress = _progress_factory(not args.quiet)
        with client:
            report = client.ingest_jsonl(
                path,
                mode=args.mode,
                batch_size=settings.server.max_batch,
                progress=progress("index", _jsonl_lines(path)),
            )
    else:
        from hybridsag.search import HybridSearch

        bars = IngestBars() if not args.quiet else None
        try:
            with HybridSearch(settings) as hs:
                if args.jsonl:
                    done = hs.ingest_jsonl(Path(args.jsonl), mode=args.mode, progress=bars)
                else:
                    if not args.path:
                        raise InputError("index needs a PATH (a folder or a file) or --jsonl FILE")
                    done = hs.ingest_folder(
                        Path(args.path),
                        tenant=args.tenant or "",
                        acl=args.acl or (),
                        progress=bars,
                        prune=not args.no_prune,
                    )
        finally:
            if bars is not None:
                bars.close()
        report = done.as_dict()
    if args.json:
        _print_json(report, out)
        return 0
    pruned = report.get("pruned", [])
    out.write(
        f"indexed {report['indexed']} resources ({report['chunks']} chunks, "
        f"{report['vectors']} vectors), {report['unchanged']} unchanged, "
        f"{len(report['errors'])} skipped, {len(pruned)} removed in {report['seconds']:.2f} s\n"
    )
    if report.get("root"):
        out.write(f"  ids are relative to {report['root']}\n")
    for note in report.get("notes", []):
        out.write(f"  note: {note}\n")
    for rid in pruned:
        out.write(f"  removed {rid}: its file is gone\n")
    for where, why in sorted(report["errors"].items()):
        out.write(f"  skipped {where}: {why}\n")
    for warning in report.get("warnings", []):
        out.write(f"  warning: {warning}\n")
    return 0

def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.search import HybridSearch

    with HybridSearch(_settings(args)) as hs:
        rows = hs.list_resources(
            tenant=args.tenant, status=args.status, prefix=args.prefix, limit=args.limit
        )
    if args.json:
        _print_json([r.as_dict() for r in rows], out)
        return 0
    width = max([len("RESOURCE"), *(len(r.record.resource_id) for r in rows)])
    out.write(f"{'RESOURCE':<{width}}  {'STATUS':<9} {'VER':>4} {'CHUNKS':>6}  SOURCE\n")
    for r in rows:
        rec = r.record
        out.write(
            f"{rec.resource_id:<{width}}  {rec.status:<9} {rec.version:>4} {r.chunks:>6}  "
            f"{rec.source_uri or '-'}\n"
        )
    out.write(f"{len(rows)} resources\n")
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.search import HybridSearch

    with HybridSearch(_settings(args)) as hs:
        detail = hs.get_resource(args.resource_id)
    if detail is None:
        raise InputError(f"no such resource: {args.resource_id!r}")
    if args.json:
        _print_json(detail.as_dict(), out)
        return 0
    rec = detail.record
    fields = {
        "resource": rec.resource_id,
        "title": rec.title,
        "status": rec.status + (" (source file changed: stale)" if detail.stale else ""),
        "version": rec.version,
        "source": rec.source_uri or "-",
        "root": rec.source_root or "-",
        "tenant": rec.tenant or "-",
        "acl": ", ".join(rec.acl) or "- (public)",
        "metadata": json.dumps(dict(rec.metadata), ensure_ascii=False),
        "chunks": len(detail.chunks),
    }
    for key, value in fields.items():
        out.write(f"{key + ':':<10} {value}\n")
    for c in detail.chunks:
        head = f"  [{c.heading_path}]" if c.heading_path else ""
        out.write(f"  #{c.ordinal:<4} lines {c.start_line}-{c.end_line}, {c.chars} chars{head}\n")
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


def format_search(resp: dict[str, Any], out: TextIO) -> None:
    """Write a search response (``SearchResponse.as_dict()``) as the CLI shows it."""
    out.write(
        f"{len(resp['results'])} results for {resp['query']!r} via {', '.join(resp['paths'])} "
        f"in {resp['timings'].get('total_ms', 0):.1f} ms\n"
    )
    if resp["degraded"]:
        for name, why in resp["reasons"].items():
            out.write(f"  degraded: {name}: {why}\n")
    for r in resp["results"]:
        where = f"{r['resource_id']}:{r['start_line']}-{r['end_line']}"
        head = f" [{r['heading_path']}]" if r["heading_path"] else ""
        out.write(
            f"\n{r['rank']:>2}. {r['title'] or r['resource_id']}{head}  "
            f"({where}, score {r['score']:.4f})\n"
        )
        snippet = " ".join(r["text"].split())
        out.write(f"    {snippet[:240]}{'…' if len(snippet) > 240 else ''}\n")
        out.write(f"    why: {'; '.join(r['why'])}\n")


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    settings = _settings(args)
    paths = [p.strip() for p in args.paths.split(",")] if args.paths else None
    options: dict[str, Any] = dict(
        top_k=args.k,
        paths=paths,
        filters=_filters(args),
        include_stale=args.include_stale,
        judge_order=args.judge_order,
    )
    client = service_client(settings)
    if client is not None:
        with client:
            resp = client.search(args.query, **options)
    else:
        from hybridsag.search import HybridSearch

        with HybridSearch(settings) as hs:
            resp = hs.search(args.query, **options).as_dict()
    if args.json:
        _print_json(resp, out)
    else:
        format_search(resp, out)
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.errors import NotFoundError

    settings = _settings(args)
    client = service_client(settings)
    if client is not None:
        with client:
            try:
                done = client.delete(args.resource_id)["done"]
            except NotFoundError:
                done = False
    else:
        from hybridsag.search import HybridSearch

        with HybridSearch(settings) as hs:
            done = hs.delete(args.resource_id)
    if args.json:
        _print_json({"resource_id": args.resource_id, "deleted": done}, out)
    else:
        out.write(("deleted " if done else "no such resource: ") + args.resource_id + "\n")
    return 0 if done else 2


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.evaluation import format_table, run_eval

    settings = _settings(args)
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
        from hybridsag.evaluation import tune_weights

        summary = tune_weights(settings, Path(args.data), **common)  # type: ignore[arg-type]
        if args.json:
            _print_json(summary, out)
        else:
            c = summary["chosen"]
            out.write(
                f"tuned on {summary['dataset']} ({summary['questions']} questions), paths "
                f"{', '.join(summary['fused_paths'])}: R@2 {c['recall@2']:.4f}  R@5 "
                f"{c['recall@5']:.4f}  R@10 {c['recall@10']:.4f}\n"
            )
            e = summary["equal_weights_k60"]
            out.write(f"equal weights, k=60:  R@10 {e['recall@10']:.4f}\n")
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
    return 0


def _cmd_eval_compare(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    """``eval --compare`` and ``eval --grid`` (hybridsag.ab)."""
    from hybridsag.ab.cli import cmd_compare

    return cmd_compare(args, settings, out, _progress_factory(not args.quiet))


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    """Check settings, store, tokenizer, model files and Milvus; exit 1 if anything failed.
    Nothing is embedded and no model is loaded: the model check looks for its files and the
    index meta, the Milvus check opens the dense index from the recorded dimension."""
    checks: list[dict[str, Any]] = []

    def check(name: str, fn: Callable[[], str]) -> None:
        try:
            checks.append({"check": name, "ok": True, "detail": fn()})
        except Exception as exc:  # noqa: BLE001 - doctor reports every failure
            checks.append({"check": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})

    state: dict[str, Any] = {}

    def settings_ok() -> str:
        state["settings"] = _settings(args)
        return f"data dir {state['settings'].data_dir.resolve()}"

    check("settings", settings_ok)
    if "settings" in state:
        s = state["settings"]

        def store_ok() -> str:
            from hybridsag.components import Components

            parts = Components(s)
            state["parts"] = parts
            c = parts.store.counts()
            return (
                f"{s.sqlite_path}: {c['resources']} resources, {c['chunks']} chunks, "
                f"tokenizer {parts.tokenizer.fingerprint()}"
            )

        check("store", store_ok)

        def model_ok() -> str:
            from hybridsag.embedder import resolve_model

            if s.embedding.model == "none":
                return "dense path off (embedding.model = 'none')"
            source = resolve_model(s.embedding.model)
            store = state["parts"].store
            stored = store.get_meta("embedding_model"), store.get_meta("embedding_dimension")
            recorded = (
                f"index built with {stored[0]!r}, {stored[1]}-d"
                if stored[0]
                else "no vectors recorded yet"
            )
            return f"{s.embedding.model}: files at {source}; {recorded}"

        def milvus_ok() -> str:
            if s.embedding.model == "none":
                return "dense path off"
            where = s.milvus.uri or f"Milvus Lite at {s.milvus_lite_path}"
            index = state["parts"].stored_dense_index()
            if index is None:
                return f"{where}: no vectors recorded for this data dir yet"
            return f"{where}: collection {s.milvus.collection}, {index.count()} vectors"

        if "parts" in state:
            check("embedding model", model_ok)
            check("milvus", milvus_ok)
            state["parts"].close()
    ok = all(c["ok"] for c in checks)
    if args.json:
        _print_json({"ok": ok, "checks": checks}, out)
    else:
        for c in checks:
            out.write(f"[{'ok' if c['ok'] else 'FAIL':>4}] {c['check']}: {c['detail']}\n")
    return 0 if ok else 1


def _add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """eval's --compare and --grid flags (hybridsag.ab)."""
    from hybridsag.ab.cli import add_compare_arguments

    add_compare_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridsag", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="data dir (default: HYBRIDSAG_DATA_DIR or ./.hybridsag)")
    parser.add_argument("--version", action="version", version=f"hybridsag {__version__}")
    parser.add_argument(
        "--server",
        metavar="URL",
        help="send search, index --jsonl, delete, reconcile and audit to a running service "
        "(default: HYBRIDSAG_SERVER__URL; token from HYBRIDSAG_SERVER__CLIENT_TOKEN)",
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
    p.add_argument("--tenant", help="only this tenant's resources")
    p.add_argument("--status", choices=STATUSES, help="only resources in this status")
    p.add_argument("--prefix", help="only ids starting with this")
    p.add_argument("--limit", type=int, help="at most this many")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("show", help="one resource's record and chunks")
    p.add_argument("resource_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("search", help="search the index")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=None, help="results to return (default 10)")
    p.add_argument(
        "--paths", help=f"comma-separated: {','.join(path_names())} (default: search.paths)"
    )
    p.add_argument("--tenant")
    p.add_argument("--acl", action="append", help="caller's ACL tag (repeat)")
    p.add_argument("--meta", action="append", help="metadata equality KEY=VALUE (repeat)")
    p.add_argument("--include-stale", action="store_true", default=None)
    p.add_argument(
        "--judge-order",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep what the SAG2 judge scored in its order (default: fusion.judge_order); "
        "--no-judge-order lets the other paths re-vote",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_search)

    p = sub.add_parser("delete", help="delete a resource on every path")
    p.add_argument("resource_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_delete)

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
        help="pick fusion weights and k for the --fuse paths on this labelled set; print settings",
    )
    p.add_argument("--rounds", type=int, help="sag2 expansion rounds (0..2)")
    p.add_argument("--out", help="report folder (default <data-dir>/eval/<dataset>)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    _add_compare_arguments(p)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("doctor", help="check settings, store, models and Milvus")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_doctor)

    _register_extensions(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    out = out or sys.stdout
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return int(exc.code or 0)
    try:
        return int(args.fn(args, out))
    except InputError as exc:
        sys.stderr.write(f"hybridsag: error: {exc}\n")
        return 2
    except AuthError as exc:
        sys.stderr.write(f"hybridsag: refused: {exc}\n")
        return 2
    except ConfigError as exc:
        sys.stderr.write(f"hybridsag: configuration error: {exc}\n")
        return 2
    except HybridSagError as exc:
        sys.stderr.write(f"hybridsag: failed: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("hybridsag: interrupted\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
