"""Judges by name: the registry every judge is built through.

A judge answers, for every candidate passage of the SAG2 loop, the probability that it is a
necessary piece of the answer (:class:`~hybridsag.judges.base.Judge`). ``judge.name`` in the
settings picks one from :data:`JUDGES`; the six that ship are registered here, in one place,
each factory importing its module only when it is built (the cross-encoder's torch, the remote
judges' httpx are never imported by a search that does not use them). Three are remote: ``jev``
(the hosted Jev API), ``reranker`` (a TEI, Cohere/Jina-style or vLLM reranking endpoint) and
``chat`` (the Jev question asked of any model on an OpenAI-compatible chat endpoint). A team adds its own with
:func:`register_judge`::

    register_judge("mine", lambda parts: MyJudge(parts.settings))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hybridsag.errors import ConfigError
from hybridsag.judges.base import Candidate, Judge, JudgeResult, JudgeUsage

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = [
    "JUDGES",
    "Candidate",
    "Judge",
    "JudgeFactory",
    "JudgeResult",
    "JudgeUsage",
    "judge_names",
    "make_judge",
    "register_judge",
    "unregister_judge",
]

#: Builds a judge from the composition root (which hands it the store, tokenizer, embedder).
JudgeFactory = Callable[["Parts"], Judge]


def _features(parts: Parts) -> Judge:
    from hybridsag.judges.features import build

    return build(parts)


def _none(parts: Parts) -> Judge:
    from hybridsag.judges.simple import NoneJudge

    return NoneJudge()


def _jev(parts: Parts) -> Judge:
    from hybridsag.judges.jev import build

    return build(parts)


def _cross_encoder(parts: Parts) -> Judge:
    from hybridsag.judges.cross_encoder import build

    return build(parts)


def _reranker(parts: Parts) -> Judge:
    from hybridsag.judges.reranker import build

    return build(parts)


def _chat(parts: Parts) -> Judge:
    from hybridsag.judges.chat import build

    return build(parts)


#: name -> factory. The built-in judges, registered in this one place.
JUDGES: dict[str, JudgeFactory] = {
    "features": _features,
    "none": _none,
    "jev": _jev,
    "cross-encoder": _cross_encoder,
    "reranker": _reranker,
    "chat": _chat,
}

_BUILT_IN = frozenset(JUDGES)


def register_judge(name: str, factory: JudgeFactory) -> None:
    """Add a judge under ``name`` (ConfigError when the name is taken or not a plain name)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"judge name {name!r} must be letters, digits, '-' or '_'")
    if name in JUDGES:
        raise ConfigError(f"a judge named {name!r} is already registered")
    JUDGES[name] = factory


def unregister_judge(name: str) -> None:
    """Remove a judge added with :func:`register_judge` (built-ins cannot be removed)."""
    if name in _BUILT_IN:
        raise ConfigError(f"judge {name!r} ships with hybridsag and cannot be removed")
    JUDGES.pop(name, None)


def judge_names() -> tuple[str, ...]:
    """Every registered judge name, sorted."""
    return tuple(sorted(JUDGES))


def make_judge(name: str, parts: Parts) -> Judge:
    """Build the judge registered under ``name``; ConfigError lists the valid names."""
    try:
        factory = JUDGES[name]
    except KeyError:
        raise ConfigError(
            f"unknown judge {name!r} (judge.name); valid: {', '.join(judge_names())}"
        ) from None
    return factory(parts)
