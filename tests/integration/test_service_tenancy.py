"""Tenancy over HTTP: two tenants, four tokens (read and write for each), every endpoint tried
across tenants. Nothing of the other tenant is ever returned, changed or deleted; a token never
sees resources with ACL tags it lacks; a caller cannot widen its own filters. Ids are per tenant:
a write token that ingests another tenant's id makes a resource of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hybridsag.settings import Settings
from tests.cli_support import run
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

TOKENS = {
    "a-read": {"token": "tenant-a-read-0123456789", "role": "read", "tenant": "a"},
    "a-write": {"token": "tenant-a-write-0123456789", "role": "write", "tenant": "a", "acl": ["a-hr"]},
    "b-read": {"token": "tenant-b-read-0123456789", "role": "read", "tenant": "b"},
    "b-write": {"token": "tenant-b-write-0123456789", "role": "write", "tenant": "b"},
}
#: id -> (tenant, acl); every text names the zebra, so one search could find them all.
DOCS: dict[str, tuple[str, list[str]]] = {
    "a/open": ("a", []),
    "a/hr": ("a", ["a-hr"]),
    "b/open": ("b", []),
    "b/ops": ("b", ["b-ops"]),
    "public": ("", []),
}
#: What each token may see (deny by default: the untenanted "public" is not theirs either).
VISIBLE = {
    "a-read": {"a/open"},
    "a-write": {"a/open", "a/hr"},
    "b-read": {"b/open"},
    "b-write": {"b/open"},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The service's data dir."""
    return tmp_path_factory.mktemp("tenancy") / "data"


@pytest.fixture(scope="module")
def url(data: Path) -> Iterator[str]:
    settings: Settings = clean_env_settings(
        data_dir=data,
        server={
            "token": ADMIN,
            "tokens": [{**t, "name": name} for name, t in TOKENS.items()],
            "reconciler": False,
        },
    )
    with running_service(settings) as base:
        with client(base, ADMIN) as c:
            body = [
                {"_id": rid, "title": f"Zebra {rid}", "text": f"The zebra of {rid} grazes.",
                 "tenant": tenant, "acl": acl}
                for rid, (tenant, acl) in DOCS.items()
            ]
            assert c.post("/v1/resources", json=body).json()["indexed"] == len(DOCS)
        yield base


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def as_token(url: str, name: str) -> httpx.Client:
    return client(url, TOKENS[name]["token"])


def snapshot(url: str) -> dict[str, Any]:
    """Every resource as the admin sees it (status, version, tenant, acl, hash)."""
    with client(url, ADMIN) as c:
        out = {}
        for rid, (tenant, _acl) in DOCS.items():
            r = c.get(f"/v1/resources/{rid}", params={"tenant": tenant})
            assert r.status_code == 200, r.text
            j = r.json()
            out[rid] = (j["status"], j["version"], j["tenant"], j["acl"], j["content_sha256"])
        return out


def found(c: httpx.Client, **body: Any) -> set[str]:
    r = c.post("/v1/search", json={"query": "zebra grazes", "top_k": 20, **body})
    assert r.status_code == 200, r.text
    return {x["resource_id"] for x in r.json()["results"]}


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_search_sees_only_its_tenant_and_tags(url: str, name: str) -> None:
    with as_token(url, name) as c:
        assert found(c) == VISIBLE[name]
        for paths in (["bm25"], ["dense"], ["title"], ["sag2"]):
            assert found(c, paths=paths) <= VISIBLE[name]
        assert found(c, filters={"tenant": TOKENS[name]["tenant"]}) == VISIBLE[name]
        assert found(c, filters={"acl": []}) == {r for r in VISIBLE[name] if not DOCS[r][1]}


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_search_cannot_widen_its_filters(url: str, name: str) -> None:
    other = "b" if TOKENS[name]["tenant"] == "a" else "a"
    with as_token(url, name) as c:
        for filters, loc in (
            ({"tenant": other}, ["body", "filters", "tenant"]),
            ({"tenant": ""}, ["body", "filters", "tenant"]),
            ({"acl": ["b-ops"]}, ["body", "filters", "acl"]),
            ({"acl": ["a-hr", "b-ops"]}, ["body", "filters", "acl"]),
        ):
            if filters.get("acl") == ["a-hr", "b-ops"] and name == "b-write":
                continue  # same refusal as the line before for b tokens
            r = c.post("/v1/search", json={"query": "zebra", "filters": filters})
            assert r.status_code == 403, (filters, r.text)
            assert r.json()["detail"][0]["loc"] == loc
        r = c.post("/v1/search", json={"query": "zebra", "filters": {"statuses": ["ready", "disabled"]}})
        assert r.status_code == (403 if TOKENS[name]["role"] == "read" else 200)


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_reads_of_other_tenants_are_not_found(url: str, name: str) -> None:
    with as_token(url, name) as c:
        for rid in DOCS:
            r = c.get(f"/v1/resources/{rid}")
            assert r.status_code == (200 if rid in VISIBLE[name] else 404), (rid, r.text)
            if r.status_code == 404:
                assert rid in r.json()["detail"][0]["msg"] and "tenant" not in r.text.lower()


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_writes_across_tenants_change_nothing(url: str, name: str) -> None:
    before = snapshot(url)
    writable = VISIBLE[name] if TOKENS[name]["role"] == "write" else set()
    with as_token(url, name) as c:
        for rid in sorted(set(DOCS) - writable):
            want = 403 if TOKENS[name]["role"] == "read" else 404
            for method, path in (
                ("DELETE", f"/v1/resources/{rid}"),
                ("POST", f"/v1/resources/{rid}/disable"),
                ("POST", f"/v1/resources/{rid}/enable"),
            ):
                r = c.request(method, path)
                assert r.status_code == want, (method, path, r.text)
            r = c.post("/v1/resources", json=[{"_id": rid, "text": "overwritten"}])
            if TOKENS[name]["role"] == "read":
                assert r.status_code == 403, (rid, r.text)
            elif DOCS[rid][0] == TOKENS[name]["tenant"]:  # its tenant's, in an ACL group it lacks
                assert r.status_code == 403, (rid, r.text)
                assert r.json()["detail"][0]["loc"] == ["body", 0, "_id"]
            else:  # another tenant's id: in its own tenant a new resource of its own
                assert r.status_code == 200 and r.json()["indexed"] == 1, (rid, r.text)
                assert c.get(f"/v1/resources/{rid}").json()["tenant"] == TOKENS[name]["tenant"]
                assert c.delete(f"/v1/resources/{rid}").status_code == 200
        if TOKENS[name]["role"] == "write":
            other = "b" if TOKENS[name]["tenant"] == "a" else "a"
            r = c.post("/v1/resources", json=[{"_id": "new", "text": "x", "tenant": other}])
            assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["body", 0, "tenant"]
            r = c.post("/v1/resources", json=[{"_id": "new", "text": "x", "acl": ["b-ops-x"]}])
            assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["body", 0, "acl"]
        for method, path in (("POST", "/v1/reconcile"), ("GET", "/v1/audit/latest"), ("GET", "/metrics")):
            assert c.request(method, path, json={} if method == "POST" else None).status_code == 403
    assert snapshot(url) == before


@pytest.mark.parametrize("name", ["a-write", "b-write"])
def test_own_writes_land_in_own_tenant(url: str, name: str) -> None:
    tenant = TOKENS[name]["tenant"]
    rid = f"{tenant}/own"
    with as_token(url, name) as c:
        r = c.post("/v1/resources", json=[{"_id": rid, "title": "Zebra own", "text": "Own zebra grazes."}])
        assert r.status_code == 200 and r.json()["indexed"] == 1
        assert c.get(f"/v1/resources/{rid}").json()["tenant"] == tenant
        assert rid in found(c)
        assert c.post(f"/v1/resources/{rid}/disable").status_code == 200
        assert c.post(f"/v1/resources/{rid}/enable").status_code == 200
    other = "b-read" if tenant == "a" else "a-read"
    with as_token(url, other) as c:
        assert rid not in found(c)
        assert c.get(f"/v1/resources/{rid}").status_code == 404
    with as_token(url, name) as c:
        assert c.delete(f"/v1/resources/{rid}").json()["action"] == "deleted"


def test_a_read_token_sees_no_disabled_resource_on_any_path(url: str) -> None:
    """Issue 23 item 8: search refused a read token ``statuses: ["disabled"]`` while
    ``GET /v1/resources/ID`` gave it the disabled resource's text; one rule now says no to both."""
    rid = "a/open"
    with as_token(url, "a-write") as w:
        assert w.post(f"/v1/resources/{rid}/disable").status_code == 200
    try:
        with as_token(url, "a-read") as c:
            r = c.get(f"/v1/resources/{rid}")
            assert r.status_code == 404, r.text
            assert r.json()["detail"][0]["msg"] == f"no resource {rid!r}"  # as if missing
            assert "zebra" not in r.text.lower()
            r = c.post("/v1/search", json={"query": "zebra", "filters": {"statuses": ["disabled"]}})
            assert r.status_code == 403 and "disabled" in r.json()["detail"][0]["msg"]
            assert rid not in found(c)
        with as_token(url, "a-write") as w:  # a write token still reads what it disabled
            r = w.get(f"/v1/resources/{rid}")
            assert r.status_code == 200 and r.json()["status"] == "disabled"
            assert "zebra" in r.json()["chunks"][0]["text"].lower()
            assert rid in found(w, filters={"statuses": ["disabled"]})
    finally:
        with as_token(url, "a-write") as w:
            assert w.post(f"/v1/resources/{rid}/enable").status_code == 200
    with as_token(url, "a-read") as c:
        assert c.get(f"/v1/resources/{rid}").status_code == 200
        assert rid in found(c)


def listed(c: httpx.Client, **params: Any) -> httpx.Response:
    return c.get("/v1/resources", params=params)


@pytest.mark.parametrize("name", sorted(TOKENS))
def test_the_list_sees_only_its_tenant_and_tags(url: str, name: str) -> None:
    own = TOKENS[name]["tenant"]
    other = "b" if own == "a" else "a"
    with as_token(url, name) as c:
        r = listed(c)
        assert r.status_code == 200, r.text
        page = r.json()
        assert {x["resource_id"] for x in page["resources"]} == VISIBLE[name]
        assert {x["tenant"] for x in page["resources"]} == {own} and page["next_cursor"] is None
        assert listed(c, tenant=own).json() == page
        for params, loc in (({"tenant": other}, ["query", "tenant"]), ({"tenant": ""}, ["query", "tenant"])):
            r = listed(c, **params)
            assert r.status_code == 403 and r.json()["detail"][0]["loc"] == loc, r.text
        r = listed(c, status="disabled")
        assert r.status_code == (403 if TOKENS[name]["role"] == "read" else 200), r.text


def test_the_admin_lists_every_tenant_a_page_at_a_time(url: str) -> None:
    with client(url, ADMIN) as c:
        whole = listed(c).json()
        ids = [x["resource_id"] for x in whole["resources"]]
        assert set(ids) == set(DOCS) and whole["next_cursor"] is None
        paged: list[str] = []
        params: dict[str, Any] = {"limit": 2}
        while True:
            page = listed(c, **params).json()
            assert len(page["resources"]) <= 2
            paged += [x["resource_id"] for x in page["resources"]]
            if page["next_cursor"] is None:
                break
            params["cursor"] = page["next_cursor"]
        assert paged == ids  # oldest first, each once
        assert [x["resource_id"] for x in listed(c, tenant="a").json()["resources"]] == ["a/open", "a/hr"]
        assert [x["resource_id"] for x in listed(c, prefix="b/").json()["resources"]] == ["b/open", "b/ops"]
        assert [x["resource_id"] for x in listed(c, tenant="").json()["resources"]] == ["public"]
        for params, loc in (
            ({"cursor": "not-a-cursor"}, ["query", "cursor"]),
            ({"limit": 0}, ["query", "limit"]),
            ({"status": "gone"}, ["query", "status"]),
            ({"page": 2}, ["query", "page"]),
        ):
            r = listed(c, **params)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, (params, r.text)
        operation = c.get("/openapi.json").json()["paths"]["/v1/resources"]["get"]
        assert {p["name"] for p in operation["parameters"]} == {"tenant", "status", "prefix", "limit", "cursor"}


def test_list_and_show_through_the_server_are_the_tokens(
    url: str, data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the CLI's own data dir is the service's: read locally, it would list every tenant
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", str(data))
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", TOKENS["a-read"]["token"])
    code, text = run("--server", url, "list", "--json")
    assert code == 0, capsys.readouterr().err
    assert {r["resource_id"] for r in json.loads(text)} == VISIBLE["a-read"]
    code, text = run("--server", url, "list")
    assert code == 0 and text.endswith("\n1 resource\n") and "a/open" in text and "b/" not in text
    code, text = run("--server", url, "show", "a/open", "--json")
    assert code == 0
    detail = json.loads(text)
    assert (detail["tenant"], detail["stale"], len(detail["chunks"])) == ("a", False, 1)
    assert set(detail["chunks"][0]) == {"chunk_id", "ordinal", "heading_path", "start_line", "end_line", "chars"}
    capsys.readouterr()
    assert run("--server", url, "show", "a/hr")[0] == 2  # its ACL tag is not the token's
    assert "no such resource: 'a/hr'" in capsys.readouterr().err
    for argv in (("list", "--tenant", "b"), ("show", "b/open", "--tenant", "b")):
        assert run("--server", url, *argv)[0] == 2
        assert "holds tenant 'a' only" in capsys.readouterr().err
    monkeypatch.setenv("HYBRIDSAG_SERVER__CLIENT_TOKEN", ADMIN)
    code, text = run("--server", url, "list", "--json")
    assert {r["resource_id"] for r in json.loads(text)} == set(DOCS)
    code, text = run("--server", url, "list", "--tenant", "b", "--limit", "1", "--json")
    assert [r["resource_id"] for r in json.loads(text)] == ["b/open"]
