#!/usr/bin/env python3
"""Scale benchmark (not a test): the cost curve of one machine's index at 10k, 100k, 1M passages.

The haystack at each size is 2wiki's passages, questions and qrels kept intact, plus distractor
passages made from the real passages of every shared set (2wiki, musique100, cmrc2018, pycode)
by recombining sentences: a distractor copies the sentence count of a real passage (its
template) and draws that many sentences from passages of the template's set, and its title
joins the first half of one real title of that set to the second half of another; so
vocabulary, language mix and length statistics stay real. One seeded stream makes the
distractors, so a smaller haystack is a prefix of a larger one.

Each size runs ``hybridsag eval`` (:func:`~hybridsag.evaluation.harness.run_eval`) in a child
process over the first ``--queries`` 2wiki questions: lexical build time and bytes, dense build
time and bytes, p50/p95 and R@5/R@10 of every path and of the fused search; then a second child
opens the built index as a search process does, times the reconcile plan (``build_plan``), runs
``--queries`` fused searches with their peers in the same loop (SAG2 alone, and the dense path
alone: what a team with dense retrieval already has), prints the fused p50's ratio to each
(issue 26's "fused at 100k" row) and reports its peak memory (``ru_maxrss``). Last, the growth
exponent of each cost (the slope of log cost against log passages, least squares).

Vectors: the 2wiki passages and the first ``--real-vectors`` passages in all are embedded for
real (the ``embedding.backend`` given, cached on disk under ``--work``); the other distractors
get the vector of a real distractor plus Gaussian noise (``--noise``, relative to the unit
vector), renormalised, which keeps the dense index's size and the distribution of distances
around real vectors, but not what the text says: the output says how many vectors were real.
Above ``--lexical-only-above`` passages no vectors are made at all (``embedding.model =
"none"``: the dense path is off and the SAG2 judge has no cosines), said so in the output.

    .venv/bin/python benchmarks/scale.py --sizes 10000,100000 --queries 200 \\
        --backend onnx --real-vectors 20000 --work /tmp/scale
    .venv/bin/python benchmarks/scale.py --sizes 1000000 --lexical-only-above 100000 ...

Prints one JSON object per size as it finishes and the whole summary (with the exponents) at
the end; everything is also written to ``<work>/scale.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

__all__ = ["distractors", "fit_exponent", "main", "make_haystack"]

DATA = Path("/work/shared/data")
SETS = ("2wiki", "musique100", "cmrc2018", "pycode")
ANCHOR = "2wiki"
SEED = 20_260_517
#: Sentences a distractor may take (a template with more is cut to this many).
MAX_SENTENCES = 12
#: The backend name the benchmark registers for its real-head/noisy-tail embedder.
NOISY_BACKEND = "scale-noisy-tail"


# -- the haystack ---------------------------------------------------------------------------------


def _read_corpus(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def distractors(data: Path, count: int, *, seed: int = SEED) -> Iterator[dict[str, str]]:
    """``count`` distractor passages (``_id``, ``title``, ``text``) recombined from the real
    passages of every shared set (see the module docstring); the first ``n`` of a call with a
    larger ``count`` are the same ``n``."""
    from hybridsag.fusion.text.sentences import split_sentences

    pools: list[tuple[list[dict[str, Any]], list[str], list[str]]] = []
    for name in SETS:
        rows = _read_corpus(data / name / "corpus.jsonl")
        sentences = [s for r in rows for s in split_sentences(r.get("text", "")) if s.strip()]
        titles = [str(r.get("title", "")) for r in rows if r.get("title")]
        pools.append((rows, sentences, titles))
    weights = [len(p[0]) for p in pools]
    rng = random.Random(seed)
    for i in range(count):
        rows, sentences, titles = rng.choices(pools, weights=weights)[0]
        template = rng.choice(rows)
        k = min(max(len(split_sentences(template.get("text", ""))), 1), MAX_SENTENCES)
        picked = [rng.choice(sentences) for _ in range(k)]
        joiner = "" if any("\u4e00" <= ch <= "\u9fff" for ch in picked[0][:8]) else " "
        title = ""
        if titles:
            a, b = rng.choice(titles).split(), rng.choice(titles).split()
            title = " ".join(a[: max(len(a) // 2, 1)] + b[len(b) // 2 :])
        yield {"_id": f"distractor-{i:07d}", "title": title, "text": joiner.join(picked)}


def make_haystack(data: Path, folder: Path, size: int, *, seed: int = SEED) -> dict[str, Any]:
    """Write a BEIR folder of ``size`` passages at ``folder``: 2wiki's corpus, questions and
    qrels, plus distractors up to ``size``. Returns its figures."""
    folder.mkdir(parents=True, exist_ok=True)
    anchor = data / ANCHOR
    corpus = folder / "corpus.jsonl"
    real = _read_corpus(anchor / "corpus.jsonl")
    extra = max(size - len(real), 0)
    if not (corpus.is_file() and sum(1 for _ in corpus.open("rb")) == len(real) + extra):
        t0 = time.perf_counter()
        tmp = corpus.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for row in real:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            for row in distractors(data, extra, seed=seed):
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(corpus)
        made_s = round(time.perf_counter() - t0, 3)
    else:
        made_s = 0.0
    for name in ("queries.jsonl", "qrels.tsv"):
        target = folder / name
        if not target.exists():
            target.symlink_to(anchor / name)
    return {
        "passages": len(real) + extra,
        "anchor_passages": len(real),
        "distractors": extra,
        "corpus_bytes": corpus.stat().st_size,
        "generate_s": made_s,
    }


# -- the embedder of the dense side ---------------------------------------------------------------


class NoisyTailEmbedder:
    """Passages in ``real`` (text sha256) are embedded by ``inner``; any other passage gets the
    vector of one of ``base_texts`` (real distractors, picked by the text's hash) plus Gaussian
    noise of norm about ``noise``, renormalised: a pure function of the text. Queries always go
    to ``inner``. Benchmark use only."""

    def __init__(
        self, inner: Any, real: set[str], base_texts: Sequence[str], noise: float
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.fingerprint = f"{inner.fingerprint}+noisy-tail-{len(real)}-{noise}"
        self.real, self.base_texts, self.noise = real, list(base_texts), noise
        self._bases: Any = None

    def encode(self, texts: Sequence[str], *, kind: Literal["query", "passage"] = "passage") -> Any:
        import numpy as np

        if kind == "query":
            return self.inner.encode(texts, kind="query")
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        todo = [i for i, k in enumerate(keys) if k in self.real or not self.base_texts]
        if todo:
            out[todo] = self.inner.encode([texts[i] for i in todo], kind="passage")
        noisy = [i for i in range(len(texts)) if i not in set(todo)]
        if noisy and self._bases is None:
            self._bases = np.asarray(self.inner.encode(self.base_texts, kind="passage"))
        for i in noisy:
            seed = int(keys[i][:16], 16)
            rng = np.random.default_rng(seed)
            base = self._bases[seed % len(self._bases)]
            v = base + rng.standard_normal(self.dimension).astype(np.float32) * (
                self.noise / math.sqrt(self.dimension)
            )
            out[i] = v / np.linalg.norm(v)
        return out


def _embedded_text(row: dict[str, Any]) -> str:
    """The text the write path embeds for a passage given whole (one chunk, no heading path):
    its title, a newline, its body (the body alone when it has no title)."""
    title, text = str(row.get("title") or ""), str(row.get("text", ""))
    return f"{title}\n{text}" if title else text


#: Real distractors whose vectors the noisy ones are made from.
NOISE_BASES = 2_000


def _register_noisy_backend(work: Path, corpus: Path, real_vectors: int, noise: float) -> None:
    """Register :data:`NOISY_BACKEND` in the embedder registry: the settings' model through the
    backend named by ``SCALE_INNER_BACKEND`` (its vectors cached under ``work``) for 2wiki's
    passages and the first ``real_vectors`` passages of ``corpus``, noise for the rest."""
    from hybridsag.vectors.embed_cache import CachedEmbedder
    from hybridsag.vectors.embedder import EMBEDDERS, make_embedder

    real: set[str] = set()
    base_texts: list[str] = []
    with corpus.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            row = json.loads(line)
            text = _embedded_text(row)
            is_anchor = not str(row.get("_id", "")).startswith("distractor-")
            if is_anchor or n < real_vectors:
                real.add(hashlib.sha256(text.encode("utf-8")).hexdigest())
                if not is_anchor and len(base_texts) < NOISE_BASES:
                    base_texts.append(text)
    inner_backend = os.environ.get("SCALE_INNER_BACKEND", "onnx")

    def factory(settings: Any) -> NoisyTailEmbedder:
        inner = make_embedder(settings, backend=inner_backend)
        cached = CachedEmbedder(inner, work / "real-vectors")
        return NoisyTailEmbedder(cached, real, base_texts, noise)

    EMBEDDERS[NOISY_BACKEND] = factory


# -- the child processes ------------------------------------------------------------------------


def _settings(args: argparse.Namespace, data_dir: Path, lexical_only: bool) -> Any:
    from hybridsag.settings import Settings

    embedding: dict[str, Any] = {"backend": NOISY_BACKEND, "quantize": True}
    if args.onnx_cache:
        embedding["onnx_cache_dir"] = args.onnx_cache
    if lexical_only:
        embedding = {"model": "none"}
    return Settings(data_dir=data_dir, embedding=embedding)


def _peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _child_eval(args: argparse.Namespace) -> dict[str, Any]:
    from hybridsag.evaluation.harness import run_eval

    folder = Path(args.folder)
    lexical_only = args.lexical_only
    if not lexical_only:
        _register_noisy_backend(
            Path(args.work), folder / "corpus.jsonl", args.real_vectors, args.noise
        )
    settings = _settings(args, Path(args.work) / "cache-root", lexical_only)
    paths = ["bm25", "title", "sag2", "fused"] if lexical_only else [
        "bm25", "title", "dense", "sag2", "fused"
    ]
    fuse = ["sag2", "title"] if lexical_only else ["sag2", "dense", "title"]
    summary = run_eval(
        settings, folder, paths=paths, fuse=fuse, limit=args.queries, out=folder / "eval"
    )
    summary["peak_mib"] = _peak_mib()
    return summary


def _child_search(args: argparse.Namespace) -> dict[str, Any]:
    """Open the built index as a search process does: the reconcile plan's time, ``queries``
    fused searches with their peers in the same loop (SAG2 alone and, with vectors, the dense
    path alone: p50/p95 of each and the fused p50's ratio to each), the peak memory."""
    from hybridsag.consistency import build_plan
    from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS, load_dataset
    from hybridsag.search import HybridSearch

    folder = Path(args.folder)
    if not args.lexical_only:
        _register_noisy_backend(
            Path(args.work), folder / "corpus.jsonl", args.real_vectors, args.noise
        )
    settings = _settings(args, folder / "eval" / "index", args.lexical_only)
    chunking = {"mode": "passage", "max_chars": PASSAGE_MAX_CHARS}
    settings = settings.model_copy(
        update={"chunking": settings.chunking.model_copy(update=chunking)}
    )
    ds = load_dataset(folder, limit=args.queries)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    with HybridSearch(settings) as hs:
        names = hs.resolve_paths(None)
        hs.warm(names, query=ds.queries[0][1])
        out["open_s"] = round(time.perf_counter() - t0, 3)
        parts = hs.components
        t1 = time.perf_counter()
        plan = build_plan(parts.store, parts.lexical, parts.stored_dense_index(), settings)
        out["reconcile_plan_s"] = round(time.perf_counter() - t1, 3)
        out["plan_counts"] = plan.counts()
        # the fused search and its peers, each question through all of them in turn (the
        # order rotating), so a change in the machine's load slows each alike
        runs = {"fused": list(names), "sag2": ["sag2"]}
        if "dense" in names:
            runs["dense"] = ["dense"]  # what a team with dense retrieval already has
        lat: dict[str, list[float]] = {name: [] for name in runs}
        order = list(runs)
        for i, (_, text) in enumerate(ds.queries):
            for name in order[i % len(order):] + order[: i % len(order)]:
                t2 = time.perf_counter()
                hs.search(text, top_k=10, paths=runs[name], explain=False)
                lat[name].append((time.perf_counter() - t2) * 1000)
        out["fused_paths"] = list(names)
        for name, values in lat.items():
            out[f"{name}_p50_ms"] = round(statistics.median(values), 3)
            values.sort()
            out[f"{name}_p95_ms"] = round(values[min(int(len(values) * 0.95), len(values) - 1)], 3)
        for peer in sorted(runs.keys() - {"fused"}):
            ratio = out["fused_p50_ms"] / out[f"{peer}_p50_ms"]
            out[f"fused_over_{peer}_p50"] = round(ratio, 2)
    out["peak_mib"] = _peak_mib()
    return out


def _run_child(phase: str, args: argparse.Namespace, folder: Path, lexical_only: bool) -> Any:
    cmd = [
        sys.executable, __file__, "--phase", phase, "--folder", str(folder), "--work", args.work,
        "--queries", str(args.queries), "--real-vectors", str(args.real_vectors),
        "--noise", str(args.noise),
    ]
    if args.onnx_cache:
        cmd += ["--onnx-cache", args.onnx_cache]
    if lexical_only:
        cmd.append("--lexical-only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["SCALE_INNER_BACKEND"] = args.backend
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{phase} at {folder} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["child_wall_s"] = round(time.perf_counter() - t0, 3)
    return result


# -- the curve ----------------------------------------------------------------------------------


def fit_exponent(sizes: Sequence[float], costs: Sequence[float]) -> float | None:
    """The least-squares slope of log(cost) against log(size): cost grows as size**slope.
    None with fewer than two positive points."""
    pts = [(math.log(n), math.log(c)) for n, c in zip(sizes, costs) if n > 0 and c and c > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return None
    return round(sum((x - mx) * (y - my) for x, y in pts) / sxx, 3)


def _row(size: int, hay: dict[str, Any], ev: dict[str, Any], se: dict[str, Any]) -> dict[str, Any]:
    idx = ev["index"]
    row: dict[str, Any] = {
        "passages": size,
        "haystack": hay,
        "lexical_build_s": idx.get("build_s"),
        "lexical_bytes": idx.get("bytes"),
        "dense_build_s": idx.get("dense_build_s"),
        "dense_bytes": idx.get("dense_bytes"),
        "vectors": idx.get("vectors"),
        "embedded_for_real": idx.get("embed_computed"),
        "embed_per_s": idx.get("embed_per_s"),
        "paths": {
            name: {
                "p50_ms": m.get("p50_ms"),
                "p95_ms": m.get("p95_ms"),
                "recall@5": m.get("recall@5"),
                "recall@10": m.get("recall@10"),
            }
            for name, m in ev["paths"].items()
        },
        "fused_paths": ev.get("fused_paths"),
        "eval_peak_mib": ev.get("peak_mib"),
        "search_process": se,
        "questions": ev.get("questions"),
    }
    return row


def _exponents(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    sizes = [r["passages"] for r in rows]
    costs: dict[str, list[float]] = {
        "lexical_build_s": [r["lexical_build_s"] or 0 for r in rows],
        "lexical_bytes": [r["lexical_bytes"] or 0 for r in rows],
        "dense_build_s": [r["dense_build_s"] or 0 for r in rows],
        "reconcile_plan_s": [r["search_process"].get("reconcile_plan_s") or 0 for r in rows],
        "search_peak_mib": [r["search_process"].get("peak_mib") or 0 for r in rows],
    }
    names = {n for r in rows for n in r["paths"]}
    for name in sorted(names):
        costs[f"{name}_p50_ms"] = [r["paths"].get(name, {}).get("p50_ms") or 0 for r in rows]
    return {k: fit_exponent(sizes, v) for k, v in costs.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated passage counts")
    ap.add_argument("--queries", type=int, default=200, help="first N 2wiki questions")
    ap.add_argument("--backend", default="onnx", help="embedding backend of the real vectors")
    ap.add_argument("--onnx-cache", default=None, help="embedding.onnx_cache_dir")
    ap.add_argument("--real-vectors", type=int, default=100_000)
    ap.add_argument("--noise", type=float, default=0.8)
    ap.add_argument("--lexical-only-above", type=int, default=10**9)
    ap.add_argument("--work", default="/tmp/hybridsag-scale")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--phase", choices=("eval", "search"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--lexical-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.phase:
        child = _child_eval if args.phase == "eval" else _child_search
        print(json.dumps(child(args), default=str))
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in sorted(int(s) for s in args.sizes.split(",")):
        folder = work / f"n{size}"
        hay = make_haystack(Path(args.data), folder, size)
        lexical_only = size > args.lexical_only_above
        load = os.getloadavg()[0]
        ev = _run_child("eval", args, folder, lexical_only)
        se = _run_child("search", args, folder, lexical_only)
        row = _row(hay["passages"], hay, ev, se)
        row["lexical_only"] = lexical_only
        row["load_avg_1min"] = [round(load, 2), round(os.getloadavg()[0], 2)]
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {
        "backend": args.backend,
        "real_vectors": args.real_vectors,
        "noise": args.noise,
        "queries": args.queries,
        "sizes": rows,
        "growth_exponents": _exponents(rows),
    }
    (work / "scale.json").write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
