#!/usr/bin/env python3
"""Our lexical paths against two engines built for a BM25 top k, in one run (not a test).

On one passage set (the scale haystack of ``benchmarks/scale.py``: 2wiki plus recombined
distractors, ``--size`` passages) and the same 2wiki questions, it times question by question,
interleaved so every engine sees the same machine load:

- ours, per ``--backends`` (``fts5``, ``tantivy``): the bm25 path and the SAG2 path
  (``HybridSearch.search``, lexical only: no vectors, SAG2's offline judge without cosines),
  and the bare index call the bm25 path makes (``LexicalIndex.search`` of the question's terms,
  top 10, no filters);
- ``bm25s`` (numpy backend, one thread) over the same tokens, top 10;
- raw ``tantivy`` (tantivy-py) over the same tokens joined by spaces, a whitespace tokenizer,
  ``freq`` postings, a ``Should`` query of the terms, top 10 (block-max WAND: no count asked).

The peers index exactly the tokens our first backend's index holds (read back from its rows:
the title twice and the body once, as the column weights 2/2/1 weight them, jieba-segmented and
folded) and are given the terms our ``query_terms`` makes, so tokenisation is out of their
times and in ours: the index-call column is the like-for-like one. Build times: ours is
``hybridsag``'s ingest of the corpus (tokenising included), the peers' is indexing the ready
tokens. R@10 of each is reported too (2wiki's gold passages among the top 10), a check that
every engine answers the same task.

Ratios are paired medians over the questions: ``x / ref`` of each question's milliseconds, so
0.25 is four times faster than the reference. The reference of every bm25-like row is the first
backend's index call; SAG2 on another backend is against the first backend's SAG2.

    .venv/bin/python benchmarks/lexical_engines.py --size 100000 --queries 200 \\
        --backends fts5,tantivy --work /tmp/tantivy-engines

Indexes are kept under ``<work>/n<size>/<backend>`` and reused by the next run (``--rebuild``
builds them again); ``--fts5-index`` names the data dir of an FTS5 index built elsewhere (for
example ``/tmp/perf-scale/n1000000/eval/index`` from ``scale.py``) to reuse. Prints one JSON
object (also written to ``<work>/lexical_engines_n<size>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
DATA = Path("/work/shared/data")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(int(len(ordered) * q), len(ordered) - 1)], 2)


def _settings(data_dir: Path, backend: str) -> Any:
    from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS
    from hybridsag.settings import Settings

    return Settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        lexical={"backend": backend},
        chunking={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS},
    )


def _build_ours(corpus: Path, data_dir: Path, backend: str, rebuild: bool) -> dict[str, Any]:
    """Index ``corpus`` into ``data_dir`` with ``lexical.backend = backend`` (kept for the next
    run); returns the build figures (read back when the index was already there)."""
    from hybridsag.search import HybridSearch

    marker = data_dir / "lexical_engines_build.json"
    if marker.is_file() and not rebuild:
        return {**json.loads(marker.read_text("utf-8")), "reused": True}
    if data_dir.exists():
        shutil.rmtree(data_dir)
    with HybridSearch(_settings(data_dir, backend)) as hs:
        hs.components.tokenizer.warm()
        t0 = time.perf_counter()
        report = hs.ingest_jsonl(corpus, mode="passage")
        build_s = time.perf_counter() - t0
        info = {
            "build_s": round(build_s, 2),
            "passages": hs.components.store.counts()["chunks"],
            "skipped": len(report.errors),
            "bytes": sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file()),
        }
    marker.write_text(json.dumps(info) + "\n", "utf-8")
    return info


def _peer_docs(data_dir: Path) -> tuple[list[str], dict[str, int], list[list[int]]]:
    """``(resource ids, vocabulary, token id lists)`` of every passage of an FTS5 index, in
    chunk row order, each token list the row's title tokens twice and its body once, folded
    as FTS5 folds them (ids into one vocabulary, so a million passages fit in memory)."""
    import sqlite3

    from hybridsag.lexical.fts5_topk import strip_diacritics
    from hybridsag.records.keys import split_key

    conn = sqlite3.connect(f"file:{data_dir / 'hybridsag.sqlite3'}?mode=ro", uri=True)
    vocab: dict[str, int] = {}
    resources, docs = [], []
    try:
        for key, title, heading, body in conn.execute(
            "SELECT c.resource_id, f.title, f.heading, f.body FROM chunks_fts f "
            "JOIN chunks c ON c.id = f.rowid ORDER BY f.rowid"
        ):
            t, h = title.split(), heading.split()
            words = strip_diacritics(" ".join(t + t + h + h + body.split())).split()
            resources.append(split_key(key)[1])
            docs.append([vocab.setdefault(w, len(vocab)) for w in words])
    finally:
        conn.close()
    return resources, vocab, docs


class _Bm25s:
    """bm25s over the token lists (k1 1.2 and b 0.75, FTS5's; Lucene's IDF)."""

    name = "bm25s"

    def __init__(self, vocab: dict[str, int], docs: list[list[int]]) -> None:
        import bm25s
        from bm25s.tokenization import Tokenized

        t0 = time.perf_counter()
        self.retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        self.retriever.index(Tokenized(ids=docs, vocab=vocab), show_progress=False)
        self.build_s = round(time.perf_counter() - t0, 2)
        self.vocab = vocab

    def top(self, terms: list[str], k: int) -> list[int]:
        known = [t for t in terms if t in self.vocab]
        if not known:
            return []
        docs, _scores = self.retriever.retrieve(
            [known], k=k, show_progress=False, n_threads=1
        )
        return [int(d) for d in docs[0]]


class _Tantivy:
    """Raw tantivy over the same tokens joined by spaces (whitespace tokenizer, lowercase)."""

    name = "tantivy"

    def __init__(self, vocab: dict[str, int], docs: list[list[int]], folder: Path) -> None:
        import tantivy

        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        words = [""] * len(vocab)
        for w, i in vocab.items():
            words[i] = w
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("n", stored=False, indexed=False, fast=True)
        sb.add_text_field("text", tokenizer_name="ws", index_option="freq")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema, path=str(folder))
        self.index.register_tokenizer(
            "ws",
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
            .filter(tantivy.Filter.lowercase())
            .build(),
        )
        t0 = time.perf_counter()
        writer = self.index.writer(256_000_000, 1)
        for n, ids in enumerate(docs):
            writer.add_document(tantivy.Document(n=n, text=" ".join(words[i] for i in ids)))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.build_s = round(time.perf_counter() - t0, 2)
        self.searcher = self.index.searcher()
        self.index_folder = folder
        self._tantivy = tantivy

    def top(self, terms: list[str], k: int) -> list[int]:
        t = self._tantivy
        query = t.Query.boolean_query(
            [(t.Occur.Should, t.Query.term_query(self.schema, "text", x, index_option="freq"))
             for x in terms]
        )
        hits = self.searcher.search(query, k, count=False).hits
        return list(self.searcher.fast_field_values("n", [a for _, a in hits]))


def _recall(found: list[str], gold: Any) -> float:
    want = set(gold)
    return len(want & set(found)) / max(1, len(want))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000, help="passages in the haystack")
    ap.add_argument("--queries", type=int, default=200, help="first N 2wiki questions")
    ap.add_argument("--backends", default="fts5", help="ours, comma-separated: fts5,tantivy")
    ap.add_argument("--peers", default="bm25s,tantivy", help="bm25s,tantivy or fewer")
    ap.add_argument("--fts5-index", default=None, help="an FTS5 data dir of this haystack")
    ap.add_argument("--work", default="/tmp/tantivy-engines")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--top-k", type=int, default=10)
    args = ap.parse_args(argv)

    sys.path.insert(0, str(HERE))
    from scale import make_haystack

    from hybridsag.evaluation.harness import load_dataset
    from hybridsag.records.filters import Filters
    from hybridsag.records.keys import split_key
    from hybridsag.search import HybridSearch

    work = Path(args.work)
    folder = work / f"n{args.size}"
    hay = make_haystack(Path(args.data), folder, args.size)
    ds = load_dataset(folder, limit=args.queries)
    backends = [b for b in args.backends.split(",") if b]
    peer_names = [p for p in args.peers.split(",") if p]
    if peer_names and "fts5" not in backends:
        backends = ["fts5", *backends]  # the peers index the tokens of the FTS5 rows
    dirs = {b: folder / b for b in backends}
    if args.fts5_index:
        dirs["fts5"] = Path(args.fts5_index)
    builds = {}
    for b in backends:
        if b == "fts5" and args.fts5_index:
            builds[b] = {"reused": True, "index": args.fts5_index}
            continue
        builds[b] = _build_ours(folder / "corpus.jsonl", dirs[b], b, args.rebuild)

    report: dict[str, Any] = {
        "passages": hay["passages"],
        "questions": len(ds.queries),
        "load_avg_1min": [round(os.getloadavg()[0], 2)],
        "build_s": {f"ours {b}": builds[b] for b in backends},
        "rows": {},
    }
    peers: list[Any] = []
    if peer_names:
        t0 = time.perf_counter()
        resources, vocab, docs = _peer_docs(dirs["fts5"])
        report["peer_tokens_read_s"] = round(time.perf_counter() - t0, 2)
        if "tantivy" in peer_names:
            raw = Path(tempfile.mkdtemp(prefix="tantivy-raw-", dir=work))
            peers.append(_Tantivy(vocab, docs, raw))
        if "bm25s" in peer_names:
            peers.append(_Bm25s(vocab, docs))
        del docs
        for p in peers:
            report["build_s"][f"peer {p.name}"] = {"build_s": p.build_s, "of": "ready tokens"}

    from hybridsag.lexical.fts5_topk import strip_diacritics

    searches = {b: HybridSearch(_settings(dirs[b], b)) for b in backends}
    times: dict[str, list[float]] = {}
    recall: dict[str, list[float]] = {}

    def timed(name: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        times.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
        return out

    try:
        first_text = ds.queries[0][1]
        for hs in searches.values():  # first-use costs (jieba, the judge) out of the timings
            hs.search(first_text, top_k=args.top_k, paths=["bm25", "sag2"], explain=False)
        first_terms = searches[backends[0]].components.lexical.query_terms(first_text)
        for p in peers:
            p.top([strip_diacritics(t) for t in first_terms], args.top_k)
        k = args.top_k
        for i, (qid, text) in enumerate(ds.queries):
            gold = ds.qrels[qid]
            terms = searches[backends[0]].components.lexical.query_terms(text)
            folded = list(dict.fromkeys(strip_diacritics(t) for t in terms))
            jobs: list[tuple[str, Any]] = []
            for b, hs in searches.items():
                lex = hs.components.lexical
                jobs.append((f"{b} index call", lambda lex=lex: [
                    split_key(h.detail["resource_id"])[1]
                    for h in lex.search(lex.query_terms(text), limit=k, filters=Filters())
                ]))
                for path in ("bm25", "sag2"):
                    jobs.append((f"{b} {path}", lambda hs=hs, path=path: [
                        r.resource_id for r in
                        hs.search(text, top_k=k, paths=[path], explain=False).results
                    ]))
            for p in peers:
                jobs.append((f"peer {p.name}", lambda p=p: [resources[n] for n in p.top(folded, k)]))
            if i % 2:  # alternate the order, so no engine always meets a warmer cache
                jobs.reverse()
            for name, fn in jobs:
                found = timed(name, fn)
                recall.setdefault(name, []).append(_recall(list(dict.fromkeys(found))[:k], gold))
    finally:
        for hs in searches.values():
            hs.close()
        for p in peers:
            if isinstance(p, _Tantivy):
                shutil.rmtree(p.index_folder, ignore_errors=True)

    ref = f"{backends[0]} index call"
    for name, ms in times.items():
        row: dict[str, Any] = {
            "p50_ms": _pct(ms, 0.5),
            "p95_ms": _pct(ms, 0.95),
            "recall@10": round(100 * statistics.fmean(recall[name]), 2),
        }
        against = f"{backends[0]} sag2" if name.endswith(" sag2") else ref
        if name.endswith(" bm25") and not name.startswith(backends[0]):
            against = f"{backends[0]} bm25"
        if name != against:
            row[f"paired_median_vs_{against.replace(' ', '_')}"] = round(
                statistics.median(a / b for a, b in zip(ms, times[against]) if b > 0), 3
            )
        report["rows"][name] = row
    report["load_avg_1min"].append(round(os.getloadavg()[0], 2))
    text = json.dumps(report, indent=2)
    print(text)
    (work / f"lexical_engines_n{args.size}.json").write_text(text + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
