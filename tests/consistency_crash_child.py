"""Child process of the crash tests: run one write and SIGKILL itself at one step.

Usage: ``python -m tests.consistency_crash_child [--lexical-only] DATA_DIR OP STEP TARGET [TEXT]``

OP is ``ingest`` or ``delete``; STEP is a write-path step name given to the step hook (``claim``,
``vectors``, ``commit``, ``tombstone``, ``vectors_delete``, ``purge``) or ``upsert`` (the
process dies inside ``dense.upsert`` after writing half of the rows). Exit code 3 means the
write finished without reaching the step (a test failure); a kill shows as -9 to the parent.
``--lexical-only``: no model and no Milvus (``embedding.model = "none"``), for a fast child.
A delete child loads no model either (a delete embeds nothing); an ingest child loads the
shared embedder before it writes.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


from hybridsag.search import HybridSearch
from tests.consistency_support import (
    FaultyDense,
    clear_env,
    make_settings,
    open_search,
    own_dense_index,
)


def main(argv: list[str]) -> int:
    lexical_only = argv[:1] == ["--lexical-only"]
    data_dir, op, step, target = argv[lexical_only : lexical_only + 4]
    text = argv[lexical_only + 4] if len(argv) > lexical_only + 4 else ""
    clear_env()
    settings = make_settings(Path(data_dir), model="none" if lexical_only else None)

    def hook(name: str, resource_id: str) -> None:
        if name == step and resource_id == target:
            os.kill(os.getpid(), signal.SIGKILL)

    dense = None
    if step == "upsert":
        inner = own_dense_index(settings)
        dense = FaultyDense(inner, upsert_fault="kill", only_resource=target)
    if lexical_only:
        hs = HybridSearch(settings, step_hook=hook)
    elif op == "delete":
        # a delete embeds nothing: no model loads (the dense index opens at the dimension the
        # data dir recorded), so this child starts in a fraction of an ingest child's time
        hs = HybridSearch(settings, step_hook=hook)
        hs.components.dense_index()
    else:
        hs = open_search(settings, dense_index=dense, step_hook=hook)
    if op == "ingest":
        hs.ingest(target, text, title=target.title())
    elif op == "delete":
        hs.delete(target)
    else:
        raise SystemExit(f"unknown op {op!r}")
    hs.close()
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
