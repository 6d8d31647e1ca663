"""Recall paths by name: the registry every path is built through.

A path is a :class:`~hybridsag.paths.base.Retriever` built from the composition root
(:class:`~hybridsag.parts.Parts`, which :class:`~hybridsag.components.Components` provides) by
the factory of its :class:`PathSpec`. The four
that ship are registered here, in one place: ``bm25`` (plain lexical), ``title`` (title matches),
``dense`` (embeddings in Milvus) and ``sag2`` (lexical-judge with expansion rounds; it joins the
dense path's hits into its judged pool when both run). Settings, eval, the CLI and every error
message read the names from :func:`path_names`; adding a path is one module and one call::

    register_path(PathSpec("toy", build_toy, description="my own recall path"))

Fusion never reads a path's name: what it needs (a judge's probability, a next-hop find) are
typed fields of the :class:`~hybridsag.fusion.Hit` a path returns.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybridsag.errors import ConfigError
from hybridsag.lazy import lazy_names

if TYPE_CHECKING:
    from hybridsag.parts import Parts
    from hybridsag.paths.base import PathResult, Peers, Retriever

# The path types load on first use: the registry's names (the CLI's help, a client's checks)
# cost no import of the fusion types or the store.
__getattr__, __dir__ = lazy_names(
    __name__, globals(), {"hybridsag.paths.base": ("PathResult", "Peers", "Retriever")}
)

__all__ = [
    "BUILTIN_PATHS",
    "PATHS",
    "PathFactory",
    "PathResult",
    "PathSpec",
    "Peers",
    "Retriever",
    "check_path_names",
    "check_weights",
    "path_kinds",
    "path_names",
    "path_spec",
    "register_path",
    "unregister_path",
]

#: Builds a path's retriever from the composition root.
PathFactory = Callable[["Parts"], "Retriever"]


@dataclass(frozen=True, slots=True)
class PathSpec:
    """A registered recall path.

    ``needs_dense``: the path reads the embedder or the dense index, so it is left out of a
    search when the dense path is off (``embedding.model = "none"``). ``reads_vectors``: the
    path uses the passage vectors the index keeps when there are any (the SAG2 judge's
    cosines), so eval builds them. ``joins``: the paths whose hits this one takes (as
    ``peers``) when they run in the same search; they are started first. ``corpus_scores``: its
    raw and path scores depend on statistics of the whole index (FTS5 document frequencies and
    average lengths), so they tell something about other tenants' documents: a search with
    ``filters.tenant`` set shows its rank and RRF term only. ``description``: one line for
    help texts. ``kind``: what the fusion trust step takes the path for
    (:data:`hybridsag.fusion.KINDS`: ``judged``, ``embedding``, ``lexical``, ``title``; any
    other value, such as ``other``, keeps its configured weight whatever the trust step finds).
    """

    name: str
    build: PathFactory
    description: str
    needs_dense: bool = False
    reads_vectors: bool = False
    joins: tuple[str, ...] = ()
    kind: str = "other"
    corpus_scores: bool = False


def _builtin(module: str) -> PathFactory:
    """The ``build`` of ``hybridsag.paths.<module>``, imported when the path is first built:
    a process that runs one path never imports the others (SAG2's judge and evidence code,
    the dense path's Milvus adapter)."""

    def build(parts: Parts) -> Retriever:
        factory: PathFactory = importlib.import_module(f"hybridsag.paths.{module}").build
        return factory(parts)

    build.__name__ = build.__qualname__ = f"{module}.build"
    return build


#: The paths that ship, in the order results list them.
BUILTIN_PATHS: tuple[PathSpec, ...] = (
    PathSpec(
        "bm25",
        _builtin("bm25"),
        "BM25 over the lexical index, no judge",
        kind="lexical",
        corpus_scores=True,
    ),
    PathSpec(
        "sag2",
        _builtin("sag2"),
        "SAG2 lexical-judge: BM25, a judge, term-expansion rounds",
        reads_vectors=True,
        joins=("dense",),
        kind="judged",
        corpus_scores=True,
    ),
    PathSpec(
        "dense",
        _builtin("dense"),
        "the query's embedding searched in Milvus",
        needs_dense=True,
        kind="embedding",
    ),
    PathSpec(
        "title",
        _builtin("title"),
        "exact and near-exact title matches",
        kind="title",
        corpus_scores=True,
    ),
)

#: name -> spec; the built-ins first, then what :func:`register_path` added.
PATHS: dict[str, PathSpec] = {spec.name: spec for spec in BUILTIN_PATHS}


def register_path(spec: PathSpec) -> None:
    """Add a recall path (ConfigError when the name is taken, reserved or not a plain name)."""
    name = spec.name
    if not name or not name.replace("_", "").isalnum() or not name.isascii():
        raise ConfigError(f"path name {name!r} must be ASCII letters, digits or '_'")
    if name == "fused" or name in PATHS:
        raise ConfigError(f"a path named {name!r} already exists")
    unknown = [j for j in spec.joins if j not in PATHS]
    if unknown:
        raise ConfigError(f"path {name!r} joins unknown path(s) {unknown}")
    PATHS[name] = spec


def unregister_path(name: str) -> None:
    """Remove a path added with :func:`register_path` (the built-ins stay)."""
    if any(spec.name == name for spec in BUILTIN_PATHS):
        raise ConfigError(f"path {name!r} ships with hybridsag and cannot be removed")
    PATHS.pop(name, None)


def path_names() -> tuple[str, ...]:
    """Every registered path name, built-ins first."""
    return tuple(PATHS)


def path_kinds(names: Sequence[str]) -> dict[str, str]:
    """``name -> kind`` (:attr:`PathSpec.kind`) of registered paths, for the fusion trust step."""
    return {name: PATHS[name].kind for name in names if name in PATHS}


def path_spec(name: str) -> PathSpec:
    """The spec of ``name``; ConfigError lists the valid names."""
    try:
        return PATHS[name]
    except KeyError:
        raise ConfigError(f"unknown path {name!r}; valid: {', '.join(path_names())}") from None


def check_path_names(names: object, *, where: str) -> tuple[str, ...]:
    """``names`` as a tuple of registered path names (ValueError names the bad one)."""
    if isinstance(names, str) or not isinstance(names, list | tuple):
        raise ValueError(f"{where} must be a list of path names, got {names!r:.80}")
    for name in names:
        if name not in PATHS:
            raise ValueError(f"unknown path {name!r} in {where}; valid: {', '.join(path_names())}")
    return tuple(names)


def check_weights(weights: Mapping[str, object], *, where: str = "weights") -> dict[str, float]:
    """Per-path fusion weights: registered path names, finite numbers in 0..100 (ValueError
    names the bad one). Shared by the settings check and by a search's own ``weights=``."""
    if not isinstance(weights, Mapping):
        raise ValueError(f"{where} must be a mapping of path name to weight, got {weights!r:.80}")
    out: dict[str, float] = {}
    for name, value in weights.items():
        if name not in PATHS:
            raise ValueError(f"unknown path {name!r} in {where}; valid: {', '.join(path_names())}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0.0 <= value <= 100.0
        ):
            raise ValueError(f"{where}[{name!r}]={value!r} must be a number in 0..100")
        out[name] = float(value)
    return out
