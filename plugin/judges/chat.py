"""The ``chat`` judge: the Jev question asked of any model on an OpenAI-compatible chat endpoint,
the yes-probability read from the token log-probabilities of its one-word answer.

Wire format (one request per candidate; ``judge.chat.path`` replaces the path)::

    POST {base_url}/v1/chat/completions
    Authorization: Bearer <key>          (when judge.chat.api_key is set)

    {"model": m, "messages": [{"role": "system", ...}, {"role": "user", ...}],
     "max_tokens": 1, "temperature": 0, "logprobs": true, "top_logprobs": k}

    200 {"choices": [{"logprobs": {"content": [{"token": "yes", "logprob": -0.02,
          "top_logprobs": [{"token": "yes", "logprob": -0.02}, {"token": "no", ...}, ...]}]}}],
         "usage": {"prompt_tokens": n, "completion_tokens": n}}

The question is the Jev judge's (:func:`hybridsag.judges.jev.build_question`: its instructions
with the passage as a delimited data block, and its criteria) under the Jev state
(:func:`hybridsag.judges.jev.build_state`: the question, the accepted evidence and, from round 2
on, this candidate's own score of the last round marked provisional), shown as JSON, followed
by "answer with one word: yes or no" (:func:`build_messages`).

The probability (:func:`yes_probability`): over the first token's ``top_logprobs`` (and the token
chosen), the probability mass of the tokens that read ``yes`` (or ``true``) once stripped of
spaces and punctuation and lower-cased, against that of ``no`` (or ``false``):
``p = yes / (yes + no)``. A side missing from the listed tokens has at most the mass of the
least likely listed token, which is taken for it (a bound that keeps an answer it never saw from
counting as certain). A reply whose listed tokens hold neither raises
:class:`~hybridsag.errors.JudgeResponseError`.

Contract of :meth:`ChatJudge.judge` (as the Jev judge's; the machinery is shared,
:mod:`hybridsag.judges.remote` and :class:`hybridsag.remote_calls.Endpoint`): one probability per
candidate or an exception, never a default. At most ``max_in_flight`` requests at once; a
request over ``token_budget`` estimated tokens raises :class:`~hybridsag.errors.JudgeError`
naming the candidate before anything is sent; every reply validated (a choice with logprobs,
finite log-probabilities not above 0, token counts); retries, ``Retry-After``, timeouts, the key
and the search's remote budget (``judge/chat``) are the endpoint's; an LRU cache keyed by
``(model, sha256(messages))`` answers a repeated question without a request.

Example::

    judge = ChatJudge(ChatJudgeSettings(base_url="http://127.0.0.1:8000", model="qwen3-8b"))
    judge.judge("Who founded X?", candidates).probabilities["chunk-1"]
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx

from hybridsag.errors import ConfigError
from hybridsag.judges.base import Candidate, JudgeResult
from hybridsag.judges.jev import build_question, build_state
from hybridsag.judges.remote import (
    Batch,
    CacheKey,
    Item,
    JudgementCache,
    Trace,
    ask,
    check_request,
    json_tokens,
    judge_order,
    sha256_of,
)
from hybridsag.remote_calls import JUDGE_ERRORS, Endpoint, count_of, is_number

if TYPE_CHECKING:
    from hybridsag.parts import Parts
    from hybridsag.settings import ChatJudgeSettings

__all__ = ["NO", "PATH", "SYSTEM", "YES", "ChatJudge", "build", "build_messages", "yes_probability"]

#: The path appended to ``base_url`` unless ``judge.chat.path`` names another.
PATH = "/v1/chat/completions"
#: Answer tokens (stripped of spaces and punctuation, lower-cased) that mean yes, and no.
YES = frozenset({"yes", "true"})
NO = frozenset({"no", "false"})

#: The chat messages of one judgement.
_Messages = list[dict[str, str]]

SYSTEM = (
    "You judge passages for a search engine. Read the state and the question about one passage, "
    "then answer with exactly one word: yes or no."
)
_ANSWER = (
    "Answer yes when: {true}\nAnswer no when: {false}\n"
    "Answer with one word, yes or no."
)


def build_messages(
    question: str,
    candidate: Candidate,
    evidence: Sequence[Candidate] = (),
    provisional: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """The chat messages of one judgement (module docstring): the Jev state (with only this
    candidate's provisional score) as JSON, the Jev question, the yes/no instruction."""
    cid = candidate.chunk_id
    own = {cid: provisional[cid]} if provisional and cid in provisional else None
    state = build_state(question, evidence, own)
    q = build_question(candidate)
    user = (
        "State:\n" + json.dumps(state, ensure_ascii=False, indent=1) + "\n\n"
        + q["instructions"] + "\n\n" + _ANSWER.format(**q["criteria"])
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _word(token: str) -> str:
    return token.strip().strip(".,!?:;\"'`*()[]").lower()


def yes_probability(top: Sequence[tuple[str, float]]) -> float | None:
    """``yes / (yes + no)`` over ``(token, logprob)`` pairs (module docstring), or None when the
    tokens hold neither answer. Example: ``yes_probability([("Yes", -0.1), ("No", -2.4)])``."""
    if not top:
        return None
    masses = {}
    for token, logprob in top:
        masses[token] = max(masses.get(token, 0.0), math.exp(logprob))
    yes = sum(m for t, m in masses.items() if _word(t) in YES)
    no = sum(m for t, m in masses.items() if _word(t) in NO)
    if yes == 0.0 and no == 0.0:
        return None
    floor = min(masses.values())  # an unlisted token is at most as likely as the least listed
    yes = yes or floor
    no = no or floor
    return yes / (yes + no)


class ChatJudge:
    """The chat yes/no judge (module docstring). ``client``: an ``httpx.Client`` to use (its
    timeouts apply; :meth:`close` leaves it open).

    Raises :class:`~hybridsag.errors.ConfigError` for an unset ``model``, an unset or bad
    ``base_url``, or a key that cannot go in a header.
    """

    name = "chat"

    def __init__(self, settings: ChatJudgeSettings, *, client: httpx.Client | None = None) -> None:
        if not settings.model:
            raise ConfigError("judge.chat.model is not set: name the model the endpoint serves")
        self.settings = settings
        self.model = settings.model
        self.cache = JudgementCache(settings.cache_size)
        self._endpoint = Endpoint.for_section(
            settings,
            remote="judge/chat",
            label="chat judge",
            setting="judge.chat",
            default_path=PATH,
            model=self.model,
            errors=JUDGE_ERRORS,
            client=client,
            user_agent="hybridsag-chat-judge/0.1",
        )

    def __repr__(self) -> str:
        return f"ChatJudge(model={self.model!r}, url={self._endpoint.url!r})"

    def close(self) -> None:
        """Close the HTTP client if this judge built it."""
        self._endpoint.close()

    def __enter__(self) -> ChatJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """The endpoint's totals (:meth:`hybridsag.remote_calls.Endpoint.stats`)."""
        return self._endpoint.stats()

    def _body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": self.settings.top_logprobs,
        }

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        """One probability per candidate (:class:`hybridsag.judges.base.Judge`).

        ``detail`` holds ``model``, ``requests``, ``attempts``, ``retried`` and ``order``.

        Raises InputError (empty question, duplicate chunk ids, bad provisional scores),
        JudgeError (a request over the token budget; transport failure), JudgeTimeoutError,
        JudgeResponseError, JudgeBudgetError.
        """
        started = time.perf_counter()
        check_request(question, candidates, provisional)
        trace = Trace()
        answers = ask(
            candidates,
            prepare=lambda cand: self._prepare(question, cand, evidence, provisional),
            size=lambda messages: json_tokens(self._body(messages)),
            cache=self.cache,
            endpoint=self._endpoint,
            envelope=0,
            budget=self.settings.token_budget,
            max_items=1,
            setting="judge.chat.token_budget",
            send=lambda batch, abort: self._ask(batch, abort, trace),
            max_in_flight=self.settings.max_in_flight,
            thread_name="chat",
        )
        result = answers.values
        detail = {
            "model": self.model,
            "requests": len(answers.batches),
            "attempts": trace.attempts,
            "retried": trace.retried,
            "order": judge_order(result, candidates),
        }
        return JudgeResult(probabilities=result, usage=answers.usage(trace, started), detail=detail)

    def _prepare(
        self,
        question: str,
        candidate: Candidate,
        evidence: Sequence[Candidate],
        provisional: Mapping[str, float] | None,
    ) -> tuple[CacheKey, _Messages]:
        """One candidate's cache key and messages."""
        messages = build_messages(question, candidate, evidence, provisional)
        return (self.model, sha256_of(messages), ""), messages

    def _ask(
        self, batch: Batch[Item[_Messages]], abort: threading.Event, trace: Trace
    ) -> dict[str, float]:
        """One candidate's request (a batch holds one): its yes-probability by chunk id."""
        item = batch.items[0]
        reply = self._endpoint.post(self._body(item.payload), abort=abort)
        bad = partial(self._endpoint.bad_reply, reply=reply)
        data = self._endpoint.loads(reply)
        top = _first_token(data, bad)
        p = yes_probability(top)
        if p is None:
            raise bad(
                f"the answer's most likely tokens hold neither yes nor no: "
                f"{[t for t, _ in top][:10]}"
            )
        usage = data.get("usage")
        counts = [0, 0]
        if usage is not None:
            if not isinstance(usage, dict):
                raise bad(f"usage is {type(usage).__name__}, not an object")
            for i, name in enumerate(("prompt_tokens", "completion_tokens")):
                n = usage.get(name, 0)
                if not count_of(n):
                    raise bad(f"usage.{name} is {n!r}, not a count")
                counts[i] = n
        trace.accept(self._endpoint, reply, input_tokens=counts[0], output_tokens=counts[1])
        return {item.candidate.chunk_id: p}


def _first_token(data: Any, bad: Callable[[str], Exception]) -> list[tuple[str, float]]:
    """The first answer token and its ``top_logprobs`` as ``(token, logprob)`` pairs."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no 'choices' list with a choice object")
    logprobs = choices[0].get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        raise bad("the choice has no logprobs.content (does the endpoint support logprobs?)")
    first = content[0]
    entries = [first, *(first.get("top_logprobs") or [])]
    if not isinstance(first.get("top_logprobs"), list):
        raise bad("the first token has no top_logprobs list")
    out: list[tuple[str, float]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise bad(f"a top_logprobs entry is {type(entry).__name__}, not an object")
        token, logprob = entry.get("token"), entry.get("logprob")
        if not isinstance(token, str):
            raise bad(f"a token is {token!r}, not a string")
        if not is_number(logprob) or not math.isfinite(logprob) or logprob > 0:
            raise bad(f"the logprob of {token!r} is {logprob!r}, not a finite number <= 0")
        out.append((token, float(logprob)))
    return out


def build(parts: Parts) -> ChatJudge:
    """Registry factory: the chat judge from ``judge.chat``."""
    return ChatJudge(parts.settings.judge.chat)
