#!/usr/bin/env python3
"""Dense embedding throughput of each embedder backend on the same passages of a BEIR corpus.

    python benchmarks/embed_throughput.py /work/shared/data/2wiki/corpus.jsonl --n 512 --repeat 3

Every backend named by ``--backends`` is built from ``Settings()`` (so ``HYBRIDSAG_*`` variables
apply, e.g. ``HYBRIDSAG_EMBEDDING__ONNX_CACHE_DIR``) and loaded (the onnx backend exports on first
use) before any timing. The timed runs alternate between the backends (torch, onnx, torch,
onnx, ...), so a machine whose load changes during the run slows both alike. Prints JSON: per
backend, passages per second (median of the repeats and each run) and one query's encoding time
(median of 50); the speed ratio of each backend to the first; and the cosine between the first
backend's vector and each other backend's vector of the same passage (mean, 1st percentile, min).

With ``--index`` it measures indexing end to end instead (issue 26's indexing row)::

    python benchmarks/embed_throughput.py /work/shared/data/2wiki/corpus.jsonl --index --n 0
        --variant "fp32 HYBRIDSAG_EMBEDDING__QUANTIZE=false"

Each repeat runs ``hybridsag index --jsonl <the first --n passages> --mode passage`` in a fresh
process and data dir (start-up, model load, chunking, FTS5, embedding and Milvus Lite writes all
inside the time) once per variant (``default`` always, then each ``--variant "NAME ENV=VALUE
..."``, and each ``--hybridsag PATH``: another build's command, e.g. the code before a change,
with the default settings), then ``SentenceTransformer.encode`` of the same texts (the packaged
model, as :mod:`hybridsag.vectors.embedder` loads it: offline, CPU, ``embedding.batch_size``)
in this process, alternating, so a machine whose load changes slows each alike. One warm-up
index of 8 passages per variant (it makes a missing ONNX export) runs before any timing. Prints
JSON: passages per second of each (median and runs), and each variant's ratio to
``SentenceTransformer.encode``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hybridsag.vectors.embedder import make_embedder, quiet_weight_loading
from hybridsag.vectors.embedder_common import resolve_model
from hybridsag.settings import Settings


def read_passages(corpus: Path, n: int) -> list[str]:
    texts = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            texts.append(f"{obj.get('title', '')}\n{obj['text']}")
            if len(texts) >= n:
                break
    return texts


def _index_seconds(corpus: Path, cli: str, env: dict[str, str], scratch: Path) -> float:
    """Wall seconds of one ``cli index`` of ``corpus`` in a fresh process and data dir."""
    data = Path(tempfile.mkdtemp(prefix="index-", dir=scratch))
    cmd = [cli, "--data-dir", str(data), "index", "--jsonl", str(corpus),
           "--mode", "passage", "-q"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    shutil.rmtree(data, ignore_errors=True)
    return seconds


def index_report(args: argparse.Namespace) -> dict[str, object]:
    """``hybridsag index`` end to end against ``SentenceTransformer.encode`` of the same texts."""
    from sentence_transformers import SentenceTransformer

    settings = Settings()
    texts = read_passages(args.corpus, args.n or sys.maxsize)
    base = {k: v for k, v in os.environ.items()}
    cli = str(Path(sys.executable).with_name("hybridsag"))
    variants = {"default": (cli, base)}
    for spec in args.variant:
        name, *pairs = spec.split()
        variants[name] = (cli, {**base, **dict(pair.split("=", 1) for pair in pairs)})
    for other in args.hybridsag:  # another build's command, default settings
        variants[other] = (other, base)
    with quiet_weight_loading():
        st = SentenceTransformer(
            resolve_model(settings.embedding.model), device="cpu", local_files_only=True
        )
    st.encode(texts[:8])
    rates: dict[str, list[float]] = {name: [] for name in [*variants, "sentence-transformers"]}
    with tempfile.TemporaryDirectory(prefix="embed-throughput-") as tmp:
        scratch = Path(tmp)
        corpus = scratch / "corpus.jsonl"
        with args.corpus.open(encoding="utf-8") as src, corpus.open("w", encoding="utf-8") as dst:
            for _, line in zip(range(len(texts)), src):
                dst.write(line)
        warm = scratch / "warm.jsonl"
        warm.write_text("".join(corpus.read_text("utf-8").splitlines(True)[:8]), "utf-8")
        for command, env in variants.values():
            _index_seconds(warm, command, env, scratch)
        for _ in range(args.repeat):
            for name, (command, env) in variants.items():
                rates[name].append(len(texts) / _index_seconds(corpus, command, env, scratch))
            t0 = time.perf_counter()
            st.encode(texts, batch_size=settings.embedding.batch_size, normalize_embeddings=True)
            rates["sentence-transformers"].append(len(texts) / (time.perf_counter() - t0))
    ref = statistics.median(rates["sentence-transformers"])
    return {
        "passages": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
        "passages_per_s_median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "passages_per_s_runs": {k: [round(r, 1) for r in v] for k, v in rates.items()},
        "index_ratio_to_sentence_transformers_encode": {
            name: round(statistics.median(rates[name]) / ref, 2) for name in variants
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="sentence-transformers,onnx",
                    help="comma-separated embedding.backend names; the first is the reference")
    ap.add_argument("--index", action="store_true",
                    help="time `hybridsag index` end to end against SentenceTransformer.encode")
    ap.add_argument("--variant", action="append", default=[],
                    help='with --index: another index run, "NAME ENV=VALUE ..." (repeatable)')
    ap.add_argument("--hybridsag", action="append", default=[],
                    help="with --index: another build's hybridsag command, e.g. a launcher of "
                         "the code before a change (repeatable)")
    args = ap.parse_args()
    if args.index:  # --n 0: the whole corpus
        print(json.dumps(index_report(args), indent=2))
        return
    texts = read_passages(args.corpus, args.n)
    settings = Settings()
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    embedders = {}
    for name in names:
        emb = make_embedder(settings, backend=name)
        assert emb is not None, "embedding.model is 'none'"
        emb.encode(texts[:8])  # load (and for onnx: export) outside the timing
        embedders[name] = emb
    rates: dict[str, list[float]] = {name: [] for name in names}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            vectors[name] = emb.encode(texts, kind="passage")
            rates[name].append(len(texts) / (time.perf_counter() - t0))
    report: dict[str, object] = {
        "passages": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
        "backends": {},
    }
    ref = names[0]
    for name, emb in embedders.items():
        query_ms = []
        for i in range(50):
            t0 = time.perf_counter()
            emb.encode([texts[i % len(texts)][:80]], kind="query")
            query_ms.append((time.perf_counter() - t0) * 1000)
        entry: dict[str, object] = {
            "fingerprint": emb.fingerprint,
            "passages_per_s_median": round(statistics.median(rates[name]), 1),
            "passages_per_s_runs": [round(r, 1) for r in rates[name]],
            "query_ms_median": round(statistics.median(query_ms), 2),
            "speed_ratio_to_" + ref: round(
                statistics.median(rates[name]) / statistics.median(rates[ref]), 2
            ),
        }
        if name != ref:
            cosines = (vectors[name] * vectors[ref]).sum(axis=1)
            entry["cosine_to_" + ref] = {
                "mean": round(float(cosines.mean()), 5),
                "p1": round(float(np.percentile(cosines, 1)), 5),
                "min": round(float(cosines.min()), 5),
            }
        report["backends"][name] = entry  # type: ignore[index]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
