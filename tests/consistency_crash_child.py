"""Child process of the crash tests: run one write and SIGKILL itself at one step.

Usage: ``python -m tests.consistency_crash_child DATA_DIR OP STEP TARGET [TEXT]``

OP is ``ingest`` or ``delete``; STEP is a write-path step name given to the step hook (``claim``,
``vectors``, ``commit``, ``tombstone``, ``vectors_delete``, ``purge``) or ``upsert`` (the
process dies inside ``dense.upsert`` after writing half of the rows). Exit code 3 means the
write finished without reaching the step (a test failure); a kill shows as -9 to the parent.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


from tests.consistency_support import (
    FaultyDense,
    clear_env,
    make_settings,
    open_search,
    own_dense_index,
)


def main(argv: list[str]) -> int:
    data_dir, op, step, target = argv[:4]
    text = argv[4] if len(argv) > 4 else ""
    clear_env()
    settings = make_settings(Path(data_dir))

    def hook(name: str, resource_id: str) -> None:
        if name == step and resource_id == target:
            os.kill(os.getpid(), signal.SIGKILL)

    dense = None
    if step == "upsert":
        inner = own_dense_index(settings)
        dense = FaultyDense(inner, upsert_fault="kill", only_resource=target)
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
