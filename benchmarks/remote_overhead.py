#!/usr/bin/env python3
"""The overhead per query of each remote call path: the HTTP embedders (openai, tei, ollama),
the reranker judge (tei, cohere, vllm) and the chat judge, against the same work done in
process.

A model server (tests/modelserver.py) runs in a process of its own on 127.0.0.1, backed by the
packaged embedding model (its vectors are the local embedder's; a rerank score is the cosine of
the query's and the passage's vectors, the chat judge's p(yes) its sigmoid), and a second one
backed by the hash model (no model work: what HTTP and JSON alone cost). For each question of
the set, the BM25 top ``--pool`` passages are the judge's candidates, as in a SAG2 round.

    python benchmarks/remote_overhead.py --data SHARED/musique100 --limit 20 --pool 20 \\
        --port 18610 --out benchmarks/results/remote_overhead.json

Per call path it prints the median ms a query of: the remote call against the packaged-model
server, the same work in process (``local``: one query embedding; the query and the pool
embedded and scored by cosine; for the chat judge, the question and each passage as a pair, as
its stand-in does), their difference (``overhead``), and the remote call against the hash
server (``wire``: HTTP, JSON and validation with next to no model work). The packaged server
embeds every text of every request (``--no-memo``), as the in-process work does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridsag.vectors.embedder import make_embedder  # noqa: E402
from hybridsag.evaluation.harness import load_dataset  # noqa: E402
from hybridsag.vectors.http_embedder import HttpEmbedder  # noqa: E402
from hybridsag.judges.base import Candidate  # noqa: E402
from hybridsag.judges.chat import ChatJudge  # noqa: E402
from hybridsag.judges.cross_encoder import pair_text  # noqa: E402
from hybridsag.judges.reranker import RerankerJudge  # noqa: E402
from hybridsag.search import HybridSearch  # noqa: E402
from hybridsag.settings import ChatJudgeSettings, RerankerSettings, Settings  # noqa: E402
from hybridsag.records.filters import Filters


def start_server(port: int, model: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        # --no-memo: every request does its model work, as the in-process comparison does
        [sys.executable, "-m", "tests.modelserver", "--port", str(port), "--model", model,
         "--no-memo"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return proc
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise SystemExit(f"the model server on port {port} exited with {proc.returncode}")
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the model server on port {port} did not start")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--limit", type=int, default=20, help="questions")
    ap.add_argument("--pool", type=int, default=20, help="candidates a judgement")
    ap.add_argument("--port", type=int, default=18610, help="this and the next port are used")
    ap.add_argument("--work", type=Path, default=Path("/tmp/remote-overhead"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    ds = load_dataset(args.data, limit=args.limit)
    shutil.rmtree(args.work, ignore_errors=True)
    lexical = Settings(data_dir=args.work / "index", embedding={"model": "none"},
                       chunking={"mode": "passage"})  # fmt: skip
    pools: list[tuple[str, list[Candidate]]] = []
    with HybridSearch(lexical) as hs:
        hs.ingest_jsonl(ds.corpus_path, mode="passage")
        store = hs.components.store
        for _, text in ds.queries:
            hits = hs.run_path("bm25", text, limit=args.pool, filters=Filters()).hits
            records = store.chunks(h.chunk_id for h in hits)
            pools.append((text, [
                Candidate(h.chunk_id, records[h.chunk_id].title, records[h.chunk_id].text)
                for h in hits if h.chunk_id in records
            ]))  # fmt: skip

    local = make_embedder(Settings(data_dir=args.work / "local"))
    assert local is not None
    packaged = start_server(args.port, "packaged")
    hashed = start_server(args.port + 1, "hash")
    urls = {"packaged": f"http://127.0.0.1:{args.port}", "wire": f"http://127.0.0.1:{args.port + 1}"}
    results: dict[str, dict[str, list[float]]] = {}
    try:
        def add(path: str, kind: str, ms: float) -> None:
            results.setdefault(path, {}).setdefault(kind, []).append(ms)

        clients: dict[str, dict[str, object]] = {}
        for which, url in urls.items():
            made: dict[str, object] = {}
            for api in ("openai", "tei", "ollama"):
                made[f"embedder/{api}"] = HttpEmbedder(Settings(
                    data_dir=args.work / "x", embedding={"backend": api, "model": "minilm",
                                                         "http": {"base_url": url}}))  # fmt: skip
            for api in ("tei", "cohere", "vllm"):
                made[f"judge/reranker-{api}"] = RerankerJudge(RerankerSettings(
                    api=api, base_url=url, model="minilm", cache_size=0,
                    calibration="sigmoid", temperature=0.1, offset=0.5))  # fmt: skip
            made["judge/chat"] = ChatJudge(ChatJudgeSettings(
                base_url=url, model="minilm", cache_size=0, max_in_flight=8))  # fmt: skip
            clients[which] = made
        # warm: the local model, both servers' models and connections
        local.encode(["warm up"], kind="query")
        for made in clients.values():
            for name, client in made.items():
                if name.startswith("embedder/"):
                    client.encode(["warm up"], kind="query")  # type: ignore[attr-defined]
                else:
                    client.judge("warm up", pools[0][1][:2])  # type: ignore[attr-defined]

        for question, cands in pools:
            if not cands:
                continue
            passages = [pair_text(c) for c in cands]
            add("embedder", "local", timed(lambda: local.encode([question], kind="query")))

            def local_rerank() -> None:
                vecs = local.encode([question, *passages], kind="passage")
                _ = vecs[1:] @ vecs[0]

            add("reranker", "local", timed(local_rerank))

            def local_chat() -> None:  # what the chat stand-in does: a pair per candidate
                for passage in passages:
                    vecs = local.encode([question, passage], kind="passage")
                    _ = vecs[1] @ vecs[0]

            add("chat", "local", timed(local_chat))
            for which, made in clients.items():
                for name, client in made.items():
                    if name.startswith("embedder/"):
                        ms = timed(lambda: client.encode([question], kind="query"))  # type: ignore[attr-defined]
                    else:
                        ms = timed(lambda: client.judge(question, cands))  # type: ignore[attr-defined]
                    add(name, which, ms)
    finally:
        for proc in (packaged, hashed):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    table = []
    local_of = {"embedder": med(results["embedder"]["local"]),
                "reranker": med(results["reranker"]["local"]),
                "chat": med(results["chat"]["local"])}  # fmt: skip
    for name in sorted(k for k in results if "/" in k):
        kind = name.split("/")[1].split("-")[0] if name.startswith("judge/") else "embedder"
        base = local_of[kind]
        remote = med(results[name]["packaged"])
        table.append({
            "path": name, "remote_ms": remote, "local_ms": base,
            "overhead_ms": round(remote - base, 2), "wire_ms": med(results[name]["wire"]),
        })  # fmt: skip
    print(f"{len(pools)} questions of {ds.name}, pools of up to {args.pool} passages; "
          "median ms a query")  # fmt: skip
    print(f"{'call path':<22}{'remote':>10}{'local':>10}{'overhead':>10}{'wire only':>11}")
    for row in table:
        print(f"{row['path']:<22}{row['remote_ms']:>10.2f}{row['local_ms']:>10.2f}"
              f"{row['overhead_ms']:>10.2f}{row['wire_ms']:>11.2f}")  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dataset": ds.name, "questions": len(pools),
                                        "pool": args.pool, "rows": table}, indent=2) + "\n")
    for made in clients.values():
        for client in made.values():
            client.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
