"""Wait until a hybridsag service answers ``/readyz`` with 200 (``make demo`` uses it).

Usage: ``python scripts/wait_ready.py URL [TIMEOUT_S]``; exit 0 when ready, 1 on timeout.
"""

from __future__ import annotations

import sys
import time

import httpx

__all__ = ["wait_ready"]


def wait_ready(url: str, timeout_s: float) -> bool:
    """True once ``url/readyz`` answers 200 within ``timeout_s`` seconds."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url.rstrip('/')}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


if __name__ == "__main__":
    target = sys.argv[1]
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else 180.0
    if not wait_ready(target, limit):
        sys.stderr.write(f"{target} was not ready within {limit:g} s\n")
        sys.exit(1)
