"""Moved to :mod:`hybridsag.fusion.text.sentences` (the one text package): this name stays
importable for one release and warns."""

from __future__ import annotations

from hybridsag.fusion.text import sentences as _moved
from hybridsag.fusion.text import moved_module

#: nothing is exported from the old place: its names are read through __getattr__, warned
__all__: list[str] = []

__getattr__ = moved_module("hybridsag.sentences", _moved)
