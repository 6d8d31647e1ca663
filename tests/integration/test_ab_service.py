"""Online experiments through the real service (uvicorn on 127.0.0.1, real SQLite event store):
arm assignment, interleaving, feedback, reports through the CLI and the service, restarts."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsag.ab.online import assign_arm
from hybridsag.cli import main
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
READER = "reader-token-0123456789abcdef"
OTHER = "other-tenant-token-0123456789"
SPLIT = {
    "name": "split-1",
    "mode": "split",
    "arms": [
        {"name": "lexical", "paths": ["bm25"]},
        {"name": "judged", "paths": ["sag2", "title"], "weights": {"sag2": 1.0, "title": 0.5}},
    ],
}


def _settings(data_dir: Path) -> Settings:
    return clean_env_settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={
            "token": ADMIN,
            "reconciler": False,
            "tokens": [
                {"token": READER, "role": "read", "tenant": "", "name": "reader"},
                {"token": OTHER, "role": "read", "tenant": "other", "name": "other"},
            ],
        },
        ab={"experiments": [SPLIT], "min_queries": 2},
    )


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    s = _settings(tmp_path_factory.mktemp("ab-service") / "data")
    with HybridSearch(s) as hs:
        hs.ingest_folder(ROOT / "samples" / "corpus")
    return s


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with running_service(settings, reconciler=False) as base:
        yield base


def client(url: str, token: str = ADMIN) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_split_assignment_is_a_stable_hash_and_every_response_names_it(
    url: str, settings: Settings
) -> None:
    definition = settings.ab.experiments[0]
    with client(url, READER) as c:
        for user in ("alice", "bob", "carol", "dave"):
            seen = set()
            for _ in range(2):
                r = c.post("/v1/search", json={"query": "ReActAgent", "user": user, "top_k": 3})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["experiment"] == "split-1" and len(body["query_id"]) == 32
                seen.add(body["arm"])
                want = assign_arm(definition, user).name
                paths = {"lexical": ["bm25"], "judged": ["sag2", "title"]}[want]
                assert body["paths"] == paths
            assert seen == {want}
        # no user: a plain search, no experiment
        plain = c.post("/v1/search", json={"query": "ReActAgent", "top_k": 3}).json()
        assert plain["experiment"] is None and plain["query_id"] is None
        # the arm decides the paths
        r = c.post("/v1/search", json={"query": "x", "user": "alice", "paths": ["bm25"]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "paths"]
        r = c.post("/v1/search", json={"query": "x", "user": "a", "experiment": "nope"})
        assert r.status_code == 422 and "no experiment 'nope'" in r.text


def test_assignment_follows_the_shares() -> None:
    from hybridsag.settings import ExperimentSettings

    exp = ExperimentSettings.model_validate(
        {"name": "s", "arms": [{"name": "a", "share": 3}, {"name": "b", "share": 1}]}
    )
    counts = {"a": 0, "b": 0}
    for i in range(4000):
        counts[assign_arm(exp, f"user-{i}").name] += 1
    assert 2850 < counts["a"] < 3150  # 75% of 4000, give or take 5 standard deviations
    # the same on every process and machine (SHA-256, not hash())
    assert [assign_arm(exp, u).name for u in ("u1", "u2", "u3", "u4")] == [
        assign_arm(exp, u).name for u in ("u1", "u2", "u3", "u4")
    ]


def test_feedback_is_checked_against_what_was_shown(url: str) -> None:
    with client(url, READER) as c:
        body = c.post("/v1/search", json={"query": "ReActAgent", "user": "erin", "top_k": 3}).json()
        qid = body["query_id"]
        ok = c.post("/v1/feedback", json={"query_id": qid, "position": 1})
        assert ok.status_code == 200, ok.text
        assert ok.json()["chunk_id"] == body["results"][0]["chunk_id"]
        assert ok.json()["arm"] == body["arm"]
        by_chunk = c.post(
            "/v1/feedback", json={"query_id": qid, "chunk_id": body["results"][-1]["chunk_id"]}
        )
        assert by_chunk.status_code == 200 and by_chunk.json()["position"] == len(body["results"])
        for bad, loc in (
            ({"query_id": "0" * 32, "position": 1}, ["body", "query_id"]),
            ({"query_id": qid, "position": 99}, ["body", "position"]),
            ({"query_id": qid, "chunk_id": "not-shown@1"}, ["body", "chunk_id"]),
            ({"query_id": qid}, ["body"]),
        ):
            r = c.post("/v1/feedback", json=bad)
            assert r.status_code == 422, (bad, r.text)
            assert r.json()["detail"][0]["loc"][: len(loc)] == loc
    with client(url, OTHER) as c:  # another tenant's query id is unknown to it
        r = c.post("/v1/feedback", json={"query_id": qid, "position": 1})
        assert r.status_code == 422 and "unknown query id" in r.text


def test_feedback_through_a_backend_takes_its_options_or_their_fields(url: str) -> None:
    """Issue 41: every layer takes feedback as one FeedbackOptions (here the remote backend and
    its client; the service's route hands the in-process backend one), or its fields as
    keywords: both name the same shown result; a misspelt field is a TypeError, a tenant
    through a service an InputError (the token decides the scope)."""
    from hybridsag.backend import FeedbackOptions, RemoteBackend
    from hybridsag.errors import InputError

    with client(url, READER) as c:
        body = c.post("/v1/search", json={"query": "ReActAgent", "user": "frank", "top_k": 3}).json()
    qid, first = body["query_id"], body["results"][0]["chunk_id"]
    backend = RemoteBackend(url, token=READER)
    by_fields = backend.feedback(qid, position=1, kind="like")
    by_options = backend.feedback(qid, FeedbackOptions(chunk_id=first, kind="like"))
    for got in (by_fields, by_options):
        assert (got["query_id"], got["position"], got["chunk_id"], got["kind"]) == (
            qid, 1, first, "like"
        )
    assert by_options["seq"] == by_fields["seq"] + 1
    with pytest.raises(TypeError):
        backend.feedback(qid, positon=1)
    with pytest.raises(InputError, match="leave tenant out"):
        backend.feedback(qid, FeedbackOptions(position=1), tenant="")


def test_define_interleave_start_stop_and_report(url: str, settings: Settings) -> None:
    exp = {
        "name": "il-1",
        "mode": "interleave",
        "arms": [{"name": "bm25", "paths": ["bm25"]}, {"name": "sag2", "paths": ["sag2"]}],
    }
    with client(url, READER) as c:
        assert c.post("/v1/experiments", json=exp).status_code == 403  # admin only
    with client(url) as c:
        r = c.post("/v1/experiments", json=exp)
        assert r.status_code == 201, r.text
        assert r.json()["source"] == "service" and r.json()["active"] is True
        assert c.post("/v1/experiments", json=exp).status_code == 422  # the name is taken
        bad = {**exp, "name": "il-2", "arms": exp["arms"] * 2}
        assert c.post("/v1/experiments", json=bad).status_code == 422
        bad = {**exp, "name": "il-2", "arms": [{"name": "x", "paths": ["nopath"]}, exp["arms"][1]]}
        r = c.post("/v1/experiments", json=bad)
        assert r.status_code == 422 and "unknown path 'nopath'" in r.text
        assert r.json()["detail"][0]["loc"] == ["body", "arms"]
        for i, query in enumerate(["ReActAgent", "E-1234", "install on Linux", "release notes"]):
            r = c.post("/v1/search", json={"query": query, "user": f"u{i}", "experiment": "il-1"})
            body = r.json()
            assert body["arm"] == "interleaved" and len(body["teams"]) == len(body["results"])
            assert set(body["teams"]) <= {"bm25", "sag2"}
            picks = [body["teams"].count("bm25"), body["teams"].count("sag2")]
            assert abs(picks[0] - picks[1]) <= 1  # team draft: the teams alternate
            again = c.post(
                "/v1/search", json={"query": query, "user": f"u{i}", "experiment": "il-1"}
            ).json()
            assert again["teams"] == body["teams"]  # same caller, same query: same list
            won = body["teams"].index("sag2") + 1
            assert c.post("/v1/feedback", json={"query_id": body["query_id"], "position": won}).status_code == 200
        report = c.get("/v1/experiments/il-1/report").json()
        assert report["interleaving"]["wins"] == {"bm25": 0, "sag2": 4}
        assert report["winner"] == "sag2" and report["queries"] == 8
        assert report["chart"] == "report.png"
        png = c.get("/v1/experiments/il-1/chart")
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        assert c.post("/v1/experiments/il-1/stop").json()["active"] is False
        r = c.post("/v1/search", json={"query": "x", "user": "u", "experiment": "il-1"})
        assert r.status_code == 422 and "stopped" in r.text
        assert c.post("/v1/experiments/il-1/start").json()["active"] is True
        assert c.get("/v1/experiments/nope/report").status_code == 404
        names = [e["name"] for e in c.get("/v1/experiments").json()]
        assert names[:2] == ["split-1", "il-1"]


def test_report_is_identical_through_the_cli_and_the_service(
    url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the CLI reads the same configuration as the service (here: the environment)
    monkeypatch.setenv("HYBRIDSAG_AB__EXPERIMENTS", json.dumps([SPLIT]))
    monkeypatch.setenv("HYBRIDSAG_AB__MIN_QUERIES", "2")
    with client(url) as c:
        via_service = c.get("/v1/experiments/split-1/report").json()
    buf = io.StringIO()
    assert main(["--data-dir", str(settings.data_dir), "ab", "report", "split-1", "--json"], out=buf) == 0
    assert json.loads(buf.getvalue()) == via_service
    buf = io.StringIO()
    assert main(["--data-dir", str(settings.data_dir), "ab", "report", "split-1"], out=buf) == 0
    assert via_service["summary"] in buf.getvalue()
    assert (settings.ab_dir / "split-1" / "report.json").is_file()  # the CLI writes the files
    assert (settings.ab_dir / "split-1" / "report.png").read_bytes().startswith(b"\x89PNG")
    assert main(["--data-dir", str(settings.data_dir), "ab", "report", "nope"]) == 2


def test_the_event_log_is_append_only(settings: Settings) -> None:
    with sqlite3.connect(settings.events_path) as conn:
        for sql in ("UPDATE events SET body = '{}'", "DELETE FROM events"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(sql)


def test_events_survive_a_restart(tmp_path: Path) -> None:
    s = _settings(tmp_path / "data")
    with HybridSearch(s) as hs:
        hs.ingest("doc", "ReActAgent is an agent.", title="Agents")
    with running_service(s, reconciler=False) as url, client(url) as c:
        body = c.post("/v1/search", json={"query": "ReActAgent", "user": "zoe"}).json()
        assert c.post("/v1/feedback", json={"query_id": body["query_id"], "position": 1}).status_code == 200
        c.post("/v1/experiments", json={**SPLIT, "name": "later"})
        c.post("/v1/experiments/split-1/stop")
        before = c.get("/v1/experiments/split-1/report").json()
    with running_service(s, reconciler=False) as url, client(url) as c:
        states = {e["name"]: e["active"] for e in c.get("/v1/experiments").json()}
        assert states == {"split-1": False, "later": True}
        assert c.get("/v1/experiments/split-1/report").json() == before
        assert before["queries"] == 1 and before["clicks"] == 1
        # the old query id is still known
        again = c.post("/v1/feedback", json={"query_id": body["query_id"], "position": 1})
        assert again.status_code == 200
        assert c.get("/v1/experiments/split-1/report").json()["clicks"] == 1  # same result twice
