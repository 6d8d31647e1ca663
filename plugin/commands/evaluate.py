"""``hybridsag eval``: the paths alone and fused on a BEIR-style folder, the fusion weights
tuned on it (``--tune-weights``), paired comparisons (``--compare``) and the grid (``--grid``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from hybridsag.commands.common import (
    INTERRUPTED,
    error_line,
    in_process_only,
    print_json,
    progress_factory,
    settings_from_args,
)
from hybridsag.errors import InputError
from hybridsag.judges import judge_names
from hybridsag.paths import path_names

__all__ = ["add_eval", "cmd_eval"]


def add_eval(sub: Any) -> None:
    """The ``eval`` command's parser."""
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
        help="pick the fusion weights and judge order of the --fuse paths (with rrf's k or "
        "convex's normalisation: --grid-method) on this labelled set, each candidate fused as "
        "a search fuses, trust step included; print the settings",
    )
    p.add_argument("--rounds", type=int, help="sag2 expansion rounds (0..2)")
    p.add_argument("--out", help="report folder (default <data-dir>/eval/<dataset>)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    _add_compare_arguments(p)
    p.set_defaults(fn=cmd_eval)


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from hybridsag.evaluation.harness import format_table, run_eval

    settings = settings_from_args(args)
    in_process_only(settings, "eval")
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
        progress=progress_factory(not args.quiet),
    )
    if args.tune_weights:
        from hybridsag.evaluation.harness import tune_weights

        summary = tune_weights(
            settings, Path(args.data), method=args.grid_method, **common  # type: ignore[arg-type]
        )
        if args.json:
            print_json(summary, out)
        else:
            c = summary["chosen"]
            out.write(
                f"tuned on {summary['dataset']} ({summary['questions']} questions), paths "
                f"{', '.join(summary['fused_paths'])}: R@2 {c['recall@2']:.4f}  R@5 "
                f"{c['recall@5']:.4f}  R@10 {c['recall@10']:.4f}\n"
            )
            e = summary["configured"]
            out.write(f"the configured fusion ({e['method']}):  R@10 {e['recall@10']:.4f}\n")
            for name, m in summary["single_paths"].items():
                out.write(f"{name} alone:  R@10 {m['recall@10']:.4f}\n")
            out.write("\nsettings to use (TOML):\n" + summary["settings_toml"])
            out.write("or in the environment:\n")
            for key, value in summary["settings_env"].items():
                out.write(f"  {key}='{value}'\n")
        return 0
    summary = run_eval(settings, Path(args.data), paths=paths, **common)  # type: ignore[arg-type]
    if args.json:
        print_json(summary, out)
    else:
        out.write(format_table(summary) + "\n")
        out.write(f"reports written to {summary['out']}\n")
    if "partial" in summary:
        error_line(f"hybridsag: interrupted: partial results of what ran written to {summary['out']}")
        return INTERRUPTED
    return 0


def _floats(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated numbers") from None


def _add_compare_arguments(p: argparse.ArgumentParser) -> None:
    """The eval flags of paired comparisons and the grid."""
    p.add_argument(
        "--compare",
        metavar="A,B[,C...]",
        help="paired comparison of arms on the same questions: a path (sag2, dense, ...), "
        "fused, a path set (sag2+dense), options (fused:method=rrf,k=30,dense=1.0,rounds=2,"
        "judge_order=false; k is rrf's: refused under convex), a settings file (*.toml) or a "
        "TREC run (*.trec); needs hybridsag[ab]",
    )
    p.add_argument(
        "--stat-test",
        choices=("student", "fisher"),
        default="student",
        help="--compare's paired test (ranx): paired t-test or Fisher's randomization test",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="--compare's significance level")
    p.add_argument(
        "--grid",
        action="store_true",
        help="sweep a fused search over the --fuse paths: the path weights and sag2 rounds, and "
        "the --grid-method's own parameter (rrf: k; convex: the normalisation); every point is "
        "fused as a search fuses, trust step included; print the best points",
    )
    p.add_argument(
        "--grid-method",
        choices=("convex", "rrf"),
        help="the fusion method --grid and --tune-weights sweep (default: fusion.method)",
    )
    p.add_argument(
        "--grid-k",
        help="rrf only: --grid's RRF k values (default 10,30,60,100); refused for convex",
    )
    p.add_argument(
        "--grid-normalisation",
        help="convex only: --grid's normalisations, minmax,zscore (default: "
        "fusion.normalisation); refused for rrf",
    )
    p.add_argument("--grid-weights", help="--grid's weights per path (default 0,0.25,...,4)")
    p.add_argument("--grid-rounds", help="--grid's sag2 rounds (default 0,1,2)")


def _cmd_eval_compare(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    """``eval --compare`` and ``eval --grid`` (hybridsag.ab.offline)."""
    from hybridsag.ab.offline import (
        compare_arms,
        format_compare,
        format_grid,
        grid_search,
    )

    progress = progress_factory(not args.quiet)
    if args.compare and args.grid:
        raise InputError("--compare and --grid are separate runs: give one")
    out_dir = Path(args.out) if args.out else None
    if args.compare:
        if not 0 < args.alpha < 0.5:
            raise InputError(f"--alpha {args.alpha} must be in (0, 0.5)")
        summary = compare_arms(
            settings,
            Path(args.data),
            args.compare,
            limit=args.limit,
            out=out_dir,
            stat_test=args.stat_test,
            alpha=args.alpha,
            progress=progress,
        )
        text = format_compare(summary)
    else:
        fuse = [p.strip() for p in args.fuse.split(",") if p.strip()] if args.fuse else None
        options: dict[str, Any] = {"method": args.grid_method}
        if (ks := _floats(args.grid_k, "--grid-k")) is not None:
            options["ks"] = ks
        if args.grid_normalisation is not None:
            norms = args.grid_normalisation.split(",")
            options["normalisations"] = tuple(n.strip() for n in norms if n.strip())
        if (ws := _floats(args.grid_weights, "--grid-weights")) is not None:
            if 1.0 not in ws:
                raise InputError("--grid-weights must include 1 (weights are relative)")
            options["weights"] = ws
        if (rs := _floats(args.grid_rounds, "--grid-rounds")) is not None:
            options["rounds"] = tuple(int(r) for r in rs)
        summary = grid_search(
            settings,
            Path(args.data),
            fuse=fuse,
            limit=args.limit,
            out=out_dir,
            progress=progress,
            **options,
        )
        text = format_grid(summary)
    if args.json:
        print_json(summary, out)
    else:
        out.write(text + "\n")
        out.write(f"reports written to {summary['out']}\n")
    return 0
