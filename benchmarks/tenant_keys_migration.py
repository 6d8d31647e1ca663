"""Migration ``0005_tenant_keys`` benchmark (not a test): how long an SQLite store of the layout
before identity was per tenant (a tenant's resource keyed by its plain id) takes to open.

    .venv/bin/python benchmarks/tenant_keys_migration.py                 # 100,000 resources
    .venv/bin/python benchmarks/tenant_keys_migration.py --n 20000 --chunks 5

Writes ``--n`` ready resources (four in five of ten tenants, the rest un-tenanted) with
``--chunks`` chunk rows each and ``--n / 10`` tombstones of deleted resources, in the old layout
(rows written with SQL, the migration marked as not applied), closes the store, and times the
open that applies the migration. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from hybridsag.records.keys import KEY_SEP
from hybridsag.records.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="resources")
    parser.add_argument("--chunks", type=int, default=5, help="chunk rows per resource")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hs-tenant-keys-") as tmp:
        path = Path(tmp) / "store.sqlite3"
        store = Store(path, tokenizer_fingerprint="bench")
        n, per = args.n, args.chunks
        with store.atomic() as conn:
            conn.executemany(
                "INSERT INTO resources(id, resource_id, tenant, status, version, created_at, "
                "updated_at) VALUES (?, ?, ?, 'ready', 1, 0, 0)",
                [(i + 1, f"doc-{i}", f"t{i % 10}" if i % 5 else "") for i in range(n)],
            )
            conn.executemany(
                "INSERT INTO chunks(chunk_id, resource_id, version, ordinal, text, start_line, "
                "end_line, byte_start, byte_end, content_sha256) "
                "VALUES (?, ?, 1, ?, 'x', 0, 0, 0, 0, '')",
                [(f"doc-{i}@1#{k}", f"doc-{i}", k) for i in range(n) for k in range(per)],
            )
            conn.executemany(
                "INSERT INTO tombstones VALUES (?, 1, 0)", [(f"gone-{i}",) for i in range(n // 10)]
            )
            conn.execute("DELETE FROM migrations WHERE name = '0005_tenant_keys'")
        store.close()
        started = time.perf_counter()
        store = Store(path, tokenizer_fingerprint="bench")
        seconds = time.perf_counter() - started
        rekeyed = store.connection().execute(
            "SELECT count(*) FROM resources WHERE instr(resource_id, ?) > 0", (KEY_SEP,)
        ).fetchone()[0]
        store.close()
    print(json.dumps({"resources": n, "rekeyed": rekeyed, "chunks": n * per,
                      "migration_s": round(seconds, 3)}))


if __name__ == "__main__":
    main()
