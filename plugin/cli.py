"""The ``hybridsag`` command line: a thin layer over :class:`~hybridsag.search.HybridSearch`.

Exit codes: 0 ok, 1 failure, 2 bad input (bad query, bad file, bad flag, bad settings value, a
damaged store).
Settings come from the environment / ``.env`` / TOML (see :mod:`hybridsag.settings`); ``--data-dir``
overrides the data dir.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from hybridsag.errors import ConfigError, CorruptStoreError, HybridSagError, InputError
from hybridsag.judges import judge_names
from hybridsag.paths import path_names

__all__ = [
    "COMMANDS_GROUP",
    "build_parser",
    "main",
    "print_json",
    "settings_from_args",
    "utf8_safe",
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


def _settings(args: argparse.Namespace) -> Any:
    from hybridsag.settings import Settings
    from pydantic import ValidationError

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc


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


def settings_from_args(args: argparse.Namespace) -> Any:
    """``Settings`` for a command (``--data-dir`` applied); ConfigError on bad settings. For
    commands added through :data:`COMMANDS_GROUP`."""
    return _settings(args)


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


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.search import HybridSearch

    settings = _settings(args)
    progress = _progress_factory(not args.quiet)
    with HybridSearch(settings) as hs:
        if args.jsonl:
            path = Path(args.jsonl)
            total = 0
            if path.is_file():
                with path.open("rb") as fh:  # closed at once: no ResourceWarning
                    total = sum(1 for line in fh if line.strip())
            report = hs.ingest_jsonl(
                path, mode=args.mode, progress=progress("index", total)
            )
        else:
            if not args.path:
                raise InputError("index needs a PATH (a folder) or --jsonl FILE")
            report = hs.ingest_folder(
                Path(args.path), tenant=args.tenant or "", acl=args.acl or (),
                progress=progress("index", 0),
            )
    if args.json:
        _print_json(report.as_dict(), out)
    else:
        out.write(
            f"indexed {report.indexed} resources ({report.chunks} chunks, {report.vectors} "
            f"vectors), {report.unchanged} unchanged, {len(report.errors)} skipped "
            f"in {report.seconds:.2f} s\n"
        )
        for where, why in sorted(report.errors.items()):
            out.write(f"  skipped {where}: {why}\n")
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


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.search import HybridSearch

    settings = _settings(args)
    paths = [p.strip() for p in args.paths.split(",")] if args.paths else None
    with HybridSearch(settings) as hs:
        resp = hs.search(
            args.query,
            top_k=args.k,
            paths=paths,
            filters=_filters(args),
            include_stale=args.include_stale,
            judge_order=args.judge_order,
        )
    if args.json:
        _print_json(resp.as_dict(), out)
        return 0
    out.write(
        f"{len(resp.results)} results for {resp.query!r} via {', '.join(resp.paths)} "
        f"in {resp.timings.get('total_ms', 0):.1f} ms\n"
    )
    if resp.degraded:
        for name, why in resp.reasons.items():
            out.write(f"  degraded: {name}: {why}\n")
    for r in resp.results:
        where = f"{r.resource_id}:{r.start_line}-{r.end_line}"
        head = f" [{r.heading_path}]" if r.heading_path else ""
        out.write(f"\n{r.rank:>2}. {r.title or r.resource_id}{head}  ({where}, score {r.score:.4f})\n")
        snippet = " ".join(r.text.split())
        out.write(f"    {snippet[:240]}{'…' if len(snippet) > 240 else ''}\n")
        out.write(f"    why: {'; '.join(r.why)}\n")
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.search import HybridSearch

    with HybridSearch(_settings(args)) as hs:
        done = hs.delete(args.resource_id)
    if args.json:
        _print_json({"resource_id": args.resource_id, "deleted": done}, out)
    else:
        out.write(("deleted " if done else "no such resource: ") + args.resource_id + "\n")
    return 0 if done else 2


def cmd_rebuild_vectors(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.components import Components

    with Components(_settings(args)) as parts:
        total = parts.store.counts()["chunks"]
        written = parts.rebuild_vectors(progress=_progress_factory(not args.quiet)("embed", total))
        collection, index_id = parts.collection, parts.index_id
    report = {"index_id": index_id, "collection": collection, "vectors": written}
    if args.json:
        _print_json(report, out)
    else:
        out.write(
            f"wrote {written} vectors into collection {collection} of index {index_id}; "
            "an older collection this data dir used is left as it was\n"
        )
    return 0


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.evaluation import format_table, run_eval

    settings = _settings(args)
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
            parts = state["parts"]
            index = parts.stored_dense_index()
            if index is None:
                return f"{where}: no vectors recorded for this data dir yet"
            return (
                f"{where}: collection {parts.collection}, index {parts.index_id}, "
                f"{index.count()} vectors"
            )

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridsag", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="data dir (default: HYBRIDSAG_DATA_DIR or ./.hybridsag)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("index", help="index a folder (md, markdown, txt, rst) or a JSONL file")
    p.add_argument("path", nargs="?", help="folder to index")
    p.add_argument("--jsonl", help="JSONL file (_id, title, text per line; BEIR corpus.jsonl)")
    p.add_argument("--mode", choices=("sag", "passage"), help="chunking mode (default: settings)")
    p.add_argument("--tenant", help="tenant of the folder's resources")
    p.add_argument("--acl", action="append", help="ACL tag of the folder's resources (repeat)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_index)

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
        help="pick fusion weights and k for the --fuse paths on this labelled set; print settings",
    )
    p.add_argument("--rounds", type=int, help="sag2 expansion rounds (0..2)")
    p.add_argument("--out", help="report folder (default <data-dir>/eval/<dataset>)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("doctor", help="check settings, store, models and Milvus")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_doctor)

    _register_extensions(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failure, 2 bad input)."""
    out = _Utf8Out(out or sys.stdout)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad flag (2)
        return int(exc.code or 0)
    try:
        return int(args.fn(args, out))
    except InputError as exc:
        _error(f"hybridsag: error: {exc}")
        return 2
    except ConfigError as exc:
        _error(f"hybridsag: configuration error: {exc}")
        return 2
    except CorruptStoreError as exc:
        _error(f"hybridsag: damaged store: {exc}")
        return 2
    except HybridSagError as exc:
        _error(f"hybridsag: failed: {exc}")
        return 1
    except KeyboardInterrupt:
        _error("hybridsag: interrupted")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
