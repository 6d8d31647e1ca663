"""``hybridsag eval``: retrieval paths alone and fused, side by side, on a BEIR-style folder.

Recall@K is the HippoRAG 2 / SAG definition: per question, the
share of its gold passages found in the top K passages returned, then the mean over questions.
MRR@10 is the reciprocal rank of the first gold passage in the top 10; nDCG@10 uses binary gains
(Järvelin and Kekäläinen, 2002). Latency is wall time per query of the path alone (or of the whole
fused search), reported as p50/p95. When the queries carry a ``type`` (2wiki's comparison,
compositional, inference, bridge_comparison), every path's metrics are also given per type
(``by_type``). For SAG2, ``gold_in_pool_round<r>`` is the share of a question's gold in the
judged pool after round ``r`` (a question whose loop stopped earlier counts its last pool).
A path that called remote models (an HTTP embedder, a remote judge) gives, per query, each
remote's calls, ms, tokens and cache answers (``judge/reranker.calls_per_query``, ...; the
totals ``remote_calls_per_query`` and ``remote_ms_per_query``), and a ``remote a query:`` line
in the table.

The corpus is indexed into a fresh store under ``<out>/index`` in passage mode (one chunk per
passage). Dense vectors are cached by (model, text hash) under ``<cache>`` so that repeated runs
do not pay the embedding again; the dense build time reported is the time of that run.

Every question and qrel is checked before the first search: a question a search would refuse
(empty, too long, control characters), a repeated question id, and a qrel naming a passage the
corpus lacks are reported (``skipped``: the count and each id with its reason) and left out; a
question left without gold is left out too. A run interrupted (Ctrl-C) during the questions
still writes its reports, with the metrics of the questions that ran, marked ``partial``.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from hybridsag.errors import ConfigError, InputError, QueryError
from hybridsag.evaluation.measures import NAMES, Gold, metrics_for, ranked_results
from hybridsag.paths import PATHS, path_names
from hybridsag.paths.query import validate_query
from hybridsag.remote_calls import remote_figures
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

__all__ = [
    "FUSED",
    "Dataset",
    "eval_path_names",
    "eval_versions",
    "load_dataset",
    "open_eval_index",
    "questions_of",
    "ranked_resources",
    "run_eval",
    "skipped_line",
    "tune_weights",
    "uses_vectors",
]

#: The chunk cap of an eval index: the largest ``chunking.max_chars`` allowed.
PASSAGE_MAX_CHARS = 100_000
#: The eval "path" that runs a whole fused search.
FUSED = "fused"


def eval_path_names() -> tuple[str, ...]:
    """What ``--paths`` accepts: every registered path, and ``fused``."""
    return (*path_names(), FUSED)


@dataclass(frozen=True)
class Dataset:
    name: str
    folder: Path
    queries: Sequence[tuple[str, str]]  # (query id, text)
    #: query id -> its gold passages with their grades (a qrels score, 1 when there is none)
    qrels: Mapping[str, Gold]
    corpus_path: Path
    passages: int
    digest: str
    #: query id -> the query's ``type`` field, for the queries that have one
    types: Mapping[str, str] = field(default_factory=dict)
    #: what was left out before the first search: question id (or ``qrels.tsv:<line>``) ->
    #: the reason
    skipped: Mapping[str, str] = field(default_factory=dict)


def _sha256_files(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def load_dataset(
    folder: Path, *, limit: int | None = None, max_query_chars: int = 4096
) -> Dataset:
    """Load ``corpus.jsonl``, ``queries.jsonl`` and ``qrels.tsv``; questions without gold are
    dropped. Every question and qrel is checked first (see the module docstring): the bad ones
    are left out and named in :attr:`Dataset.skipped`. :class:`InputError` names a missing
    file or a malformed line (a file that is not of the format at all)."""
    folder = Path(folder)
    files = [folder / n for n in ("corpus.jsonl", "queries.jsonl", "qrels.tsv")]
    for f in files:
        if not f.is_file():
            raise InputError(f"{f} is missing: a BEIR-style folder holds corpus.jsonl, "
                             "queries.jsonl and qrels.tsv")
    corpus_ids: set[str] = set()
    with files[0].open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                    corpus_ids.add(str(obj.get("_id", obj.get("id", ""))))
                except (json.JSONDecodeError, AttributeError):
                    continue  # the ingest reports a bad corpus line
    skipped: dict[str, str] = {}
    qrels: dict[str, dict[str, float]] = {}
    with files[2].open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if lineno == 1 and parts[0] == "query-id":
                continue
            if len(parts) < 2:
                raise InputError(f"{files[2]}:{lineno}: expected query-id<TAB>corpus-id")
            score = 1.0
            if len(parts) >= 3 and parts[2].strip() not in ("", "1"):
                try:
                    score = float(parts[2])
                except ValueError:
                    raise InputError(
                        f"{files[2]}:{lineno}: score {parts[2]!r} is not a number"
                    ) from None
                if not math.isfinite(score):
                    raise InputError(f"{files[2]}:{lineno}: score {parts[2]!r} is not finite")
                if score <= 0:
                    continue
            if parts[1] not in corpus_ids:
                skipped[f"qrels.tsv:{lineno}"] = (
                    f"gold passage {parts[1]!r} of {parts[0]!r} is not in the corpus"
                )
                continue
            grades = qrels.setdefault(parts[0], {})
            grades[parts[1]] = max(grades.get(parts[1], 0.0), score)
    queries: list[tuple[str, str]] = []
    types: dict[str, str] = {}
    seen: set[str] = set()
    with files[1].open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                qid, text = str(obj["_id"]), obj["text"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise InputError(f"{files[1]}:{lineno}: not a query object ({exc})") from exc
            if qid not in qrels:
                continue
            if qid in seen:
                skipped[qid] = f"repeated question id (queries.jsonl:{lineno})"
                continue
            seen.add(qid)
            try:
                text = validate_query(text, max_chars=max_query_chars)
            except QueryError as exc:
                skipped[qid] = str(exc)
                continue
            queries.append((qid, text))
            if isinstance(obj.get("type"), str) and obj["type"]:
                types[qid] = obj["type"]
    if limit is not None:
        queries = queries[:limit]
    return Dataset(
        name=folder.resolve().name,
        folder=folder,
        queries=queries,
        qrels={q: Gold(qrels[q]) for q, _ in queries},
        corpus_path=files[0],
        passages=len(corpus_ids),
        digest=_sha256_files(files),
        types={q: types[q] for q, _ in queries if q in types},
        skipped=skipped,
    )


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[idx]


def _dedupe_resources(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("hybridsag", "pymilvus", "milvus-lite", "sentence-transformers", "torch",
                "jieba", "httpx", "numpy"):
        try:
            out[pkg] = importlib_metadata.version(pkg)
        except importlib_metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


@dataclass
class _PathRun:
    per_query: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)
    #: per question, the share of its gold in the pool after each round it ran
    pool_gold: list[list[float]] = field(default_factory=list)
    #: per question, its type (``""`` when the set has none)
    types: list[str] = field(default_factory=list)


def _apply_overrides(settings: Settings, judge: str | None, rounds: int | None) -> Settings:
    if judge is None and rounds is None:
        return settings
    try:
        data = settings.model_dump()
        if judge is not None:
            data["judge"]["name"] = judge
        if rounds is not None:
            data["sag2"]["rounds"] = rounds
        return type(settings).model_validate(data)
    except ValueError as exc:
        raise InputError(f"bad --judge/--rounds: {exc}") from exc


def open_eval_index(
    settings: Settings,
    ds: Dataset,
    out: Path,
    *,
    needs_dense: bool,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Index the corpus into a fresh store under ``out/index`` (passage mode; with ``store.url``
    the database named must be empty: ConfigError otherwise); with
    ``needs_dense`` also embed (cached) and write the vectors. Returns the open HybridSearch and
    the index figures."""
    from hybridsag.search import HybridSearch

    index_dir = out / "index"
    if index_dir.exists():
        shutil.rmtree(index_dir)
    run_settings = settings.model_copy(
        update={
            "data_dir": index_dir,
            # a benchmark's passages are given whole: no hard cap cuts one (2wiki has 6 KB ones)
            "chunking": settings.chunking.model_copy(
                update={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS}
            ),
        }
    )
    lexical_settings = run_settings.model_copy(
        update={"embedding": run_settings.embedding.model_copy(update={"model": "none"})}
    )
    noop = lambda n: None  # noqa: E731
    # 1. the lexical index: what every path reads
    with HybridSearch(lexical_settings) as hs:
        parts = hs.components
        if parts.store.is_postgres and parts.store.counts()["resources"]:
            raise ConfigError(
                f"eval indexes into a fresh store, but store.url names {parts.store.name}, "
                "which holds resources already: point store.url at an empty database"
            )
        tick = progress("index", ds.passages) if progress else noop
        warm_s = parts.tokenizer.warm()  # jieba's dictionary load is start-up, not build work
        t0 = time.perf_counter()
        report = hs.ingest_jsonl(ds.corpus_path, mode="passage", progress=tick)
        build_s = time.perf_counter() - t0
        info: dict[str, Any] = {
            "build_s": round(build_s, 3),
            "passages": parts.store.counts()["chunks"],
            "bytes": parts.store.bytes_on_disk(),
            "skipped": len(report.errors),
            "tokenizer_load_s": round(warm_s, 3),
        }
    if not needs_dense:
        return HybridSearch(lexical_settings), info
    # 2. the dense index, from the same chunks (what the write path would have embedded)
    from hybridsag.vectors.embed_cache import CachedEmbedder
    from hybridsag.vectors.embedder import make_embedder

    inner = make_embedder(run_settings)
    assert inner is not None  # needs_dense implies an embedding model
    emb = CachedEmbedder(inner, settings.data_dir / "cache")
    hs = HybridSearch(run_settings, embedder=emb)
    try:
        tick = progress("embed", info["passages"]) if progress else noop
        t0 = time.perf_counter()
        n = hs.components.writer().backfill_vectors(progress=tick)
        info["dense_build_s"] = round(time.perf_counter() - t0, 3)
        info["vectors"] = n
        info["dense_bytes"] = _dir_bytes(run_settings.milvus_lite_path)
        info["embed_computed"] = emb.computed
        info["embed_seconds"] = round(emb.seconds, 3)
        if emb.computed:
            info["embed_per_s"] = round(emb.computed / max(emb.seconds, 1e-9), 1)
    except BaseException:
        hs.close()
        raise
    return hs, info


def _use_vectors(names: Iterable[str]) -> bool:
    """Whether any of these paths reads the dense index or the passage vectors."""
    return any(
        name in PATHS and (PATHS[name].needs_dense or PATHS[name].reads_vectors) for name in names
    )


def _fuse_paths(fuse: Sequence[str] | None, settings: Settings) -> tuple[str, ...]:
    """The paths the fused run merges: ``--fuse``, else what a search runs by default."""
    fuse_paths = tuple(fuse) if fuse else tuple(settings.search.paths)
    for p in fuse_paths:
        if p not in PATHS:
            raise InputError(f"unknown path {p!r} in --fuse; valid: {', '.join(path_names())}")
    return fuse_paths


def run_eval(
    settings: Settings,
    data: Path,
    *,
    paths: Sequence[str] = ("bm25",),
    fuse: Sequence[str] | None = None,
    limit: int | None = None,
    out: Path | None = None,
    judge: str | None = None,
    rounds: int | None = None,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
) -> dict[str, Any]:
    """Index ``data`` into a fresh store, run each path, write reports, return the summary.

    ``progress(label, total)`` returns a callback taking an increment (for progress bars).
    The summary's ``skipped`` names the questions and qrels left out before the first search.
    A KeyboardInterrupt while the questions run ends the run early: the reports are written
    with the metrics of what ran and the summary is returned with ``partial`` (which path, how
    many questions) instead of the interrupt propagating; one during indexing propagates.
    """
    for p in paths:
        if p not in eval_path_names():
            raise InputError(f"unknown eval path {p!r}; valid: {', '.join(eval_path_names())}")
    ds = load_dataset(data, limit=limit, max_query_chars=settings.query.max_chars)
    out = Path(out) if out is not None else settings.data_dir / "eval" / ds.name
    out.mkdir(parents=True, exist_ok=True)
    fuse_paths = _fuse_paths(fuse, settings)
    settings = _apply_overrides(settings, judge, rounds)
    wanted = set(paths) | (set(fuse_paths) if FUSED in paths else set())
    needs_dense = settings.embedding.model != "none" and _use_vectors(wanted)
    noop = lambda n: None  # noqa: E731
    summary: dict[str, Any] = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "graded": any(g.graded for g in ds.qrels.values()),
        "skipped": {"count": len(ds.skipped), "ids": dict(ds.skipped)},
    }
    hs, summary["index"] = open_eval_index(
        settings, ds, out, needs_dense=needs_dense, progress=progress
    )
    summary["paths"] = {}
    details: list[dict[str, Any]] = []
    try:
        if "sag2" in wanted:
            hs.components.retriever("sag2").trace.resources = True  # type: ignore[attr-defined]
        filters = Filters()
        for name in paths:
            run = _PathRun()
            tick = progress(name, len(ds.queries)) if progress else noop
            try:
                for qid, text in ds.queries:
                    t0 = time.perf_counter()
                    if name == FUSED:
                        resp = hs.search(text, top_k=10, paths=fuse_paths, explain=False)
                        # a result names the copies of its text folded into it (also_in):
                        # one place, found when any copy is gold (metrics.ranked_results)
                        ranked = ranked_results(
                            [
                                [r.resource_id, *(a["resource_id"] for a in r.also_in)]
                                for r in resp.results
                            ],
                            ds.qrels[qid],
                        )
                        extra = dict(resp.usage.get("sag2", {}))
                        extra.update(remote_figures(resp.usage.get("remote")))
                    else:
                        res = hs.run_path(name, text, limit=10, filters=filters)
                        ranked = _dedupe_resources([_resource_of(h) for h in res.hits])
                        extra = dict(res.usage)
                        extra.update(remote_figures(extra.pop("remote", None)))
                    ms = (time.perf_counter() - t0) * 1000.0
                    gold = ds.qrels[qid]
                    m = metrics_for(ranked, gold)
                    run.latencies.append(ms)
                    pools = extra.pop("pool_resources_per_round", None)
                    if pools:
                        run.pool_gold.append(
                            [len(gold.intersection(p)) / len(gold) for p in pools]
                        )
                    for key, value in extra.items():
                        if isinstance(value, int | float) and not isinstance(value, bool):
                            run.extra.setdefault(key, []).append(float(value))
                    run.per_query.append(m)
                    run.types.append(ds.types.get(qid, ""))
                    details.append(
                        {
                            "path": name,
                            "query_id": qid,
                            "returned": ranked[:10],
                            "gold": sorted(gold),
                            **{k: round(v, 4) for k, v in m.items()},
                            "ms": round(ms, 3),
                        }
                    )
                    tick(1)
            except KeyboardInterrupt:
                summary["partial"] = {
                    "interrupted_path": name,
                    "questions_done": len(run.per_query),
                    "questions": len(ds.queries),
                    "paths_not_run": list(paths[list(paths).index(name) + 1 :]),
                }
                if run.per_query:
                    summary["paths"][name] = _aggregate(run)
                break
            summary["paths"][name] = _aggregate(run)
        if FUSED in paths:
            summary["fused_paths"] = list(fuse_paths)
            summary["fusion"] = {
                "k": settings.fusion.k,
                "weights": {p: settings.fusion.weights.get(p, 1.0) for p in fuse_paths},
                "judge_accept": settings.fusion.judge_accept,
                "judge_order": settings.fusion.judge_order,
                "method": settings.fusion.method,
                "normalisation": settings.fusion.normalisation,
                "trust": settings.fusion.trust,
            }
    finally:
        hs.close()
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    with (out / "details.jsonl").open("w", encoding="utf-8") as fh:
        for row in details:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    config = {
        "settings": settings.public_dict(),
        "paths": list(paths),
        "fuse": list(fuse_paths),
        "limit": limit,
        "versions": _versions(),
        "data": {"folder": str(ds.folder), "sha256": ds.digest},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n", "utf-8")
    summary["out"] = str(out)
    return summary


def _resource_of(hit: Any) -> str:
    rid = hit.detail.get("resource_id")
    return str(rid) if rid else hit.chunk_id.rsplit("@", 1)[0]


def tune_weights(
    settings: Settings,
    data: Path,
    *,
    fuse: Sequence[str] | None = None,
    limit: int | None = None,
    out: Path | None = None,
    judge: str | None = None,
    rounds: int | None = None,
    method: str | None = None,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
) -> dict[str, Any]:
    """Pick the fusion weights and ``judge_order`` (with k for rrf, the normalisation for
    convex) of the fusion ``method`` (default ``fusion.method``) on a labelled set the team
    supplies, the trust step as configured.

    The paths run once per question as a fused search over ``fuse`` runs them; every grid
    point (:func:`hybridsag.evaluation.offline_runs.grid`: a weight per path from ``GRID_WEIGHTS``,
    relative; k from ``GRID_KS`` for rrf, minmax and zscore for convex; ``judge_order`` on and
    off with sag2 among the paths) is scored with the search's own fusion step, so a search
    with the printed settings gets the recall measured here. The best mean Recall@10 wins
    (then Recall@5, judge order on, the smaller total change of the weights from 1.0 and of k
    from 60, the configured normalisation). Returns the chosen settings and their recall, and
    the configured fusion's and each single path's (its weight alone) for comparison.
    InputError for an unknown method.
    """
    from hybridsag.fusion import NORMALISERS
    from hybridsag.evaluation.offline_runs import (
        GRID_KS,
        GRID_WEIGHTS,
        Scored,
        capture,
        check_method,
        describe,
        fusion_variant,
        grid,
        relative_weights,
        score,
    )

    method = settings.fusion.method if method is None else method
    check_method(method, (), where="--tune-weights")
    ds = load_dataset(data, limit=limit)
    out = Path(out) if out is not None else settings.data_dir / "eval" / f"{ds.name}-tune"
    out.mkdir(parents=True, exist_ok=True)
    fuse_paths = _fuse_paths(fuse, settings)
    settings = _apply_overrides(settings, judge, rounds)
    needs_dense = settings.embedding.model != "none" and _use_vectors(fuse_paths)
    hs, index_info = open_eval_index(settings, ds, out, needs_dense=needs_dense, progress=progress)
    try:
        tick = progress("paths", len(ds.queries)) if progress else None
        cap = capture(hs, questions_of(ds), fuse_paths, progress=tick)
    finally:
        hs.close()
    paths, base = cap.paths, settings.fusion
    # judge_order only matters where a judge scored hits; on a tie it stays on (the robust one)
    orders = (True, False) if "sag2" in paths else (base.judge_order,)
    own = {"ks": GRID_KS} if method == "rrf" else {"normalisations": NORMALISERS}
    points = grid(base, method, relative_weights(paths, GRID_WEIGHTS), judge_orders=orders, **own)

    def preference(r: Scored) -> tuple[float, float, bool, float, bool]:
        f, m = r.fusion, r.metrics
        change = sum(abs(w - 1.0) for w in f.weights.values())
        change += abs(f.k - 60.0) / 100.0 if method == "rrf" else 0.0
        same_norm = f.normalisation == base.normalisation
        return (m["recall@10"], m["recall@5"], f.judge_order, -change, same_norm)

    def recalls(r: Scored) -> dict[str, float]:
        return {key: round(r.metrics[key], 4) for key in ("recall@2", "recall@5", "recall@10")}

    results = sorted((score(cap, p) for p in points), key=preference, reverse=True)
    chosen = describe(results[0].fusion)
    singles = {
        name: recalls(score(cap, fusion_variant(base, method=method, weights={
            p: float(p == name) for p in paths
        })))
        for name in paths
    }  # fmt: skip
    env = {f"HYBRIDSAG_FUSION__{k.upper()}": v for k, v in chosen.items()}
    env["HYBRIDSAG_FUSION__TRUST"] = base.trust
    toml = [f"{k} = {json.dumps(v)}" for k, v in chosen.items() if k != "weights"]
    toml += [f"trust = {json.dumps(base.trust)}", "[fusion.weights]"]
    summary = {
        "dataset": ds.name,
        "questions": len(ds.queries),
        "index": index_info,
        "fused_paths": list(paths),
        "method": method,
        "trust": base.trust,
        "chosen": {**chosen, **recalls(results[0])},
        "configured": {"method": base.method, **recalls(score(cap, base))},
        "single_paths": singles,
        "settings_env": {
            k: v if isinstance(v, str) else json.dumps(v) for k, v in env.items()
        },
        "settings_toml": "\n".join(["[fusion]", *toml, *(
            f"{p} = {w}" for p, w in chosen["weights"].items()
        )]) + "\n",  # fmt: skip
        "grid_points": len(results),
        "top": [{**describe(r.fusion), **recalls(r)} for r in results[:15]],
    }
    (out / "tune.json").write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    summary["out"] = str(out)
    return summary


def questions_of(ds: Dataset) -> list[tuple[str, str, frozenset[str]]]:
    """``(question id, text, gold)`` of every question of ``ds``, as
    :func:`hybridsag.evaluation.offline_runs.capture` takes them."""
    return [(qid, text, ds.qrels[qid]) for qid, text in ds.queries]


def _mean_metrics(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    n = max(len(per_query), 1)
    return {key: round(sum(m[key] for m in per_query) / n, 4) for key in NAMES}


def _aggregate(run: _PathRun) -> dict[str, Any]:
    n = max(len(run.per_query), 1)
    agg: dict[str, Any] = _mean_metrics(run.per_query)
    agg["p50_ms"] = round(statistics.median(run.latencies), 3) if run.latencies else 0.0
    agg["p95_ms"] = round(_percentile(run.latencies, 0.95), 3)
    for key, values in run.extra.items():
        agg[f"{key}_per_query"] = round(sum(values) / n, 3)
    rounds = max((len(g) for g in run.pool_gold), default=0)
    for r in range(rounds):  # a loop that stopped early keeps its last pool
        shares = [g[min(r, len(g) - 1)] for g in run.pool_gold]
        agg[f"gold_in_pool_round{r}_per_query"] = round(sum(shares) / len(shares), 3)
    if any(run.types):
        groups: dict[str, list[Mapping[str, float]]] = {}
        for t, m in zip(run.types, run.per_query):
            groups.setdefault(t or "untyped", []).append(m)
        agg["by_type"] = {
            t: {"questions": len(ms), **_mean_metrics(ms)} for t, ms in sorted(groups.items())
        }
    return agg


def _dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def format_table(summary: Mapping[str, Any]) -> str:
    """The side-by-side table ``hybridsag eval`` prints."""
    cols: tuple[str, ...] = ("recall@1", "recall@2", "recall@5", "recall@10", "mrr@10", "ndcg@10")
    if summary.get("graded"):  # graded nDCG (gain = grade) first, then the binary reading
        cols += ("ndcg@10_binary",)
    cols += ("p50_ms", "p95_ms")
    lines = [
        f"dataset {summary['dataset']}: {summary['questions']} questions, "
        f"{summary['index']['passages']} passages, lexical build {summary['index']['build_s']} s, "
        f"{summary['index']['bytes'] / 1e6:.1f} MB"
    ]
    if "dense_build_s" in summary["index"]:
        lines.append(
            f"dense: {summary['index']['vectors']} vectors in {summary['index']['dense_build_s']} s "
            f"({summary['index'].get('embed_per_s', 'cached')} passages/s embedded), "
            f"{summary['index']['dense_bytes'] / 1e6:.1f} MB"
        )
    if (line := skipped_line(summary)) is not None:
        lines.append(line)
    partial = summary.get("partial")
    if partial:
        lines.append(
            f"PARTIAL: interrupted in {partial['interrupted_path']} after "
            f"{partial['questions_done']} of {partial['questions']} questions"
            + (f"; not run: {', '.join(partial['paths_not_run'])}" if partial["paths_not_run"] else "")
        )
    header = f"{'path':<8}" + "".join(f"{_HEADINGS.get(c, c):>11}" for c in cols)
    lines.append(header)
    lines.append("-" * len(header))
    for name, m in summary["paths"].items():
        lines.append(f"{name:<8}" + _cells(m, cols))
        if (line := _remote_line(m)) is not None:
            lines.append(line)
        for t, tm in m.get("by_type", {}).items():
            lines.append(f"  {t} ({tm['questions']})")
            lines.append(f"{'':<8}" + _cells(tm, cols))
    return "\n".join(lines)


def _remote_line(m: Mapping[str, Any]) -> str | None:
    """``  remote a query: judge/reranker 2 calls 31.0 ms, ...`` for a path that called remote
    models (hybridsag.remote_calls's meter), None for one that did not."""
    names = sorted(k.removesuffix(".calls_per_query") for k in m if k.endswith(".calls_per_query"))
    if not names:
        return None
    shown = [
        f"{n} {m[f'{n}.calls_per_query']:g} calls {m.get(f'{n}.ms_per_query', 0.0):.1f} ms"
        + (f" {tokens:g} tokens" if (tokens := m.get(f"{n}.input_tokens_per_query")) else "")
        for n in names
    ]
    return "  remote a query: " + ", ".join(shown)


def skipped_line(summary: Mapping[str, Any]) -> str | None:
    """The line naming what a summary's ``skipped`` left out (the first 5), None for nothing."""
    skipped = summary.get("skipped") or {}
    if not skipped.get("count"):
        return None
    ids = skipped["ids"]
    shown = "; ".join(f"{k}: {v}" for k, v in list(ids.items())[:5])
    more = f"; and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"skipped {skipped['count']} before the first search ({shown}{more})"


#: Column headings of :func:`format_table` that are not the metric's key.
_HEADINGS = {"ndcg@10_binary": "bndcg@10"}


def _cells(m: Mapping[str, Any], cols: Sequence[str]) -> str:
    cells = []
    for c in cols:
        v = m.get(c)
        if v is None:
            cells.append(f"{'':>11}")
        elif c.startswith(("recall", "mrr", "ndcg")):
            cells.append(f"{v * 100:>10.2f}%")
        else:
            cells.append(f"{v:>11.1f}")
    return "".join(cells)


# -- shared with the paired comparisons of hybridsag.ab (eval --compare, --grid) ----------------


def uses_vectors(names: Iterable[str]) -> bool:
    """Whether any of these paths reads the dense index or the passage vectors."""
    return _use_vectors(names)


def ranked_resources(hits: Iterable[Any]) -> list[str]:
    """The resource ids of a path's hits, in rank order, each once (what eval scores)."""
    return _dedupe_resources([_resource_of(h) for h in hits])


def eval_versions() -> dict[str, str]:
    """Python's and the main packages' versions, as config.json records them."""
    return _versions()
