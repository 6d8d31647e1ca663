"""A remote embedder that echoes the service's key back, in the forms servers echo it (issue 40),
against a real service on 127.0.0.1 and a real local model server speaking the OpenAI
embeddings wire format: no run of the key reaches a read token's search reasons, a write
token's 503, ``/readyz`` or the service's log. And ``/readyz`` asks the model itself: once the
embedder answers 401, ``model`` fails although vectors are remembered.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.modelserver import ModelServer
from tests.scriptedserver import Fault, RecordedRequest, Reply
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

pytestmark = pytest.mark.timeout(600)

#: a key with slashes and pluses (JSON and URL escape them), and no run of 5 characters that a
#: log line or a path holds by chance
KEY = "sk-Qz7/Wv9Kx+Jm2Rp8/Ty4Ln6+Hb3Fd=="
READER = "secrets-reader-token-0123456789"
#: how much of an error reply a message quotes (hybridsag.remote_calls.SNIPPET_CHARS)
SNIPPET_CHARS = 200
#: a leak is any run of this many of the key's characters (the scrubber removes a head or tail
#: of it from 4 characters on: hybridsag.scrubbing.PARTIAL_KEY_CHARS)
LEAK_CHARS = 5
WRITER = "secrets-writer-token-0123456789"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


#: How the model server echoes the ``Authorization`` value it got (``Bearer <key>``) in a 401.
ECHOES: dict[str, Callable[[str], str]] = {
    "json_escaped": lambda auth: json.dumps({"error": f"bad key {auth}"}).replace("/", "\\/"),
    "url_encoded": lambda auth: json.dumps({"error": "see https://x.test/?k=" + urllib.parse.quote(auth)}),
    "base64_header": lambda auth: json.dumps({"error": "header was " + _b64(f"Authorization: {auth}")}),
    # the key starts 10 characters before the cut: a cut made before the scrub leaves them
    "at_the_cut": lambda auth: "x" * (SNIPPET_CHARS - 18) + f" {auth} trailing text",
}


class EchoingServer(ModelServer):
    """A model server that, once :attr:`echo` is set, answers 401 echoing the key that way."""

    echo: Callable[[str], str] | None = None

    def respond(self, record: RecordedRequest, fault: Fault) -> Reply:
        if self.echo is None:
            return super().respond(record, fault)
        text = self.echo(record.headers.get("authorization", ""))
        return Reply(401, text.encode(), {"Content-Type": "application/json"})


def _decoded(text: str) -> list[str]:
    """What each base64-looking run of ``text`` decodes to (standard and URL-safe alphabets,
    from each of the first four characters: a run may start inside a 4-character group)."""
    out: list[str] = []
    for run in re.findall(r"[A-Za-z0-9+/_-]{8,}", text):
        for start in range(4):
            part = run[start:]
            part = part[: len(part) // 4 * 4]
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    out.append(decode(part).decode("latin-1"))
                except ValueError:
                    pass
    return out


def _leaks(text: str) -> list[str]:
    """Every run of :data:`LEAK_CHARS` characters of the key found in ``text``, or in what a
    base64 run of it decodes to."""
    n = LEAK_CHARS
    runs = [KEY[i : i + n] for i in range(len(KEY) - n + 1)]
    return [run for run in runs if any(run in t for t in (text, *_decoded(text)))]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, EchoingServer]]:
    with EchoingServer(api_key=KEY) as model:
        settings = clean_env_settings(
            data_dir=tmp_path_factory.mktemp("secrets") / "data",
            embedding={
                "backend": "openai", "model": "hash-64",
                "http": {"base_url": model.url, "api_key": KEY, "max_retries": 0, "backoff_s": 0.0,
                         "timeout_s": 10.0},
            },  # fmt: skip
            server={
                "token": ADMIN, "reconciler": False, "ready_cache_s": 0.0,
                "tokens": [
                    {"token": READER, "role": "read", "tenant": "", "name": "reader"},
                    {"token": WRITER, "role": "write", "tenant": "", "name": "writer"},
                ],
            },  # fmt: skip
        )
        with running_service(settings, reconciler=False) as url:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {WRITER}"}, timeout=120) as c:
                r = c.post("/v1/resources", json=[{"_id": "doc", "text": "rivers and cities"}])
                assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
            yield url, model


def test_readyz_asks_the_model_past_its_caches(served: tuple[str, EchoingServer]) -> None:
    url, model = served
    admin = {"Authorization": f"Bearer {ADMIN}"}
    ok = httpx.get(f"{url}/readyz", headers=admin, timeout=60)
    assert ok.status_code == 200 and ok.json()["checks"]["model"].startswith("ok"), ok.text
    model.echo = ECHOES["json_escaped"]
    try:
        r = httpx.get(f"{url}/readyz", headers=admin, timeout=60)
    finally:
        model.echo = None
    assert r.status_code == 503, r.text
    check = r.json()["checks"]["model"]
    assert check.startswith("failed") and "HTTP 401" in check, check
    assert _leaks(r.text) == []


@pytest.mark.parametrize("echo", sorted(ECHOES))
def test_an_echoed_key_reaches_no_answer_and_no_log(
    served: tuple[str, EchoingServer], echo: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, model = served
    caplog.set_level(logging.DEBUG)
    answers: list[str] = []
    model.echo = ECHOES[echo]
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {READER}"}, timeout=120) as c:
            r = c.post("/v1/search", json={"query": f"rivers {echo}", "paths": ["dense"]})
            assert r.status_code == 200, r.text
            assert "dense" in r.json()["reasons"], r.text  # degraded: the embedder refused
            answers.append(r.text)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {WRITER}"}, timeout=120) as c:
            r = c.post("/v1/resources", json=[{"_id": f"new-{echo}", "text": f"new text {echo}"}])
            assert r.status_code == 503, r.text
            assert "HTTP 401" in r.text
            answers.append(r.text)
        answers.append(httpx.get(f"{url}/readyz", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60).text)
    finally:
        model.echo = None
    logged = [caplog.text, *(repr(record.__dict__) for record in caplog.records)]
    assert "HTTP 401" in caplog.text  # the 503 was logged
    for text in [*answers, *logged]:
        assert _leaks(text) == [], text[:2000]
