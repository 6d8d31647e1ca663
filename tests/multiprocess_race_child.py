"""One process of the multi-process race (tests/integration/test_multiprocess_race.py):
``python -m tests.multiprocess_race_child ROLE DATA_DIR URI OUT GO STOP OPS SEED``.

It loads the model, touches ``OUT.ready``, waits for the file ``GO``, and only then opens the
data dir (so the racing processes also race to create its store, its index id and its Milvus
collection). ``writer<K>`` runs ``OPS`` operations: ingests of new ids ``w<K>-<i>`` and deletes of
ids it ingested before (never re-ingested, so a search that returns one after its delete ended
is stale); ``searcher`` searches until the file ``STOP`` exists. Every operation is one JSON line
in ``OUT`` with its start and end on the system-wide monotonic clock; an exception of any kind
is recorded, not raised.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from hybridsag.search import HybridSearch
from hybridsag.settings import MilvusSettings

from tests.consistency_support import clear_env, make_settings, shared_embedder

QUERY = "apples orchard fruit"
DELETE_SHARE = 0.35


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _writer(hs: HybridSearch, k: int, ops: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed * 1000 + k)
    ingested: list[str] = []
    records = []
    for i in range(ops):
        if ingested and rng.random() < DELETE_SHARE:
            rid = ingested.pop(rng.randrange(len(ingested)))
            kind = "delete"
            t0 = time.monotonic()
            try:
                ok, error = hs.delete(rid), None
            except Exception as exc:  # noqa: BLE001 - recorded, asserted by the parent
                ok, error = False, _error(exc)
        else:
            rid = f"w{k}-{i}"
            kind = "ingest"
            text = f"{rid} apples orchard note {i}: fruit number {i} grows near row {i % 7}."
            t0 = time.monotonic()
            try:
                report = hs.ingest(rid, text, title=f"Orchard {rid}")
                ok, error = report.indexed == 1, None
                if not ok:
                    error = f"not indexed: {report.errors}"
            except Exception as exc:  # noqa: BLE001
                ok, error = False, _error(exc)
            if ok:
                ingested.append(rid)
        records.append(
            {"kind": kind, "rid": rid, "t0": t0, "t1": time.monotonic(), "ok": ok, "error": error}
        )
    return records


def _searcher(hs: HybridSearch, stop: Path) -> list[dict[str, Any]]:
    records = []
    while not stop.exists():
        t0 = time.monotonic()
        try:
            resp = hs.search(QUERY, top_k=100)
            rec: dict[str, Any] = {
                "kind": "search",
                "rids": sorted({r.resource_id for r in resp.results}),
                "degraded": resp.reasons,
                "error": None,
            }
        except Exception as exc:  # noqa: BLE001
            rec = {"kind": "search", "rids": [], "degraded": {}, "error": _error(exc)}
        rec.update(t0=t0, t1=time.monotonic())
        records.append(rec)
    return records


def main(argv: list[str]) -> int:
    role, data_dir, uri, out, go, stop = argv[:6]
    ops, seed = int(argv[6]), int(argv[7])
    clear_env()
    base = make_settings(Path(data_dir))
    settings = base.model_copy(update={"milvus": MilvusSettings(uri=uri)})
    embedder = shared_embedder()  # the model loads before the start signal
    Path(f"{out}.ready").touch()
    while not Path(go).exists():
        time.sleep(0.005)
    records: list[dict[str, Any]] = []
    try:
        with HybridSearch(settings, embedder=embedder) as hs:
            if role == "searcher":
                records = _searcher(hs, Path(stop))
            else:
                records = _writer(hs, int(role.removeprefix("writer")), ops, seed)
    except Exception as exc:  # noqa: BLE001 - opening the data dir failed: recorded
        records.append({"kind": "open", "error": _error(exc), "t0": 0.0, "t1": 0.0})
    with open(out, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
