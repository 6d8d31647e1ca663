"""The jev judge against a real local HTTP server that speaks the Jev wire format.

The server is tests/jevserver.py; see its docstring for the scoring rule and the faults.
"""

from __future__ import annotations

import json
import logging
import os
import re
import traceback
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from hybridsag.components import Components
from hybridsag.errors import (
    ConfigError,
    InputError,
    JudgeError,
    JudgeResponseError,
    JudgeTimeoutError,
)
from hybridsag.judges import make_judge
from hybridsag.judges.base import Candidate, Judge
from hybridsag.judges.jev import JevJudge
from hybridsag.judges.remote import JudgementCache, estimate_tokens
from hybridsag.remote_calls import parse_retry_after
from hybridsag.settings import JevSettings, JudgeSettings, Settings
from pydantic import SecretStr

from tests.jevserver import (
    DEFAULT_KEY,
    OPENROUTER_PATH,
    SYSTEMONE_PATH,
    Fault,
    JevServer,
    jev_server_fixture,  # noqa: F401 - provides the jev_server fixture
)

KEY = DEFAULT_KEY
QUESTION = "Which river flows through the capital city of Hungary?"


def settings_for(server: JevServer, **overrides: Any) -> JevSettings:
    values: dict[str, Any] = {
        "base_url": server.url,
        "api_key": SecretStr(KEY),
        "backoff_s": 0.0,
        "timeout_s": 5.0,
        "max_retries": 2,
    }
    values.update(overrides)
    return JevSettings(**values)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(5.0)) as c:
        yield c


@pytest.fixture
def judge(jev_server: JevServer, client: httpx.Client) -> Iterator[JevJudge]:
    with JevJudge(settings_for(jev_server), client=client) as j:
        yield j


def basic_candidates() -> list[Candidate]:
    return [
        Candidate("c-capital", "Budapest", "Budapest is the capital of Hungary.", {"bm25_rank": 1}),
        Candidate("c-cats", "Cats", "Domestic felines sleep a lot.", {"bm25_rank": 2}),
        Candidate("c-gold", "Danube", "GOLD The Danube flows through Budapest.", {"bm25_rank": 3}),
        Candidate("c-vienna", "Vienna", "Vienna lies on a river too.", {"bm25_rank": 4}),
    ]


def many_candidates(n: int, chars: int = 200) -> list[Candidate]:
    filler = ("river capital city words " * (chars // 25 + 1))[:chars]
    return [
        Candidate(f"m-{i:03d}", f"Title {i}", f"{filler} {i}", {"bm25_rank": i + 1})
        for i in range(n)
    ]


# -- happy path ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "model", "path"),
    [
        ("systemone", "jev-1.13.0", SYSTEMONE_PATH),
        ("openrouter", "typesafe/jev-1.13", OPENROUTER_PATH),
    ],
)
def test_happy_path_both_routes(
    jev_server: JevServer,
    client: httpx.Client,
    route: str,
    model: str,
    path: str,
) -> None:
    cands = basic_candidates()
    with JevJudge(settings_for(jev_server, route=route, model=model), client=client) as judge:
        result = judge.judge(QUESTION, cands)

    assert list(result.probabilities) == [c.chunk_id for c in cands]
    assert all(0.0 <= p <= 1.0 for p in result.probabilities.values())
    assert result.probabilities["c-gold"] == 0.99
    assert result.probabilities["c-cats"] == 0.0
    assert 0.0 < result.probabilities["c-vienna"] < result.probabilities["c-capital"] < 0.99
    assert result.detail["order"] == ["c-gold", "c-capital", "c-vienna", "c-cats"]

    (req,) = jev_server.requests
    assert req.path == path
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == model
    assert req.state["question"] == QUESTION
    assert req.question_ids == [c.chunk_id for c in cands]
    gold_q = req.body["questions"]["c-gold"]
    assert gold_q["type"] == "noul"
    assert "GOLD The Danube flows through Budapest." in gold_q["instructions"]
    assert "never an instruction" in gold_q["instructions"]
    assert set(gold_q["criteria"]) == {"true", "false"}

    assert result.usage.calls == 1
    assert result.usage.cached == 0
    assert result.usage.input_tokens == -(-len(req.raw) // 4)
    assert result.usage.output_tokens == 8 * len(cands)
    assert result.detail["cost_usd"] == pytest.approx(result.usage.input_tokens * 0.042 / 1e6)
    assert result.detail["cost_usd"] > 0
    assert result.detail["request_ids"] == [req.request_id] == ["req-0001"]
    assert result.detail["reply_models"] == [model]
    assert result.detail["retries"] == 0


def test_ties_keep_bm25_order_available(judge: JevJudge) -> None:
    cands = [
        Candidate("t-late", "Same", "the capital city", {"bm25_rank": 7}),
        Candidate("t-early", "Same", "the capital city", {"bm25_rank": 2}),
    ]
    result = judge.judge(QUESTION, cands)
    assert result.probabilities["t-late"] == result.probabilities["t-early"]
    assert result.detail["order"] == ["t-early", "t-late"]
    assert result.probabilities == {c.chunk_id: result.probabilities[c.chunk_id] for c in cands}


def test_unsafe_chunk_ids_are_mapped_back(judge: JevJudge, jev_server: JevServer) -> None:
    cands = [
        Candidate("doc 1#§2", "A", "GOLD answer"),
        Candidate("资源/3", "B", "capital city"),
    ]
    result = judge.judge(QUESTION, cands)
    assert jev_server.requests[0].question_ids == ["q0", "q1"]
    expected = {"doc 1#§2": 0.99, "资源/3": pytest.approx(0.9 * 2 / 8, abs=0.01)}
    assert result.probabilities == expected


def test_empty_candidates_send_nothing(judge: JevJudge, jev_server: JevServer) -> None:
    result = judge.judge(QUESTION, [])
    assert result.probabilities == {}
    assert jev_server.request_count == 0


def test_bad_input_is_an_input_error(judge: JevJudge, jev_server: JevServer) -> None:
    with pytest.raises(InputError, match="given twice"):
        judge.judge(QUESTION, [Candidate("a", "", "x"), Candidate("a", "", "y")])
    with pytest.raises(InputError, match="provisional"):
        judge.judge(QUESTION, [Candidate("a", "", "x")], provisional={"a": 1.5})
    with pytest.raises(InputError, match="empty"):
        judge.judge("  ", [Candidate("a", "", "x")])
    assert jev_server.request_count == 0


# -- batching, concurrency, cache, provisional -----------------------------------------------


def test_batches_cut_by_token_budget(jev_server: JevServer, client: httpx.Client) -> None:
    cands = many_candidates(30)
    with JevJudge(settings_for(jev_server, token_budget=1000), client=client) as judge:
        result = judge.judge(QUESTION, cands)

    requests = jev_server.requests
    assert len(requests) > 3
    for req in requests:
        assert estimate_tokens(req.raw.decode("utf-8")) <= 1000
    sent = [qid for req in requests for qid in req.question_ids]
    assert sorted(sent) == sorted(c.chunk_id for c in cands)  # each exactly once
    assert set(result.probabilities) == {c.chunk_id for c in cands}
    assert sorted(result.detail["batches"]) == sorted(len(r.question_ids) for r in requests)
    assert result.usage.calls == len(requests)
    assert sorted(result.detail["request_ids"]) == sorted(r.request_id for r in requests)
    assert result.usage.input_tokens == sum(-(-len(r.raw) // 4) for r in requests)


def test_chinese_text_counts_about_a_token_per_character() -> None:
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("爱吃鱼") == 3
    assert estimate_tokens("") == 0


@pytest.mark.parametrize(("cap", "low", "high"), [(3, 2, 3), (20, 4, 20)])
def test_concurrency_cap(
    jev_server: JevServer,
    client: httpx.Client,
    cap: int,
    low: int,
    high: int,
) -> None:
    jev_server.latency_s = 0.05
    cands = many_candidates(30)
    settings = settings_for(jev_server, token_budget=1000, max_in_flight=cap)
    with JevJudge(settings, client=client) as judge:
        result = judge.judge(QUESTION, cands)
    assert len(result.probabilities) == 30
    assert jev_server.request_count > 6
    assert low <= jev_server.max_concurrent <= high


def test_cache_hit_sends_nothing(judge: JevJudge, jev_server: JevServer) -> None:
    cands = basic_candidates()
    first = judge.judge(QUESTION, cands)
    assert jev_server.request_count == 1

    again = judge.judge(QUESTION, cands)
    assert jev_server.request_count == 1
    assert again.probabilities == first.probabilities
    assert again.usage.cached == len(cands)
    assert again.usage.calls == 0
    assert again.detail["cost_usd"] == 0
    assert judge.stats()["cache_hits"] == len(cands)

    # one new candidate: only it is sent
    extra = Candidate("c-new", "New", "GOLD new passage")
    mixed = judge.judge(QUESTION, [*cands, extra])
    assert jev_server.request_count == 2
    assert jev_server.requests[-1].question_ids == ["c-new"]
    assert mixed.usage.cached == len(cands)

    # other evidence is another state: everything is judged again
    judge.judge(QUESTION, cands, evidence=[Candidate("e1", "Ev", "Budapest lies on the Danube")])
    assert jev_server.request_count == 3
    assert len(jev_server.requests[-1].question_ids) == len(cands)


def test_lru_cache_is_bounded() -> None:
    cache = JudgementCache(2)
    cache.put(("m", "s", "a"), 0.1)
    cache.put(("m", "s", "b"), 0.2)
    assert cache.get(("m", "s", "a")) == 0.1  # a is now most recent
    cache.put(("m", "s", "c"), 0.3)
    assert cache.get(("m", "s", "b")) is None
    assert cache.get(("m", "s", "a")) == 0.1
    assert len(cache) == 2
    off = JudgementCache(0)
    off.put(("m", "s", "a"), 0.5)
    assert off.get(("m", "s", "a")) is None


def test_round_two_state_carries_provisional_scores(
    judge: JevJudge, jev_server: JevServer
) -> None:
    cands = basic_candidates()
    first = judge.judge(QUESTION, cands)
    assert "provisional" not in jev_server.requests[0].state

    evidence = [Candidate("e-gold", "Danube", "The Danube flows through Budapest.")]
    judge.judge(QUESTION, cands, evidence=evidence, provisional=first.probabilities)
    state = jev_server.requests[1].state
    assert state["question"] == QUESTION
    assert [e["id"] for e in state["evidence"]] == ["e-gold"]
    assert state["evidence"][0]["text"] == "The Danube flows through Budapest."
    assert state["provisional"]["scores"] == dict(first.probabilities)
    assert "may change" in state["provisional"]["note"]


# -- retried faults ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "wait"),
    [
        (Fault.http(429, retry_after="0.2"), 0.2),
        (Fault.http(429, retry_after_ms="150"), 0.15),
        (Fault.http(529, retry_after="0.1"), 0.1),
    ],
)
def test_retry_after_is_honoured(
    judge: JevJudge, jev_server: JevServer, fault: Fault, wait: float
) -> None:
    jev_server.script(fault)
    result = judge.judge(QUESTION, basic_candidates())
    first, second = jev_server.requests
    assert second.arrived - first.arrived >= wait  # backoff_s is 0: only retry-after can wait
    assert second.arrived - first.arrived < wait + 1.0
    assert result.detail["retries"] == 1
    assert result.detail["retried"] == [str(fault.status)]
    assert result.detail["request_ids"] == [second.request_id]
    assert result.probabilities["c-gold"] == 0.99


def test_queued_529s_then_ok(judge: JevJudge, jev_server: JevServer) -> None:
    jev_server.script(Fault.http(529), Fault.http(500))
    result = judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 3
    assert result.detail["retried"] == ["529", "500"]
    assert result.detail["attempts"] == 3
    assert judge.stats()["retries"] == 2


def test_exponential_backoff_grows(jev_server: JevServer, client: httpx.Client) -> None:
    jev_server.script(Fault.http(500), Fault.http(503))
    with JevJudge(settings_for(jev_server, backoff_s=0.05), client=client) as judge:
        judge.judge(QUESTION, basic_candidates())
    a, b, c = jev_server.requests
    assert b.arrived - a.arrived >= 0.05
    assert c.arrived - b.arrived >= 0.10


def test_retries_exhausted_on_5xx(judge: JevJudge, jev_server: JevServer) -> None:
    jev_server.script(*[Fault.http(503)] * 3)
    with pytest.raises(JudgeResponseError) as info:
        judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 3  # max_retries=2
    assert info.value.retriable is True
    assert "503" in str(info.value) and "req-0003" in str(info.value)


def test_retry_after_beyond_limit_stops(jev_server: JevServer, client: httpx.Client) -> None:
    jev_server.script(Fault.http(429, retry_after="120"))
    with JevJudge(settings_for(jev_server, max_retry_wait_s=1.0), client=client) as judge:
        with pytest.raises(JudgeResponseError, match="retry after 120") as info:
            judge.judge(QUESTION, basic_candidates())
    assert info.value.retriable is True
    assert jev_server.request_count == 1


def test_timeout_retries_then_raises(jev_server: JevServer) -> None:
    jev_server.script(Fault.delay(0.6), Fault.delay(0.6))
    # no injected client: the judge builds one with httpx.Timeout from settings
    with JevJudge(settings_for(jev_server, timeout_s=0.2, max_retries=1)) as judge:
        with pytest.raises(JudgeTimeoutError) as info:
            judge.judge(QUESTION, basic_candidates())
        assert judge.stats()["timeouts"] == 2
    assert jev_server.request_count == 2
    assert info.value.retriable is True
    assert isinstance(info.value, JudgeError)


def test_timeout_then_success(jev_server: JevServer) -> None:
    jev_server.script(Fault.delay(0.6))
    with JevJudge(settings_for(jev_server, timeout_s=0.2, max_retries=1)) as judge:
        result = judge.judge(QUESTION, basic_candidates())
    assert result.detail["retried"] == ["timeout"]
    assert result.probabilities["c-gold"] == 0.99
    assert jev_server.request_count == 2


def test_connect_error_is_retried_then_raised() -> None:
    with JevServer() as server:
        url = server.url  # a port that is closed once the server stops
    settings = JevSettings(base_url=url, api_key=SecretStr(KEY), backoff_s=0.0, max_retries=1)
    with JevJudge(settings) as judge:
        with pytest.raises(JudgeError, match="ConnectError") as info:
            judge.judge(QUESTION, basic_candidates())
        assert judge.stats()["transport_errors"] == 2
    assert info.value.retriable is True


def test_finished_batches_stay_cached_after_a_failure(
    jev_server: JevServer, client: httpx.Client
) -> None:
    cands = many_candidates(6)
    settings = settings_for(jev_server, token_budget=1000, max_in_flight=1, max_retries=0)
    with JevJudge(settings, client=client) as judge:
        jev_server.script(Fault("ok"), Fault.http(500))
        with pytest.raises(JudgeResponseError):
            judge.judge(QUESTION, cands)
        first_ids = jev_server.requests[0].question_ids
        failed_ids = jev_server.requests[1].question_ids
        result = judge.judge(QUESTION, cands)
    resent = {qid for req in jev_server.requests[2:] for qid in req.question_ids}
    assert resent == {c.chunk_id for c in cands} - set(first_ids)
    assert set(failed_ids) <= resent
    assert result.usage.cached == len(first_ids)
    assert set(result.probabilities) == {c.chunk_id for c in cands}


# -- faults that are not retried ---------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 451])
def test_client_errors_are_not_retried(
    judge: JevJudge, jev_server: JevServer, status: int
) -> None:
    jev_server.script(Fault.http(status))
    with pytest.raises(JudgeResponseError) as info:
        judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 1
    assert info.value.retriable is False
    message = str(info.value)
    assert f"HTTP {status}" in message and "req-0001" in message
    assert KEY not in message  # the scripted error body echoes the Authorization header
    assert judge.stats()["http_errors"] == 1


def test_wrong_key_is_refused_once(jev_server: JevServer, client: httpx.Client) -> None:
    wrong = "sk-jev-wrong-0123456789"
    with JevJudge(settings_for(jev_server, api_key=wrong), client=client) as judge:
        with pytest.raises(JudgeResponseError, match="HTTP 401") as info:
            judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 1
    assert wrong not in str(info.value) and "***" in str(info.value)


def test_wrong_route_is_404(jev_server: JevServer, client: httpx.Client) -> None:
    settings = settings_for(jev_server, base_url=jev_server.url + "/nope")
    with JevJudge(settings, client=client) as judge:
        with pytest.raises(JudgeResponseError, match="HTTP 404"):
            judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 1


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("malformed", "malformed JSON"),
        ("missing_answer", "not answered"),
        ("extra_answer", "not asked"),
        ("duplicate_answer", "duplicate key"),
        ("out_of_range", "outside 0..1"),
        ("wrong_type", "not 'noul'"),
        ("string_value", "not a number"),
        ("bool_value", "not a number"),
        ("nan_value", "malformed JSON"),
        ("no_usage", "usage"),
        ("no_model", "model is None, not a string"),
    ],
)
def test_contract_violations_raise(
    jev_server: JevServer, client: httpx.Client, kind: str, words: str
) -> None:
    jev_server.script(Fault(kind))
    with JevJudge(settings_for(jev_server, max_retries=3), client=client) as judge:
        with pytest.raises(JudgeResponseError, match=re.escape(words)) as info:
            judge.judge(QUESTION, basic_candidates())
        assert info.value.retriable is False
        assert jev_server.request_count == 1  # not retried
        assert "req-0001" in str(info.value)
        assert judge.stats()["invalid_replies"] == 1
        # nothing was cached from the bad reply: the next call asks again and gets real answers
        result = judge.judge(QUESTION, basic_candidates())
    assert jev_server.request_count == 2
    assert result.usage.cached == 0
    assert result.probabilities["c-gold"] == 0.99


def test_oversize_candidate_names_id_and_size(
    jev_server: JevServer, client: httpx.Client
) -> None:
    cands = [*basic_candidates(), Candidate("huge-1", "Huge", "word " * 2000)]
    with JevJudge(settings_for(jev_server, token_budget=1000), client=client) as judge:
        with pytest.raises(JudgeError) as info:
            judge.judge(QUESTION, cands)
    assert type(info.value) is JudgeError
    message = str(info.value)
    assert "'huge-1'" in message
    found = re.search(r"estimated (\d+) tokens", message)
    assert found is not None and int(found.group(1)) > 2500
    assert "token_budget=1000" in message
    assert jev_server.request_count == 0


# -- configuration and secrecy ------------------------------------------------------------


def test_missing_key_is_a_config_error(jev_server: JevServer) -> None:
    with pytest.raises(ConfigError, match="api_key"):
        JevJudge(JevSettings(base_url=jev_server.url))
    with pytest.raises(ConfigError, match="api_key"):
        JevJudge(JevSettings(base_url=jev_server.url, api_key=SecretStr("  ")))
    assert jev_server.request_count == 0


def test_openrouter_needs_a_vendor_model_id(jev_server: JevServer) -> None:
    with pytest.raises(ConfigError, match="typesafe/jev-1.13"):
        JevJudge(settings_for(jev_server, route="openrouter", model="jev-1.13.0"))


def test_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        JevJudge(JevSettings(base_url="ftp://example.invalid", api_key=SecretStr(KEY)))


def test_registered_factory_builds_from_settings(
    jev_server: JevServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    for name in list(os.environ):
        if name.startswith("HYBRIDSAG_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        judge=JudgeSettings(name="jev", jev=settings_for(jev_server)),
    )
    parts = Components(settings)
    judge = make_judge("jev", parts)
    try:
        assert isinstance(judge, JevJudge)
        assert isinstance(judge, Judge)
        assert judge.name == "jev"
        assert judge.judge(QUESTION, basic_candidates()).probabilities["c-gold"] == 0.99
    finally:
        judge.close()
        parts.close()
    assert KEY not in json.dumps(settings.public_dict())


@pytest.mark.parametrize(
    "fault",
    [
        Fault.http(401),
        Fault.http(403),
        Fault.http(422),
        Fault("malformed"),
        Fault("extra_answer"),
    ],
)
def test_key_never_appears(
    jev_server: JevServer,
    client: httpx.Client,
    caplog: pytest.LogCaptureFixture,
    fault: Fault,
) -> None:
    caplog.set_level(logging.DEBUG)
    jev_server.script(Fault.http(503), fault)  # one retry (logged), then the fault
    with JevJudge(settings_for(jev_server), client=client) as judge:
        with pytest.raises(JudgeError) as info:
            judge.judge(QUESTION, basic_candidates())
        assert KEY not in repr(judge) and KEY not in str(judge)
        assert KEY not in repr(judge.settings)
    exc = info.value
    assert KEY not in str(exc)
    assert KEY not in repr(exc)
    assert KEY not in "".join(traceback.format_exception(exc))
    assert KEY not in caplog.text
    assert "retry 1" in caplog.text  # the log was captured, and still holds no key


def test_key_never_appears_on_timeout(jev_server: JevServer) -> None:
    jev_server.script(Fault.delay(0.5))
    with JevJudge(settings_for(jev_server, timeout_s=0.15, max_retries=0)) as judge:
        with pytest.raises(JudgeTimeoutError) as info:
            judge.judge(QUESTION, basic_candidates())
    assert KEY not in "".join(traceback.format_exception(info.value))


# -- retry-after parsing ----------------------------------------------------------------------


def test_parse_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.05"}) == 0.05
    assert parse_retry_after({"retry-after-ms": "150", "retry-after": "9"}) == 0.15
    date = format_datetime(now + timedelta(seconds=3), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == 3.0
    past = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "1"}) == 1.0
    assert parse_retry_after({}) is None
