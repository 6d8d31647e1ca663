"""What the remote judges share (``jev``, ``reranker``, ``chat``): the request checks, the
judgement cache, token estimates, batches cut by a budget, batches run in parallel, and the
order of the answers.

A remote judge turns its candidates into items (one per candidate not found in the cache),
cuts them into batches with :func:`plan_batches` (no batch over the token budget nor over its
item cap; an item that alone is over the budget raises :class:`~hybridsag.errors.JudgeError`
naming it before anything is sent), sends them with :func:`hybridsag.remote_calls.run_parallel` (at
most ``max_in_flight`` at once; the first failure stops the other batches and is raised), caches
each batch's answers as it comes, and reports the order with :func:`judge_order`.
The HTTP request itself, its retries and the search's budget are
:class:`hybridsag.remote_calls.Endpoint`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hybridsag.errors import ConfigError, InputError, JudgeError
from hybridsag.judges.base import Candidate
from hybridsag.remote_calls import Reply, is_number

__all__ = [
    "Batch",
    "CacheKey",
    "JudgementCache",
    "Trace",
    "check_request",
    "dumps",
    "estimate_tokens",
    "judge_order",
    "plan_batches",
    "sha256_of",
]

T = TypeVar("T")

CacheKey = tuple[str, str, str]


def estimate_tokens(text: str) -> int:
    """Estimated model tokens of ``text``: ``ceil(ascii_chars / 4) + non_ascii_chars``.

    English runs about four characters a token in common BPE vocabularies, while a CJK character
    is about one token (often more than one for rare ones), so plain ``chars / 4`` would
    undercount Chinese text by a factor of about four. The estimate is additive over pieces of
    text (up to rounding up), which is what the batcher relies on. Example:
    ``estimate_tokens("abcde") == 2``; ``estimate_tokens("爱吃鱼") == 3``.
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return -(-ascii_chars // 4) + (len(text) - ascii_chars)


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON (what cache keys and token estimates are taken over)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def sha256_of(value: Any) -> str:
    """sha256 of :func:`dumps` of ``value``."""
    return hashlib.sha256(dumps(value).encode("utf-8")).hexdigest()


def check_request(
    question: str, candidates: Sequence[Candidate], provisional: Mapping[str, float] | None
) -> None:
    """Refuse what no judge answers: an empty question, a chunk id given twice, a provisional
    score that is not a number in 0..1 (InputError naming it)."""
    if not question.strip():
        raise InputError("the judge question is empty")
    seen: set[str] = set()
    for cand in candidates:
        if cand.chunk_id in seen:
            raise InputError(f"candidate chunk id {cand.chunk_id!r} is given twice")
        seen.add(cand.chunk_id)
    for cid, p in (provisional or {}).items():
        if not is_number(p) or not math.isfinite(p) or not 0.0 <= p <= 1.0:
            raise InputError(f"provisional score of {cid!r} is {p!r}, not a number in 0..1")


class JudgementCache:
    """A thread-safe bounded LRU map ``(model, state sha256, question sha256) -> number``.

    ``maxsize == 0`` keeps nothing. Example: ``c = JudgementCache(2); c.put(k, 0.5); c.get(k)``.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 0:
            raise ConfigError(f"cache size {maxsize} must be >= 0")
        self.maxsize = maxsize
        self._data: OrderedDict[CacheKey, float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: CacheKey) -> float | None:
        """The cached value (and mark it recently used), or None."""
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: CacheKey, value: float) -> None:
        """Store ``value``, evicting the least recently used entry beyond ``maxsize``."""
        if self.maxsize == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


@dataclass
class Batch(Generic[T]):
    """Items sent in one request, with its index in the plan and its estimated tokens."""

    index: int
    items: list[T]
    tokens: int


def plan_batches(
    items: Sequence[T],
    *,
    sizes: Sequence[int],
    envelope: int,
    budget: int,
    max_items: int,
    setting: str,
    name: Callable[[T], str],
) -> list[Batch[T]]:
    """Greedy batches in input order: each at most ``max_items`` items and ``envelope`` (the
    tokens every request carries: the state, the question) plus its items' ``sizes`` at most
    ``budget`` estimated tokens.

    Raises:
        JudgeError: the envelope alone, or the envelope with one item, is over the budget
            (naming the item and the estimate, and ``setting``, the budget's setting).
    """
    if items and envelope >= budget:
        raise JudgeError(
            f"the judge state (the question and what goes with every request) is an estimated "
            f"{envelope} tokens, over {setting}={budget}"
        )
    batches: list[Batch[T]] = []
    current: list[T] = []
    size = envelope
    for item, tokens in zip(items, sizes):
        if envelope + tokens > budget:
            raise JudgeError(
                f"candidate {name(item)!r} with the state is an estimated {envelope + tokens} "
                f"tokens ({tokens} for the candidate), over {setting}={budget}"
            )
        if current and (size + tokens > budget or len(current) >= max_items):
            batches.append(Batch(len(batches), current, size))
            current, size = [], envelope
        current.append(item)
        size += tokens
    if current:
        batches.append(Batch(len(batches), current, size))
    return batches


@dataclass
class Trace:
    """What the requests of one ``judge()`` call did, added up from its worker threads: HTTP
    attempts, what each retry answered, and the tokens the replies reported."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    attempts: int = 0
    retried: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, reply: Reply, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        with self.lock:
            self.attempts += reply.attempts
            self.retried.extend(reply.retried)
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens


def judge_order(probabilities: Mapping[str, float], candidates: Sequence[Candidate]) -> list[str]:
    """Chunk ids by probability, ties by ``signals["bm25_rank"]`` (unranked last), then by
    input order: answers often come rounded, so ties are common."""
    position = {c.chunk_id: i for i, c in enumerate(candidates)}
    ranks = {c.chunk_id: float(c.signals.get("bm25_rank", math.inf)) for c in candidates}
    return sorted(probabilities, key=lambda cid: (-probabilities[cid], ranks[cid], position[cid]))
