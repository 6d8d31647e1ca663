"""Fusion: the frozen ``Hit``/``FusedHit`` types, ``rrf()``, ``convex()``, the per-query trust
step, the bounded rules and ``fuse()``.

Standard library only, no I/O: everything here is a pure function of its arguments.
"""

from hybridsag.fusion.convex import NORMALISERS, convex, normalise
from hybridsag.fusion.facts import chunk_facts
from hybridsag.fusion.fuse import METHODS, STEPS, fuse
from hybridsag.fusion.rrf import rrf
from hybridsag.fusion.results import cap_per_resource, merge_adjacent, monotone_scores
from hybridsag.fusion.rules import RULE_REASONS, apply_rules
from hybridsag.fusion.text.markdown import markup_only
from hybridsag.fusion.text import (
    contains_whole_identifier,
    defines_identifier,
    is_heading_only,
    looks_like_identifier,
    normalize_title,
)
from hybridsag.fusion.trust import (
    DEFAULT_TRUST_MODEL,
    KINDS,
    SIGNAL_NAMES,
    QueryFacts,
    Trust,
    TrustModel,
    assess,
    list_stats,
    trust_signals,
)
from hybridsag.fusion.types import ChunkFacts, ChunkView, Contribution, FusedHit, Hit

__all__ = [
    "DEFAULT_TRUST_MODEL",
    "KINDS",
    "METHODS",
    "NORMALISERS",
    "RULE_REASONS",
    "SIGNAL_NAMES",
    "STEPS",
    "ChunkFacts",
    "ChunkView",
    "Contribution",
    "FusedHit",
    "Hit",
    "QueryFacts",
    "Trust",
    "TrustModel",
    "apply_rules",
    "assess",
    "cap_per_resource",
    "chunk_facts",
    "contains_whole_identifier",
    "convex",
    "defines_identifier",
    "fuse",
    "is_heading_only",
    "list_stats",
    "looks_like_identifier",
    "markup_only",
    "merge_adjacent",
    "monotone_scores",
    "normalise",
    "normalize_title",
    "rrf",
    "trust_signals",
]
