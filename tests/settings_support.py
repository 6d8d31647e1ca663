"""Settings for module-scoped fixtures, which run before the per-test autouse isolation."""

from __future__ import annotations

import os
from typing import Any

import pytest

from hybridsag.settings import Settings


def clean_env_settings(**fields: Any) -> Settings:
    """``Settings`` built with no ``HYBRIDSAG_*`` variable and no stray config in the cwd (the
    autouse fixture of tests/conftest.py is per test; module fixtures run before it)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith("HYBRIDSAG_"):
                mp.delenv(name)
        mp.chdir(fields["data_dir"].parent)
        return Settings(**fields)
