"""Fusion: the frozen ``Hit``/``FusedHit`` types, ``rrf()``, the bounded rules and ``fuse()``.

Standard library only, no I/O: everything here is a pure function of its arguments.
"""

from hybridsag.fusion.fuse import fuse
from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.rules import RULE_REASONS, apply_rules
from hybridsag.fusion.text import (
    contains_whole_identifier,
    defines_identifier,
    is_heading_only,
    looks_like_identifier,
    normalize_title,
)
from hybridsag.fusion.types import ChunkView, Contribution, FusedHit, Hit

__all__ = [
    "RULE_REASONS",
    "ChunkView",
    "Contribution",
    "FusedHit",
    "Hit",
    "apply_rules",
    "contains_whole_identifier",
    "defines_identifier",
    "fuse",
    "is_heading_only",
    "looks_like_identifier",
    "normalize_title",
    "rrf",
]
