#!/usr/bin/env python3
"""Every fusion step's effect per set: the fused search with that one step switched off
(``fusion.rules_off``) against the default, on captured runs (no path is run again).

Each set is captured once (:func:`hybridsag.evaluation.tuning.capture_set`, the cache
``benchmarks/fusion_check.py`` and ``benchmarks/fusion_loso.py`` share). As in
``fusion_check.py``, the sag2 path's order is the captured pool re-scored with the shipped judge
weights, and each variant is scored with :func:`hybridsag.evaluation.offline_runs.fused`, the
search's own fusion step, under the shipped trust model (a fused hit found when any resource it
stands for, its merged neighbours and folded copies included, is gold). The question's evidence
shape, which decides the next-hop slots (``fusion.next_hop_slots = "multi-hop"``), is read
again from the re-scored pool by :func:`hybridsag.paths.evidence.select_evidence` with the
default SAG2 settings, as the sag2 path reads it from its own pool.

Rows: ``default`` (the shipped ``[fusion]`` settings), one row per step of
:data:`hybridsag.fusion.STEPS` switched off, and the settings this issue changed at their
earlier values (``judge_order_floor = 0``, ``next_hop_slots = "always"``, and all of issue
38's changes undone: ``as before``).

    python benchmarks/rule_ablation.py --cache /tmp/cache --set SHARED/musique100 \\
        --set SHARED/cmrc2018@300 --set benchmarks/devsets/codeq

Prints one markdown table per set: R@2, R@5, R@10 and nDCG@10 of each row, and each row's
difference to the default (in points).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from hybridsag.evaluation.offline_runs import DEPTH, fused
from hybridsag.evaluation.tuning import (
    CapturedQuery,
    CapturedSet,
    JudgeFit,
    capture_set,
    judge_fit_of,
    mean_metrics,
    sag2_hits,
)
from hybridsag.fusion import (
    DEFAULT_TRUST_MODEL,
    STEPS,
    ChunkView,
    FusedHit,
    Hit,
    is_heading_only,
    looks_like_identifier,
    markup_only,
    normalize_title,
)
from hybridsag.fusion.text import hyphenated_name, literal_phrase, version_in
from hybridsag.judges.features import load_weights
from hybridsag.paths.evidence import EvidencePassage, reads_multi_hop, select_evidence
from hybridsag.search import FusionInput, fuse_step
from hybridsag.settings import FusionSettings, Sag2Settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion_check import fused_ranking  # noqa: E402 - a sibling script: one way to score a hit

__all__ = ["ablate_set", "evidence_shape", "main", "variants"]

PATHS = ("sag2", "dense", "title", "bm25")
_COLS = ("recall@2", "recall@5", "recall@10", "ndcg@10")


def variants() -> dict[str, FusionSettings]:
    """The fusion settings scored per set: the default, each step off, and the earlier values
    of the settings issue 38 added."""
    base = FusionSettings()
    out = {"default": base}
    for step in STEPS:
        out[f"{step} off"] = base.model_copy(update={"rules_off": (step,)})
    out["judge_order_floor 0"] = base.model_copy(update={"judge_order_floor": 0.0})
    out["judge_order_floor 0.1"] = base.model_copy(update={"judge_order_floor": 0.1})
    out["next_hop_slots always"] = base.model_copy(update={"next_hop_slots": "always"})
    out["as before (issue 38 undone)"] = base.model_copy(
        update={
            "judge_order_floor": 0.0,
            "next_hop_slots": "always",
            "max_per_resource": 0,
            "rules_off": ("drop_stub", "merge_adjacent"),
        }
    )
    return out


def evidence_shape(query: str, hits: Sequence[Hit], views: dict[str, ChunkView]) -> str | None:
    """The evidence shape the sag2 path reads of ``query`` from its judged ``hits`` (in its
    order): :attr:`hybridsag.paths.evidence.Selection.kind` under the default SAG2 settings;
    None for no hit or ``set_k`` 0."""
    s = Sag2Settings()
    if not hits or not s.set_k:
        return None
    passages = [
        EvidencePassage(h.chunk_id, views[h.chunk_id].title, views[h.chunk_id].text, h.judge_p or 0.0)
        for h in hits
        if h.chunk_id in views
    ]
    selection = select_evidence(
        query,
        passages,
        k=s.set_k,
        entity_weight=s.entity_weight,
        bridge_weight=s.bridge_weight,
        relation_floor=s.relation_floor,
    )
    return selection.kind


def _inputs(captured: CapturedSet, judge: JudgeFit) -> list[tuple[CapturedQuery, FusionInput]]:
    out = []
    for q in captured.queries:
        runs = {p: list(h) for p, h in q.question.fusion_in.runs.items() if p in PATHS}
        runs["sag2"] = sag2_hits(q, judge, views=captured.views)
        shape = evidence_shape(q.question.fusion_in.query, runs["sag2"], captured.views)
        out.append((q, replace(q.question.fusion_in, runs=runs, shape=shape)))
    return out


def _can_differ(name: str, f: FusionInput, default: Sequence[FusedHit]) -> bool:
    """Whether the variant ``name`` can rank ``f`` otherwise than the default, whose whole
    fused list is ``default``: False only where the step it switches off cannot fire for this
    query (no title is the query, no chunk is a stub, nothing was folded, merged or capped, the
    question reads as multi-hop for ``next_hop_slots always``...), so that the default's
    ranking is that variant's too and the fusion is not run again."""
    step = name.removesuffix(" off")
    query = f.query
    seen = [f.views[h.chunk_id] for hits in f.runs.values() for h in hits if h.chunk_id in f.views]
    if step == "drop_heading_only":
        return any(is_heading_only(v.text) for v in seen)
    if step == "drop_stub":
        return any(markup_only(v.text) for v in seen)
    if step == "exact_title":
        key = normalize_title(query)
        return bool(key) and any(normalize_title(v.title) == key for v in seen)
    if step == "identifier_tiers":
        return looks_like_identifier(query) is not None or hyphenated_name(query) is not None
    if step == "version_heading":
        return version_in(query) is not None
    if step == "exact_phrase":
        return literal_phrase(query) is not None
    if step == "duplicates":
        return any(h.duplicates for h in default)
    if step == "merge_adjacent":
        return any(h.merged for h in default)
    if step == "resource_cap":
        return any("resource_cap" in h.rules for h in default)
    if name == "next_hop_slots always":
        return not reads_multi_hop(f.shape)
    return True


def ablate_set(
    folder: Path, cache: Path, limit: int | None = None
) -> tuple[str, dict[str, dict[str, float]], float]:
    """``(set name, each variant's mean metrics, share of its questions read as multi-hop)``.
    Each question's variants are fused one after the other (the fusion's text caches stay warm),
    and a variant that cannot differ from the default for it (:func:`_can_differ`) takes the
    default's ranking."""
    captured = capture_set(folder, cache=cache, limit=limit)
    inputs = _inputs(captured, judge_fit_of(load_weights("default")))
    multi = sum(reads_multi_hop(f.shape) for _q, f in inputs) / max(len(inputs), 1)
    runs = variants()
    rankings: dict[str, list[tuple[list[str], frozenset[str]]]] = {name: [] for name in runs}
    for q, f in inputs:
        default = fuse_step(f, runs["default"], DEFAULT_TRUST_MODEL)[0]
        base = fused_ranking(default[:DEPTH], captured.views, q.gold)
        for name, fusion in runs.items():
            if name == "default" or not _can_differ(name, f, default):
                rankings[name].append((base, q.gold))
                continue
            hits = fused(f, fusion, model=DEFAULT_TRUST_MODEL)
            rankings[name].append((fused_ranking(hits, captured.views, q.gold), q.gold))
    results = {name: mean_metrics(r) for name, r in rankings.items()}
    return captured.name, results, multi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", type=str, default=[],
                    help="a BEIR folder, optionally FOLDER@LIMIT (its first LIMIT questions)")
    ap.add_argument("--cache", type=Path, default=Path(".hybridsag/cache"))
    args = ap.parse_args(argv)
    out = sys.stdout
    for spec in args.set:
        folder, _, lim = spec.partition("@")
        name, results, multi = ablate_set(Path(folder), args.cache, int(lim) if lim else None)
        base = results["default"]
        out.write(f"\n**{name}** ({100 * multi:.0f}% of its questions read as multi-hop)\n\n")
        out.write("| run | R@2 | R@5 | R@10 | nDCG@10 | ΔR@2 | ΔR@5 | ΔR@10 | ΔnDCG@10 |\n")
        out.write("|---|---|---|---|---|---|---|---|---|\n")
        for run, m in results.items():
            cells = " | ".join(f"{100 * m[c]:.2f}" for c in _COLS)
            if run == "default":
                deltas = " | | | "
            else:
                deltas = " | ".join(f"{100 * (m[c] - base[c]):+.2f}" for c in _COLS)
            out.write(f"| {run} | {cells} | {deltas} |\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
