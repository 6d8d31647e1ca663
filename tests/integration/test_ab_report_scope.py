"""Experiment reports per tenant through the real service (uvicorn on 127.0.0.1, real SQLite
event store): a tenant token's report counts only its tenant's traffic, the report across
tenants is an admin's, a GET writes no file, reports and charts come from a cache that the next
event invalidates, and they are computed inside the search gate's limits. Also: an interleaved
search where one arm finds nothing shows the other arm's results."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hybridsag.client import ServiceClient
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.cli_support import run
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

A = "tenant-a-read-token-0123456789"
B = "tenant-b-read-token-0123456789"
TOKENS = [
    {"token": A, "role": "read", "tenant": "a", "name": "a"},
    {"token": B, "role": "read", "tenant": "b", "name": "b"},
]
DOCS = {
    "a": [("a-1", "Agents", "ReActAgent plans with tools. Apples grow in the orchard.")],
    "b": [("b-1", "Agents too", "ReActAgent is an agent. Bananas ripen in the warehouse.")],
}


def _interleave(name: str, second: str = "sag2") -> dict[str, Any]:
    return {
        "name": name,
        "mode": "interleave",
        "arms": [{"name": "bm25", "paths": ["bm25"]}, {"name": second, "paths": [second]}],
    }


def _settings(data_dir: Path, **server: Any) -> Settings:
    return clean_env_settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False, "tokens": TOKENS, **server},
        ab={"min_queries": 2},
    )


def _ingest(hs: HybridSearch) -> None:
    for tenant, docs in DOCS.items():
        for rid, title, text in docs:
            hs.ingest(rid, text, title=title, tenant=tenant)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    settings = _settings(tmp_path_factory.mktemp("ab-scope") / "data")
    with HybridSearch(settings) as hs:
        _ingest(hs)
    with running_service(settings, reconciler=False) as url:
        yield url, settings


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _define(url: str, experiment: dict[str, Any]) -> None:
    with client(url, ADMIN) as c:
        r = c.post("/v1/experiments", json=experiment)
        assert r.status_code == 201, r.text


def _search(c: httpx.Client, experiment: str, query: str, user: str, click: bool) -> dict[str, Any]:
    r = c.post("/v1/search", json={"query": query, "user": user, "experiment": experiment})
    assert r.status_code == 200, r.text
    body = r.json()
    if click:
        assert body["results"], body
        f = c.post("/v1/feedback", json={"query_id": body["query_id"], "position": 1})
        assert f.status_code == 200, f.text
    return body


def _cache_counts(url: str) -> dict[tuple[str, str], float]:
    with client(url, ADMIN) as c:
        text = c.get("/metrics").text
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == "hybridsag_ab_report_cache":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[(sample.labels["what"], sample.labels["outcome"])] = sample.value
    return out


def test_a_tenant_report_counts_only_that_tenants_traffic(
    served: tuple[str, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = served
    _define(url, _interleave("scope-il"))
    with client(url, A) as ca, client(url, B) as cb:
        for i in range(3):
            _search(ca, "scope-il", f"ReActAgent apples {i}", f"ua{i}", click=True)
        _search(cb, "scope-il", "ReActAgent bananas secret-b0", "ub0", click=True)
        _search(cb, "scope-il", "ReActAgent bananas secret-b1", "ub1", click=False)
        ra = ca.get("/v1/experiments/scope-il/report")
        rb = cb.get("/v1/experiments/scope-il/report")
        assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
        mine, theirs = ra.json(), rb.json()
        assert "secret-b" not in ra.text and "bananas" not in ra.text
        assert "apples" not in rb.text
        assert mine["tenant"] == "a" and theirs["tenant"] == "b"
        assert (mine["queries"], mine["clicks"]) == (3, 3)
        assert (theirs["queries"], theirs["clicks"]) == (2, 1)
        assert {q["query"] for q in mine["per_question"]} == {
            f"ReActAgent apples {i}" for i in range(3)
        }
        assert {arm: s["queries"] for arm, s in mine["per_arm"].items()} == {"bm25": 3, "sag2": 3}
        assert sum(s["clicks"] for s in mine["per_arm"].values()) == 3
        # its own tenant by name is the same report; another tenant's (or every tenant's) is not
        # a tenant token's to read
        assert ca.get("/v1/experiments/scope-il/report", params={"tenant": "a"}).json() == mine
        for path in ("report", "chart"):
            r = ca.get(f"/v1/experiments/scope-il/{path}", params={"tenant": "b"})
            assert r.status_code == 403, r.text
            assert r.json()["detail"][0]["loc"] == ["query", "tenant"]
            assert "secret-b" not in r.text
        r = ca.get("/v1/experiments/scope-il/report", params={"tenants": "b"})
        assert r.status_code == 422  # an unknown query parameter
    with client(url, ADMIN) as c:
        every = c.get("/v1/experiments/scope-il/report").json()
        assert every["tenant"] is None and (every["queries"], every["clicks"]) == (5, 4)
        assert "secret-b0" in json.dumps(every) and "apples" in json.dumps(every)
        assert c.get("/v1/experiments/scope-il/report", params={"tenant": "b"}).json() == theirs
        # the Python client and the CLI name a tenant as an admin's ?tenant= does
        with ServiceClient(url, token=ADMIN) as sc:
            assert sc.experiment_report("scope-il", tenant="b") == theirs
            assert sc.experiment_report("scope-il") == every
        monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
        code, text = run("--server", url, "ab", "report", "scope-il", "--tenant", "b", "--json")
        assert code == 0 and json.loads(text) == theirs
        # the chart follows the same scope
        with client(url, A) as ca:
            chart_a = ca.get("/v1/experiments/scope-il/chart").content
        assert c.get("/v1/experiments/scope-il/chart", params={"tenant": "a"}).content == chart_a
        assert c.get("/v1/experiments/scope-il/chart").content != chart_a


def test_reports_write_nothing_come_from_a_cache_and_follow_new_events(
    served: tuple[str, Settings],
) -> None:
    url, settings = served
    _define(url, _interleave("cache-il"))
    with client(url, A) as c:
        first = _search(c, "cache-il", "ReActAgent apples", "uc", click=True)
        # the chart needs no report fetched before it
        png = c.get("/v1/experiments/cache-il/chart")
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        before = _cache_counts(url)
        report = c.get("/v1/experiments/cache-il/report").json()
        assert c.get("/v1/experiments/cache-il/report").json() == report
        again = c.get("/v1/experiments/cache-il/chart")
        assert again.content == png.content
        after = _cache_counts(url)
        # the first chart computed its report; both report GETs found it, and so did the second
        # chart (which found its PNG too)
        assert after[("report", "hit")] - before[("report", "hit")] == 3
        assert after[("report", "miss")] == before[("report", "miss")]
        assert after[("chart", "hit")] - before[("chart", "hit")] == 1
        assert after[("chart", "miss")] == before[("chart", "miss")]
        assert report["clicks"] == 1
        # a new event (a "like" counts for no report number): the next report is computed again
        like = {"query_id": first["query_id"], "position": 1, "kind": "like"}
        f = c.post("/v1/feedback", json=like)
        assert f.status_code == 200, f.text
        newer = c.get("/v1/experiments/cache-il/report").json()
        assert newer["as_of_seq"] == f.json()["seq"] > report["as_of_seq"]
        assert _cache_counts(url)[("report", "miss")] == before[("report", "miss")] + 1
        # and a new search with a click changes its numbers
        _search(c, "cache-il", "ReActAgent plans", "uc2", click=True)
        newest = c.get("/v1/experiments/cache-il/report").json()
        assert (newest["queries"], newest["clicks"]) == (2, 2)
    # no GET wrote a file: report.json and report.png are the CLI's
    ab_dir = settings.ab_dir
    assert not ab_dir.exists() or not [p for p in ab_dir.rglob("*") if p.is_file()]


def test_an_interleaved_search_with_an_empty_arm_shows_the_other_arms_results(
    served: tuple[str, Settings],
) -> None:
    url, _ = served
    _define(url, _interleave("fill-il", second="title"))
    with client(url, A) as c:
        # "orchard" is in tenant a's text but in no title: the title arm finds nothing
        alone = c.post("/v1/search", json={"query": "orchard", "paths": ["title"]}).json()
        assert alone["results"] == []
        bm25 = c.post("/v1/search", json={"query": "orchard", "paths": ["bm25"]}).json()
        assert [r["chunk_id"] for r in bm25["results"]]
        body = _search(c, "fill-il", "orchard", "uf", click=True)
        assert [r["chunk_id"] for r in body["results"]] == [r["chunk_id"] for r in bm25["results"]]
        assert body["teams"] == ["bm25"] * len(bm25["results"])
        report = c.get("/v1/experiments/fill-il/report").json()
        assert report["interleaving"]["wins"] == {"bm25": 1, "title": 0}
    # the empty arm first: the list is still as long as the other arm's (search.top_k at most)
    first_empty = _interleave("fill-il2", second="title")
    first_empty["arms"].reverse()
    _define(url, first_empty)
    with client(url, A) as c:
        body = _search(c, "fill-il2", "orchard", "uf", click=False)
        assert [r["chunk_id"] for r in body["results"]] == [r["chunk_id"] for r in bm25["results"]]


class HeldSearch(HybridSearch):
    """A real search whose query ``HOLD`` waits until :attr:`release` is set (after setting
    :attr:`entered`): it keeps the service's only search place taken."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.entered, self.release = threading.Event(), threading.Event()

    def search(self, query: str, options: Any = None, **keywords: Any) -> Any:
        if query == "HOLD":
            self.entered.set()
            assert self.release.wait(120)
        return super().search(query, options, **keywords)


def test_reports_run_inside_the_search_gate(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "data", search_concurrency=1, search_queue=0, retry_after_s=3)
    hs = HeldSearch(settings)
    _ingest(hs)
    try:
        with running_service(settings, reconciler=False, search=hs) as url:
            _define(url, _interleave("gate-il"))
            held: list[httpx.Response] = []

            def search_held() -> None:  # tenant A's one place in the gate (lanes: issue 40)
                with client(url, A) as c:
                    held.append(c.post("/v1/search", json={"query": "HOLD"}))

            thread = threading.Thread(target=search_held)
            thread.start()
            try:
                assert hs.entered.wait(60)
                with client(url, A) as c:
                    for path in ("report", "chart"):
                        r = c.get(f"/v1/experiments/gate-il/{path}")
                        assert r.status_code == 429, r.text
                        assert r.headers["retry-after"] == "3"
            finally:
                hs.release.set()
                thread.join(60)
            assert held[0].status_code == 200
            with client(url, A) as c:
                assert c.get("/v1/experiments/gate-il/report").status_code == 200
    finally:
        hs.close()


def test_a_tenants_report_and_feedback_count_its_own_view_of_the_log(
    served: tuple[str, Settings],
) -> None:
    """Issue 40: ``as_of_seq`` of a tenant's report, and ``seq`` of its feedback, count its own
    view of the event log: another tenant's traffic moves neither (the log's seq would tell a
    tenant how much the others search)."""
    url, _ = served
    _define(url, _interleave("seq-il"))
    with client(url, A) as ca, client(url, B) as cb:
        first = _search(ca, "seq-il", "ReActAgent apples", "sa", click=False)
        like = {"query_id": first["query_id"], "position": 1}
        before = ca.get("/v1/experiments/seq-il/report").json()
        assert before["as_of_seq"] == 2  # the experiment's definition and its one impression
        for i in range(5):  # tenant B's traffic: 10 events in the log
            _search(cb, "seq-il", f"ReActAgent bananas {i}", f"sb{i}", click=True)
        assert ca.get("/v1/experiments/seq-il/report").json()["as_of_seq"] == 2
        f = ca.post("/v1/feedback", json=like)
        assert f.status_code == 200, f.text
        assert f.json()["seq"] == 3
        assert ca.get("/v1/experiments/seq-il/report").json()["as_of_seq"] == 3
        assert cb.get("/v1/experiments/seq-il/report").json()["as_of_seq"] == 11
    with client(url, ADMIN) as c:  # the admin's report across tenants: the log's own seq
        assert c.get("/v1/experiments/seq-il/report").json()["as_of_seq"] > 11
