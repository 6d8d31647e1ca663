"""A service process for the SIGTERM and SIGKILL tests: ``hybridsag serve`` as the CLI runs it,
optionally with a write that waits at its ``commit`` step.

Usage: ``python tests/service_child.py [--hold RESOURCE_ID]``. Settings come from the environment
(``tests.servicesupport.child_env``). With ``--hold``, the write of RESOURCE_ID creates the file
``<data dir>.held`` at its commit step and waits there until ``<data dir>.release`` exists, so a
test can signal the process while that write is in flight.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from hybridsag.consistency.service import ServiceReconciler
from hybridsag.search import HybridSearch
from hybridsag.service import serve
from hybridsag.settings import Settings


def main(argv: list[str]) -> int:
    settings = Settings()
    hold = argv[1] if len(argv) > 1 and argv[0] == "--hold" else None
    held = Path(f"{settings.data_dir}.held")
    release = Path(f"{settings.data_dir}.release")

    def hook(step: str, resource_id: str) -> None:
        if step == "commit" and resource_id == hold:
            held.touch()
            while not release.exists():
                time.sleep(0.01)

    logging.basicConfig(level=logging.INFO)
    hs = HybridSearch(settings, step_hook=hook if hold else None)
    try:
        serve(settings, reconciler=ServiceReconciler(), search=hs)
    finally:
        hs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
