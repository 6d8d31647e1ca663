"""The remote judges ``reranker`` (TEI, Cohere/Jina-style, vLLM score) and ``chat`` (yes/no from
token log-probabilities) against a real local HTTP server that speaks each wire format
(tests/modelserver.py), faults included."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hybridsag.errors import (
    BudgetError,
    ConfigError,
    InputError,
    JudgeError,
    JudgeResponseError,
    JudgeTimeoutError,
)
from hybridsag.judges.base import Candidate
from hybridsag.judges.chat import ChatJudge, build_messages, yes_probability
from hybridsag.judges.jev import CRITERIA
from hybridsag.judges.reranker import RerankerJudge, calibrate
from hybridsag.remote_calls import QueryMeter, metered
from hybridsag.settings import ChatJudgeSettings, RerankerSettings
from pydantic import ValidationError

from tests.jevserver import score as word_score
from tests.modelserver import ModelServer
from tests.scriptedserver import Fault

QUESTION = "Which river flows through the capital city of Hungary?"
APIS = ("tei", "cohere", "vllm")
PATHS = {"tei": "/rerank", "cohere": "/v1/rerank", "vllm": "/score"}


def candidates() -> list[Candidate]:
    return [
        Candidate("c-capital", "Budapest", "Budapest is the capital city of Hungary.",
                  {"bm25_rank": 1}),
        Candidate("c-cats", "Cats", "Domestic felines sleep a lot.", {"bm25_rank": 2}),
        Candidate("c-gold", "Danube", "GOLD The Danube flows through Budapest.", {"bm25_rank": 3}),
        Candidate("c-vienna", "Vienna", "Vienna is the capital city of Austria.", {"bm25_rank": 4}),
    ]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


def reranker(server: ModelServer, api: str, **kw: Any) -> RerankerJudge:
    values: dict[str, Any] = {"api": api, "base_url": server.url, "backoff_s": 0.0, "timeout_s": 5.0}
    if api == "cohere":
        values["model"] = "rerank-test"
    values.update(kw)
    return RerankerJudge(RerankerSettings(**values))


def chat(server: ModelServer, **kw: Any) -> ChatJudge:
    values: dict[str, Any] = {"base_url": server.url, "model": "chat-test", "backoff_s": 0.0,
                              "timeout_s": 5.0, **kw}
    return ChatJudge(ChatJudgeSettings(**values))


# -- the reranker --------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_reranker_scores_every_pair_through_its_calibration(
    server: ModelServer, api: str
) -> None:
    cands = candidates()
    passages = [f"{c.title}\n{c.text}" for c in cands]
    logits = server.logit(QUESTION, passages)
    with reranker(server, api) as judge, metered(QueryMeter()) as meter:
        result = judge.judge(QUESTION, cands)
    expected = {c.chunk_id: 1 / (1 + math.exp(-x)) for c, x in zip(cands, logits)}
    assert result.probabilities == pytest.approx(expected, abs=1e-9)
    assert result.detail["order"][0] == "c-gold"
    assert result.detail["calibration"] == ("sigmoid" if api == "tei" else "identity")
    (request,) = server.requests
    assert request.path == PATHS[api]
    if api == "tei":  # TEI is asked for its raw logits, which the judge squashes itself
        assert request.body["raw_scores"] is True and request.body["texts"] == passages
        assert result.detail["raw_scores"]["c-gold"] == pytest.approx(logits[2])
    elif api == "cohere":
        assert request.body["model"] == "rerank-test" and request.body["top_n"] == 4
        assert request.body["documents"] == passages
    else:
        assert request.body["text_1"] == QUESTION and request.body["text_2"] == passages
    usage = meter.usage()["judge/reranker"]
    assert usage["calls"] == 1 and usage["input_tokens"] > 0
    assert result.usage.calls == 1 and result.usage.input_tokens == usage["input_tokens"]


def test_sigmoid_temperature_and_offset(server: ModelServer) -> None:
    cands = candidates()
    logits = server.logit(QUESTION, [f"{c.title}\n{c.text}" for c in cands])
    with reranker(server, "tei", temperature=4.0, offset=2.0) as judge:
        result = judge.judge(QUESTION, cands)
    for cand, x in zip(cands, logits):
        assert result.probabilities[cand.chunk_id] == pytest.approx(1 / (1 + math.exp(-(x - 2) / 4)))
    assert calibrate(0.0, method="sigmoid") == 0.5
    assert calibrate(-1e6, method="sigmoid") == 0.0 and calibrate(1e6, method="sigmoid") == 1.0
    with pytest.raises(ValueError, match="outside 0..1"):
        calibrate(1.5, method="identity")


def test_tei_identity_takes_teis_own_sigmoid(server: ModelServer) -> None:
    with reranker(server, "tei", calibration="identity") as judge:
        result = judge.judge(QUESTION, candidates())
    assert server.requests[0].body["raw_scores"] is False
    assert 0.0 < min(result.probabilities.values()) < max(result.probabilities.values()) < 1.0


def test_batches_and_cache(server: ModelServer) -> None:
    cands = candidates()
    with reranker(server, "cohere", batch_size=3) as judge:
        first = judge.judge(QUESTION, cands)
        assert sorted(len(r.body["documents"]) for r in server.requests) == [1, 3]
        again = judge.judge(QUESTION, cands)
        assert server.request_count == 2 and again.usage.cached == 4
        assert again.probabilities == first.probabilities
        assert judge.stats()["cache_hits"] == 4


def test_a_passage_over_the_token_budget_is_refused_before_sending(server: ModelServer) -> None:
    huge = Candidate("huge-1", "Huge", "word " * 3000)
    with reranker(server, "vllm", token_budget=500) as judge, pytest.raises(JudgeError) as info:
        judge.judge(QUESTION, [*candidates(), huge])
    assert "'huge-1'" in str(info.value) and "judge.reranker.token_budget=500" in str(info.value)
    assert server.request_count == 0


@pytest.mark.parametrize(
    ("api", "kind", "words"),
    [
        ("tei", "fewer", "not scored"),
        ("cohere", "fewer", "not scored"),
        ("vllm", "duplicate_index", "answered twice"),
        ("cohere", "out_of_range", "outside 0..1"),
        ("tei", "nan", "malformed JSON"),
        ("vllm", "string_value", "not a finite number"),
        ("tei", "malformed", "malformed JSON"),
    ],
)
def test_reranker_bad_answers_raise(server: ModelServer, api: str, kind: str, words: str) -> None:
    server.script(Fault(kind))
    with reranker(server, api, max_retries=3) as judge:
        with pytest.raises(JudgeResponseError, match=words) as info:
            judge.judge(QUESTION, candidates())
        assert info.value.retriable is False and server.request_count == 1
        assert judge.stats()["invalid_replies"] == 1
        assert judge.judge(QUESTION, candidates()).usage.cached == 0  # nothing was kept


def test_reranker_retries_429_then_5xx(server: ModelServer) -> None:
    server.script(Fault.http(429, retry_after="0.1"), Fault.http(502))
    with reranker(server, "tei") as judge:
        result = judge.judge(QUESTION, candidates())
    assert result.detail["retried"] == ["429", "502"] and result.detail["attempts"] == 3
    first, second, _ = server.requests
    assert second.arrived - first.arrived >= 0.1


def test_reranker_timeout(server: ModelServer) -> None:
    server.script(Fault.delay(0.6), Fault.delay(0.6))
    with reranker(server, "tei", timeout_s=0.2, max_retries=1) as judge:
        with pytest.raises(JudgeTimeoutError):
            judge.judge(QUESTION, candidates())


def test_reranker_settings() -> None:
    with pytest.raises(ValidationError, match="mean nothing to calibration 'identity'"):
        RerankerSettings(api="cohere", temperature=2.0)
    with pytest.raises(ValidationError, match="path"):
        RerankerSettings(path="rerank")
    with pytest.raises(ConfigError, match="judge.reranker.model"):
        RerankerJudge(RerankerSettings(api="cohere", base_url="http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match="judge.reranker.base_url is not set"):
        RerankerJudge(RerankerSettings())


def test_input_is_checked(server: ModelServer) -> None:
    with reranker(server, "tei") as judge:
        with pytest.raises(InputError, match="given twice"):
            judge.judge(QUESTION, [*candidates(), candidates()[0]])
        with pytest.raises(InputError, match="empty"):
            judge.judge("  ", candidates())
    assert server.request_count == 0


# -- the chat judge ------------------------------------------------------------------------------


def test_chat_reads_the_yes_probability(server: ModelServer) -> None:
    cands = candidates()
    with chat(server, max_in_flight=2) as judge, metered(QueryMeter()) as meter:
        result = judge.judge(QUESTION, cands)
    for cand in cands:  # the server's p(yes) against p(no), normalised over the two
        p = min(max(word_score(QUESTION, f"{cand.title}\n{cand.text}"), 1e-4), 1 - 1e-4)
        assert result.probabilities[cand.chunk_id] == pytest.approx(p, rel=1e-9)
    assert result.detail["order"][0] == "c-gold"
    assert server.request_count == 4  # one request a candidate
    body = server.requests[0].body
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["max_tokens"] == 1
    user = body["messages"][-1]["content"]
    assert CRITERIA["true"] in user and "<passage>" in user and QUESTION in user
    usage = meter.usage()["judge/chat"]
    assert usage["calls"] == 4 and usage["output_tokens"] == 4 and usage["input_tokens"] > 0


def test_chat_prompt_carries_only_its_own_provisional_score() -> None:
    cand = candidates()[0]
    messages = build_messages(QUESTION, cand, provisional={"c-capital": 0.4, "c-cats": 0.1})
    assert '"c-capital": 0.4' in messages[1]["content"] and "c-cats" not in messages[1]["content"]


def test_yes_probability() -> None:
    assert yes_probability([("Yes", math.log(0.8)), ("No", math.log(0.2))]) == pytest.approx(0.8)
    assert yes_probability([(" yes.", -0.1), ("YES", -0.3), ("no", -2.0)]) == pytest.approx(
        (math.exp(-0.1) + math.exp(-0.3)) / (math.exp(-0.1) + math.exp(-0.3) + math.exp(-2.0))
    )
    # "no" not listed: its mass is at most the least likely listed token's
    only_yes = yes_probability([("Yes", math.log(0.9)), ("Sure", math.log(0.05))])
    assert only_yes == pytest.approx(0.9 / 0.95)
    assert yes_probability([("True", -0.5), ("False", -1.5)]) == pytest.approx(
        1 / (1 + math.exp(-1.0))
    )
    assert yes_probability([("Maybe", -0.1)]) is None and yes_probability([]) is None


@pytest.mark.parametrize(
    ("kind", "words"),
    [("neither", "neither yes nor no"), ("no_logprobs", "logprobs"), ("malformed", "malformed")],
)
def test_chat_bad_answers_raise(server: ModelServer, kind: str, words: str) -> None:
    server.script(Fault(kind))
    with chat(server, max_in_flight=1) as judge:
        with pytest.raises(JudgeResponseError, match=words):
            judge.judge(QUESTION, candidates()[:1])
        assert judge.stats()["invalid_replies"] == 1


def test_chat_retries_and_budget(server: ModelServer) -> None:
    server.script(Fault.http(503), Fault.http(429, retry_after_ms="50"))
    with chat(server, max_in_flight=1) as judge:
        result = judge.judge(QUESTION, candidates()[:2])
    assert result.detail["retried"] == ["503", "429"] and server.request_count == 4
    with chat(server, max_in_flight=1) as judge, metered(QueryMeter(max_calls=2)) as meter:
        with pytest.raises(BudgetError, match="search.remote_budget_calls=2"):
            judge.judge(QUESTION, candidates())
        assert meter.budget()["calls"] == 2 and meter.spent is not None
        # what was answered before the budget ran out is cached
        assert judge.judge(QUESTION, candidates()[:2]).usage.cached == 2


def test_chat_time_budget_cuts_a_slow_call() -> None:
    # the reply comes after 2 s; the budget ends the request at 150 ms (a timeout while no
    # budget is left is reported as the budget's, not as the endpoint's timeout)
    with ModelServer(latency_s=2.0) as slow, chat(slow, max_in_flight=1) as judge:
        with metered(QueryMeter(max_ms=150)) as meter:
            with pytest.raises(BudgetError, match="ended a request in flight"):
                judge.judge(QUESTION, candidates()[:1])
        assert "remote_budget_ms=150" in str(meter.spent) and slow.request_count == 1


def test_chat_settings(server: ModelServer) -> None:
    with pytest.raises(ConfigError, match="judge.chat.model is not set"):
        ChatJudge(ChatJudgeSettings(base_url=server.url))
    huge = Candidate("huge-1", "Huge", "word " * 5000)
    with chat(server, token_budget=500) as judge, pytest.raises(JudgeError, match="'huge-1'"):
        judge.judge(QUESTION, [huge])
    assert server.request_count == 0
