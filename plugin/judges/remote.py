"""What the remote judges share (``jev``, ``reranker``, ``chat``): the request checks, the
judgement cache, token estimates, batches cut by a budget, batches run in parallel, and the
order of the answers.

A remote judge hands its candidates to :func:`ask`, which turns them into items (one per
candidate not found in the cache), cuts them into batches with :func:`plan_batches` (no batch
over the token budget nor over its item cap; an item that alone is over the budget raises
:class:`~hybridsag.errors.JudgeError` naming it before anything is sent), sends them with
:func:`hybridsag.remote_calls.run_parallel` (at most ``max_in_flight`` at once; the first failure
stops the other batches and is raised) and caches each batch's answers as it comes; the judge
books each valid reply with :meth:`Trace.accept` and reports the order with :func:`judge_order`.
The HTTP request itself, its retries and the search's budget are
:class:`hybridsag.remote_calls.Endpoint`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hybridsag.errors import ConfigError, InputError, JudgeError
from hybridsag.judges.base import Candidate, JudgeUsage
from hybridsag.remote_calls import Endpoint, Reply, is_number, run_parallel

__all__ = [
    "Answers",
    "Batch",
    "CacheKey",
    "Item",
    "JudgementCache",
    "Trace",
    "ask",
    "check_request",
    "dumps",
    "estimate_tokens",
    "json_tokens",
    "judge_order",
    "plan_batches",
    "sha256_of",
]

T = TypeVar("T")
P = TypeVar("P")

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


def json_tokens(value: Any) -> int:
    """Estimated tokens of ``value`` as JSON: :func:`estimate_tokens` of :func:`dumps`."""
    return estimate_tokens(dumps(value))


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

    def accept(
        self, endpoint: Endpoint, reply: Reply, *, input_tokens: int = 0, output_tokens: int = 0
    ) -> None:
        """Book a reply that passed validation: here (:meth:`add`), and on ``endpoint`` as one
        answered request (``requests``) with the tokens it reported (on the search's meter
        too)."""
        self.add(reply, input_tokens=input_tokens, output_tokens=output_tokens)
        endpoint.count("requests")
        endpoint.charge(input_tokens=input_tokens, output_tokens=output_tokens)


@dataclass
class Item(Generic[P]):
    """One candidate the cache did not answer: what its request carries for it (``payload``),
    its cache key and its estimated tokens."""

    candidate: Candidate
    payload: P
    key: CacheKey
    tokens: int


@dataclass(frozen=True)
class Answers(Generic[P]):
    """What :func:`ask` got: one value per candidate by chunk id, in candidate order (from the
    cache or a reply), the batches sent, and how many values the cache gave."""

    values: dict[str, float]
    batches: list[Batch[Item[P]]]
    cached: int

    def usage(self, trace: Trace, started: float) -> JudgeUsage:
        """The judgement's usage: one call per batch, the tokens ``trace`` booked, the seconds
        since ``started`` (a ``time.perf_counter()``), the cache's answers."""
        return JudgeUsage(
            calls=len(self.batches),
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            seconds=time.perf_counter() - started,
            cached=self.cached,
        )


def ask(
    candidates: Sequence[Candidate],
    *,
    prepare: Callable[[Candidate], tuple[CacheKey, P]],
    size: Callable[[P], int],
    cache: JudgementCache,
    endpoint: Endpoint,
    envelope: int,
    budget: int,
    max_items: int | None,
    setting: str,
    send: Callable[[Batch[Item[P]], threading.Event], Mapping[str, float]],
    max_in_flight: int,
    thread_name: str,
) -> Answers[P]:
    """One value per candidate: from ``cache`` where it holds one, else from ``send``.

    ``prepare(candidate)`` gives the candidate's cache key and payload, ``size(payload)`` its
    estimated tokens. The cache's answers are charged on ``endpoint`` (``cached``); the others
    are cut into batches by :func:`plan_batches` (``envelope``, ``budget``, at most
    ``max_items`` items, None: no cap; ``setting`` names the budget), and
    ``send(batch, abort)`` runs for each through :func:`hybridsag.remote_calls.run_parallel`
    (``max_in_flight``, ``thread_name``), returning the batch's values by chunk id; each
    batch's values are cached as it comes back, so a batch that finished stays cached when
    another fails.

    Raises:
        JudgeError: a candidate (or the envelope) over the budget, before anything is sent;
            and whatever ``send`` raises first.
    """
    values: dict[str, float] = {}
    pending: list[Item[P]] = []
    for cand in candidates:
        key, payload = prepare(cand)
        hit = cache.get(key)
        if hit is not None:
            values[cand.chunk_id] = hit
            continue
        pending.append(Item(cand, payload, key, size(payload)))
    cached = len(values)
    endpoint.charge(cached=cached)
    batches = plan_batches(
        pending,
        sizes=[item.tokens for item in pending],
        envelope=envelope,
        budget=budget,
        max_items=max(len(pending), 1) if max_items is None else max_items,
        setting=setting,
        name=lambda item: item.candidate.chunk_id,
    )

    def send_and_keep(batch: Batch[Item[P]], abort: threading.Event) -> Mapping[str, float]:
        answers = send(batch, abort)
        for item in batch.items:
            cache.put(item.key, answers[item.candidate.chunk_id])
        return answers

    for answers in run_parallel(
        batches, send_and_keep, max_in_flight=max_in_flight, thread_name=thread_name
    ):
        values.update(answers)
    return Answers({c.chunk_id: values[c.chunk_id] for c in candidates}, batches, cached)


def judge_order(probabilities: Mapping[str, float], candidates: Sequence[Candidate]) -> list[str]:
    """Chunk ids by probability, ties by ``signals["bm25_rank"]`` (unranked last), then by
    input order: answers often come rounded, so ties are common."""
    position = {c.chunk_id: i for i, c in enumerate(candidates)}
    ranks = {c.chunk_id: float(c.signals.get("bm25_rank", math.inf)) for c in candidates}
    return sorted(probabilities, key=lambda cid: (-probabilities[cid], ranks[cid], position[cid]))
