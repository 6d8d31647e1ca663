"""One result of a search as a response shows it: a fused hit made into a
:class:`~hybridsag.results.SearchResult` with its stitched text, its paths' facts and its
explanation (:func:`build_result`), the places of the copies folded into it (:func:`places`) and
what the response says of the trust step (:func:`trust_summary`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from hybridsag.fusion import RULE_REASONS, FusedHit, Trust
from hybridsag.output.agent import copy_place, more_words
from hybridsag.records.rows import ChunkRecord
from hybridsag.results import SearchResult
from hybridsag.search.resources import STALE_CHANGED, STALE_DELETED, STALE_WHY

__all__ = ["build_result", "copy_of", "places", "trust_summary"]


def build_result(
    rank: int,
    fused: FusedHit,
    recs: Sequence[ChunkRecord],
    stale: str | None,
    explain: bool,
    max_text: int,
    trust: Trust | None = None,
    hidden: frozenset[str] = frozenset(),
    also_in: tuple[Mapping[str, Any], ...] = (),
    *,
    more: tuple[Mapping[str, Any], ...] = (),
    score: float | None = None,
    one_hop: str | None = None,
) -> SearchResult:
    """One result (``stale``: why its source file is stale, None when fresh) of the fused
    hit ``fused``, whose chunk and the neighbours merged into it (``fused.merged``) are
    ``recs`` (its own first): their text joined in source order (:func:`_stitched`), their
    whole line and byte range. The paths in ``hidden`` show rank and RRF term but no raw or
    path score (``None``), nor a score in the explanation; ``also_in``: the copies fusion
    folded into it (:func:`copy_of`); ``more``: its resource's further results the
    per-resource cap moved below the others' (not shown above); ``score``: its place's
    score (:func:`~hybridsag.fusion.monotone_scores`; the fused score when None);
    ``one_hop``: the shape of a question whose next-hop slots were off (said in the
    ``why`` of a result a next-hop query found)."""
    rec = recs[0]
    paths: dict[str, dict[str, Any]] = {}
    why: list[str] = []
    for c in fused.contributions:
        facts = {k: v for k, v in c.detail.items() if k != "resource_id"}
        if c.judge_p is not None:
            facts["judge_p"] = c.judge_p
        if c.next_hop:
            facts["next_hop"] = True
        shown = c.path not in hidden
        paths[c.path] = {
            "rank": c.rank,
            "raw_score": c.raw_score if shown else None,
            "score": c.score if shown else None,
            "rrf_term": c.rrf_term,
            **facts,
        }
        if explain:
            extra = ", ".join(f"{k}={v}" for k, v in facts.items() if k != "version")
            why.append(
                f"{c.path}: rank {c.rank}"
                + (f", raw score {c.raw_score:.4g}" if shown else "")
                + (f", {extra}" if extra else "")
            )
    if explain and trust is not None:
        for path, reason in trust.reasons.items():
            # the trust signals read corpus-wide scores: a tenant-scoped search gets the
            # weights only
            said = "" if hidden else f", {reason}"
            why.append(f"trust {path}: weight {trust.weights.get(path, 0.0):.3g}{said}")
    text, start_line, end_line, byte_start, byte_end = _stitched(recs)
    score = fused.score if score is None else score
    if explain:
        if one_hop is not None and fused.next_hop_rank is not None:
            why.append(
                f"next-hop slot off: the question reads as one-hop (evidence shape "
                f"{one_hop!r}), so a next-hop find keeps its fused place"
            )
        why.extend(f"rule {r}: {RULE_REASONS.get(r, r)}" for r in fused.rules)
        if len(recs) > 1:
            why.append(
                "merged: " + ", ".join(f"lines {r.start_line}-{r.end_line}" for r in
                                       sorted(recs, key=lambda r: r.ordinal))
            )  # fmt: skip
        if also_in:
            why.append("also in: " + ", ".join(copy_place(a) for a in also_in))
        if more:
            why.append(f"more in this file: {more_words(more)}")
        if score != fused.score:
            why.append(
                f"score {score:.4g}: the fused score {fused.score:.4g} evened with the "
                "results beside it, so that scores never rise down the list"
            )
        if stale is not None:
            why.append(
                f"stale: the source file was {stale} since it was indexed "
                f"({STALE_WHY.get(stale, stale)}); index its folder again or run "
                "hybridsag reconcile"
                if stale in (STALE_CHANGED, STALE_DELETED)
                else f"stale: the source file is {stale} ({STALE_WHY.get(stale, stale)}); "
                "index its folder again or run hybridsag reconcile"
            )
    return SearchResult(
        rank=rank,
        chunk_id=rec.chunk_id,
        resource_id=rec.resource_id,
        title=rec.title,
        heading_path=rec.heading_path,
        text=text[:max_text],
        start_line=start_line,
        end_line=end_line,
        byte_start=byte_start,
        byte_end=byte_end,
        content_sha256=rec.content_sha256 if len(recs) == 1 else _sha256(text),
        source_uri=rec.source_uri,
        score=score,
        paths=paths,
        rules=fused.rules,
        why=tuple(why),
        stale=stale is not None,
        stale_reason=stale,
        rrf_rank=fused.rrf_rank,
        text_truncated=len(text) > max_text,
        tenant=rec.tenant,
        also_in=also_in,
        fused_score=fused.score,
        merged=tuple(r.chunk_id for r in sorted(recs[1:], key=lambda r: r.ordinal)),
        more_in_resource=more,
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stitched(recs: Sequence[ChunkRecord]) -> tuple[str, int, int, int, int]:
    """The text, first and last line and byte range of neighbouring chunks of one resource
    read as one (source order): each chunk's text from where the one before it ends (the
    sentences neighbours share are said once: chunk texts are exact slices of the source, so
    their byte ranges say how much they overlap), a blank line where the source between two of
    them held only markup or space."""
    ordered = sorted(recs, key=lambda r: r.ordinal)
    parts = [ordered[0].text]
    end = ordered[0].byte_end
    for r in ordered[1:]:
        if r.byte_start >= end:
            parts.append("\n\n" + r.text)
        elif r.byte_end > end:
            raw = r.text.encode("utf-8")[end - r.byte_start :]
            try:
                parts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:  # not one source's slices (cannot be, but never garble)
                parts.append("\n\n" + r.text)
        end = max(end, r.byte_end)
    first, last = ordered[0], max(ordered, key=lambda r: r.byte_end)
    return "".join(parts), first.start_line, last.end_line, first.byte_start, last.byte_end


#: What ``SearchResult.also_in`` says of each copy: the fields of its chunk record that place it.
_COPY_FIELDS = (
    "chunk_id", "resource_id", "tenant", "title", "source_uri", "heading_path", "start_line",
    "end_line",
)  # fmt: skip


def copy_of(rec: ChunkRecord) -> dict[str, Any]:
    """Where a copy folded into a result is (``SearchResult.also_in``)."""
    return {name: getattr(rec, name) for name in _COPY_FIELDS}


def places(recs: Sequence[ChunkRecord]) -> tuple[dict[str, Any], ...]:
    """Where the copies folded into a result are (``SearchResult.also_in``), in their order:
    one place per run of neighbouring chunks of one resource (the copies of a merged result's
    chunks are one place of that resource, as the result is), its ``chunk_id`` the run's first
    in the source, its lines the run's, and ``merged`` the run's other chunk ids when it has
    any."""
    runs: list[list[ChunkRecord]] = []
    for rec in recs:
        run = next(
            (
                r
                for r in runs
                if r[0].key == rec.key
                and r[0].heading_path == rec.heading_path
                and (rec.ordinal == max(x.ordinal for x in r) + 1
                     or rec.ordinal == min(x.ordinal for x in r) - 1)
            ),
            None,
        )  # fmt: skip
        if run is None:
            runs.append([rec])
        else:
            run.append(rec)
    out = []
    for run in runs:
        ordered = sorted(run, key=lambda r: r.ordinal)
        place = copy_of(ordered[0])
        if len(ordered) > 1:
            place["end_line"] = max(r.end_line for r in ordered)
            place["merged"] = [r.chunk_id for r in ordered[1:]]
        out.append(place)
    return tuple(out)


def trust_summary(trust: Trust | None, *, signals: bool = True) -> dict[str, Any]:
    """What a response says of the trust step (rounded for reading); without ``signals`` (a
    tenant-scoped search: they read corpus-wide scores) the decision only."""
    if trust is None:
        return {}
    out: dict[str, Any] = {
        "weights": {p: round(w, 4) for p, w in trust.weights.items()},
        "judge_holds": trust.judge_holds,
        "dense_share": round(trust.dense_share, 4),
    }
    if signals:
        out["signals"] = {k: round(v, 4) for k, v in trust.signals.items()}
    return out
