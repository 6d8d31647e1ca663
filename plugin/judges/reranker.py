"""The ``reranker`` judge: a reranking endpoint a team already runs scores every (question,
passage) pair, and a calibration the judge declares turns each score into a yes-probability.

Wire formats (``judge.reranker.api``; one request per batch; ``judge.reranker.path`` replaces
the path)::

    tei     POST {base_url}/rerank        (Text Embeddings Inference)
            {"query": q, "texts": [...], "raw_scores": true, "truncate": true}
            200 [{"index": i, "score": s}, ...]     (any order; tokens: x-compute-tokens)
    cohere  POST {base_url}/v1/rerank     (Cohere, Jina, vLLM, Infinity)
            {"model": m, "query": q, "documents": [...], "top_n": n, "return_documents": false}
            200 {"results": [{"index": i, "relevance_score": s}, ...],
                 "usage": {"total_tokens": n}?}
    vllm    POST {base_url}/score         (vLLM's score API)
            {"model": m, "text_1": q, "text_2": [...]}
            200 {"data": [{"index": i, "score": s}, ...], "usage": {"prompt_tokens": n}?}

Calibration (:func:`calibrate`): ``sigmoid`` gives ``1 / (1 + exp(-(s - offset) /
temperature))``, for logits (TEI is then asked for raw scores); ``identity`` takes a score
already in 0..1 (Cohere's and Jina's relevance scores, vLLM's one-label cross-encoder scores,
TEI's own sigmoid when ``raw_scores`` is false) and a score outside 0..1 is an error.
``calibration = "auto"`` is ``sigmoid`` for ``tei`` and ``identity`` for the others.

Contract of :meth:`RerankerJudge.judge` (as the Jev judge's; the machinery is shared,
:mod:`hybridsag.judges.remote` and :class:`hybridsag.remote_calls.Endpoint`): one probability per
candidate or an exception, never a default.

* A passage is the pair text of :func:`hybridsag.judges.cross_encoder.pair_text` (title, new
  line, text). A reranker sees one pair at a time: ``evidence`` and ``provisional`` are
  accepted and not sent.
* Batches hold at most ``batch_size`` passages and ``token_budget`` estimated tokens (the
  question counts in each); a passage that alone with the question is over the budget raises
  :class:`~hybridsag.errors.JudgeError` naming it, before anything is sent. At most
  ``max_in_flight`` requests run at once; the first failure stops the others.
* Every reply is validated: every index 0..n-1 answered exactly once, no other, a finite
  number that is not a bool (in 0..1 under ``identity``), tokens a count where given. A
  violation raises :class:`~hybridsag.errors.JudgeResponseError` (not retried; counted as
  ``invalid_replies``). Retries, ``Retry-After``, timeouts, the key and the search's remote
  budget (``judge/reranker``) are the endpoint's.
* A thread-safe LRU cache keyed by ``(api:model, sha256(question), sha256(passage))`` keeps the
  raw scores (``usage.cached`` counts its answers); the calibration is applied after it.

Example::

    judge = RerankerJudge(RerankerSettings(api="tei", base_url="http://127.0.0.1:8080"))
    judge.judge("Who founded X?", candidates).probabilities["chunk-1"]
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx

from hybridsag.errors import ConfigError
from hybridsag.judges.base import Candidate, JudgeResult
from hybridsag.judges.cross_encoder import pair_text
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
from hybridsag.remote_calls import JUDGE_ERRORS, Endpoint, Reply, by_index, count_of, is_number

if TYPE_CHECKING:
    from hybridsag.parts import Parts
    from hybridsag.settings import RerankerSettings

__all__ = ["PATHS", "RerankerJudge", "build", "calibrate"]

#: api -> the path appended to ``base_url`` unless ``judge.reranker.path`` names another.
PATHS: Mapping[str, str] = {"tei": "/rerank", "cohere": "/v1/rerank", "vllm": "/score"}


def calibrate(score: float, *, method: str, temperature: float = 1.0, offset: float = 0.0) -> float:
    """A reranker score as a yes-probability (see the module docstring). ValueError for a score
    outside 0..1 under ``identity``. Example: ``calibrate(0.0, method="sigmoid") == 0.5``."""
    if method == "identity":
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"score {score!r} is outside 0..1")
        return float(score)
    z = (score - offset) / temperature
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)  # the same value, without overflow for a very negative z
    return e / (1.0 + e)


class RerankerJudge:
    """The reranker judge (module docstring). ``client``: an ``httpx.Client`` to use (its
    timeouts apply; :meth:`close` leaves it open).

    Raises :class:`~hybridsag.errors.ConfigError` for an unset or bad ``base_url``, a key that
    cannot go in a header, or ``api = "cohere"`` without a ``model`` (vLLM's score API and TEI
    serve their one model without one).
    """

    name = "reranker"

    def __init__(self, settings: RerankerSettings, *, client: httpx.Client | None = None) -> None:
        if settings.api == "cohere" and not settings.model:
            raise ConfigError(
                "judge.reranker.model is not set: the cohere-style /v1/rerank API names the "
                "model in every request (e.g. rerank-v3.5, jina-reranker-v2-base-multilingual)"
            )
        self.settings = settings
        self.api = settings.api
        self.model = settings.model or settings.api
        self.calibration = settings.resolved_calibration
        self.cache = JudgementCache(settings.cache_size)
        self._endpoint = Endpoint.for_section(
            settings,
            remote="judge/reranker",
            label=f"{self.api} reranker",
            setting="judge.reranker",
            default_path=PATHS[self.api],
            model=self.model,
            errors=JUDGE_ERRORS,
            client=client,
            user_agent="hybridsag-reranker/0.1",
        )
        self._read = _READERS[self.api]

    def __repr__(self) -> str:
        return f"RerankerJudge(api={self.api!r}, model={self.model!r}, url={self._endpoint.url!r})"

    def close(self) -> None:
        """Close the HTTP client if this judge built it."""
        self._endpoint.close()

    def __enter__(self) -> RerankerJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """The endpoint's totals (:meth:`hybridsag.remote_calls.Endpoint.stats`)."""
        return self._endpoint.stats()

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        """One probability per candidate (:class:`hybridsag.judges.base.Judge`).

        ``detail`` holds ``api``, ``model``, ``calibration``, ``requests``, ``attempts``,
        ``retried``, ``batches``, ``raw_scores`` (by chunk id, before calibration) and
        ``order``.

        Raises InputError (empty question, duplicate chunk ids, bad provisional scores),
        JudgeError (a passage over the token budget; transport failure), JudgeTimeoutError,
        JudgeResponseError, JudgeBudgetError.
        """
        started = time.perf_counter()
        check_request(question, candidates, provisional)
        qhash = sha256_of(question)
        family = f"{self.api}:{self.model}"

        def prepare(cand: Candidate) -> tuple[CacheKey, str]:
            passage = pair_text(cand)
            return (family, qhash, sha256_of(passage)), passage

        s = self.settings
        trace = Trace()
        answers = ask(
            candidates,
            prepare=prepare,
            size=lambda passage: json_tokens(passage) + 1,
            cache=self.cache,
            endpoint=self._endpoint,
            envelope=json_tokens({"model": self.model, "query": question}),
            budget=s.token_budget,
            max_items=s.batch_size,
            setting="judge.reranker.token_budget",
            send=lambda batch, abort: self._send(question, batch, abort, trace),
            max_in_flight=s.max_in_flight,
            thread_name="reranker",
        )
        raw = answers.values
        probs = {cid: self._probability(score) for cid, score in raw.items()}
        detail: dict[str, Any] = {
            "api": self.api,
            "model": self.model,
            "calibration": self.calibration,
            "requests": len(answers.batches),
            "attempts": trace.attempts,
            "retried": trace.retried,
            "batches": [len(b.items) for b in answers.batches],
            "raw_scores": raw,
            "order": judge_order(probs, candidates),
        }
        return JudgeResult(probabilities=probs, usage=answers.usage(trace, started), detail=detail)

    def _probability(self, score: float) -> float:
        s = self.settings
        return calibrate(score, method=self.calibration, temperature=s.temperature, offset=s.offset)

    def _body(self, question: str, passages: list[str]) -> dict[str, Any]:
        if self.api == "tei":
            return {
                "query": question,
                "texts": passages,
                "raw_scores": self.calibration == "sigmoid",
                "truncate": True,
            }
        if self.api == "cohere":
            return {
                "model": self.model,
                "query": question,
                "documents": passages,
                "top_n": len(passages),
                "return_documents": False,
            }
        body: dict[str, Any] = {"text_1": question, "text_2": passages}
        if self.settings.model:
            body["model"] = self.settings.model
        return body

    def _send(
        self, question: str, batch: Batch[Item[str]], abort: threading.Event, trace: Trace
    ) -> dict[str, float]:
        """One batch's request: its passages' raw scores by chunk id."""
        items = batch.items
        reply = self._endpoint.post(self._body(question, [i.payload for i in items]), abort=abort)
        bad = partial(self._endpoint.bad_reply, reply=reply)
        indexed, tokens = self._read(self._endpoint.loads(reply), reply, len(items), bad)
        scores: dict[str, float] = {}
        for index, item in enumerate(items):
            value = indexed[index]
            if not is_number(value) or not math.isfinite(value):
                raise bad(f"score of index {index} is {value!r}, not a finite number")
            if self.calibration == "identity" and not 0.0 <= value <= 1.0:
                raise bad(
                    f"score of index {index} is {value!r}, outside 0..1 (calibration "
                    "'identity'; a logit wants judge.reranker.calibration = 'sigmoid')"
                )
            scores[item.candidate.chunk_id] = float(value)
        trace.accept(self._endpoint, reply, input_tokens=tokens)
        return scores


def _indexed(
    entries: Any, n: int, score_key: str, bad: Callable[[str], Exception]
) -> dict[int, Any]:
    """``{index: score}`` from a list of ``{"index": i, score_key: s}``: every index 0..n-1
    exactly once, no other."""
    if not isinstance(entries, list):
        raise bad(f"the scores are {type(entries).__name__}, not a list")

    def score(entry: dict[str, Any], index: int) -> Any:
        if score_key not in entry:
            raise bad(f"the entry of index {index} has no {score_key!r}")
        return entry[score_key]

    out = by_index(entries, n, score, bad, entry="a score entry")
    missing = [i for i in range(n) if i not in out]
    if missing:
        raise bad(f"{len(missing)} passage(s) not scored: indexes {missing[:5]}")
    return out


def _tokens(usage: Any, bad: Callable[[str], Exception]) -> int:
    """Input tokens of an optional ``usage`` object (``prompt_tokens``, else ``total_tokens``)."""
    if usage is None:
        return 0
    if not isinstance(usage, dict):
        raise bad(f"usage is {type(usage).__name__}, not an object")
    for name in ("prompt_tokens", "total_tokens"):
        if name in usage:
            if not count_of(usage[name]):
                raise bad(f"usage.{name} is {usage[name]!r}, not a count")
            return int(usage[name])
    return 0


def _read_tei(
    data: Any, reply: Reply, n: int, bad: Callable[[str], Exception]
) -> tuple[dict[int, Any], int]:
    header = reply.response.headers.get("x-compute-tokens", "")
    return _indexed(data, n, "score", bad), int(header) if header.strip().isdigit() else 0


def _read_object(
    data: Any, reply: Reply, n: int, bad: Callable[[str], Exception], *, scores: str, score: str
) -> tuple[dict[int, Any], int]:
    """An object reply: its ``scores`` list of ``{"index": i, score: s}`` and its ``usage``."""
    if not isinstance(data, dict):
        raise bad(f"top level is {type(data).__name__}, not an object")
    return _indexed(data.get(scores), n, score, bad), _tokens(data.get("usage"), bad)


#: api -> how its reply is read: the scores by index and the input tokens.
_READERS: Mapping[
    str, Callable[[Any, Reply, int, Callable[[str], Exception]], tuple[dict[int, Any], int]]
] = {
    "tei": _read_tei,
    "cohere": partial(_read_object, scores="results", score="relevance_score"),
    "vllm": partial(_read_object, scores="data", score="score"),
}


def build(parts: Parts) -> RerankerJudge:
    """Registry factory: the reranker judge from ``judge.reranker``."""
    return RerankerJudge(parts.settings.judge.reranker)
