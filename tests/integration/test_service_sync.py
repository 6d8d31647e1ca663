"""Folder sync through the service (``ServiceClient.sync_folder`` and the ``/v1/sync`` routes):
a real uvicorn on 127.0.0.1, real folders, real SQLite (lexical-only, but for one test on the
embedded default: Milvus Lite and the packaged model).

What an in-process index of a folder gives (ids, titles, chunks) is what a sync of it gives;
an unchanged folder sends the manifest and the commit only (the service's own request counts
say so); edits, additions and deletions are synced and pruned; a sync cut off half way is
completed by the next, which sends only the rest; a file over the body limit is skipped and
reported; a tenant token syncs into its own tenant only; the raw routes refuse what they must.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hybridsag.client import ServiceClient
from hybridsag.errors import ForbiddenError, InputError, ServiceError
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
ACME = "acme-writer-token-0123456789"
READER = "plain-reader-token-0123456789"


def _settings(data_dir: Path, **server: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        embedding={"model": "none"},
        server={
            "token": ADMIN,
            "tokens": [
                {"token": ACME, "role": "write", "tenant": "acme", "name": "acme"},
                {"token": READER, "role": "read", "tenant": "", "name": "reader"},
            ],
            "reconciler": False,
            **server,
        },
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """The sample corpus (Markdown, text, reST, Chinese names, a .gitignore, a hidden folder)
    plus a cp1252 text file, an HTML page (converted) and an empty file."""
    folder = tmp_path / "docs"
    shutil.copytree(ROOT / "samples" / "corpus", folder)
    (folder / "notes" / "legacy.txt").write_bytes("Café crème: the legacy \u201cmenu\u201d, naïve façade.\n".encode("cp1252"))
    (folder / "guide" / "page.html").write_text(
        "<html><head><title>Deploy page</title></head><body><h1>Deploy</h1>"
        "<p>Run the deploy with <code>E-4711</code> set.</p></body></html>",
        encoding="utf-8",
    )
    (folder / "empty.md").write_text("", encoding="utf-8")
    return folder


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    settings = _settings(tmp_path / "service-data")
    with running_service(settings, reconciler=False) as url:
        yield url, settings


def client(url: str, token: str = ADMIN, **kwargs: Any) -> ServiceClient:
    return ServiceClient(url, token=token, **kwargs)


def snapshot(settings: Settings, tenant: str | None = None) -> dict[tuple[str, str], Any]:
    """Every resource of the store (of ``tenant``): title, status, source hash and its chunks'
    texts and headings, by (tenant, id)."""
    with HybridSearch(settings) as hs:
        out = {}
        for summary in hs.list_resources(tenant=tenant):
            r = summary.record
            chunks = [(c.heading_path, c.text) for c in hs.resource_chunks(r.resource_id, tenant=r.tenant)]
            out[(r.tenant, r.resource_id)] = (r.title, r.status, dict(r.metadata), r.source_sha256, chunks)
        return out


def in_process(tmp_path: Path, folder: Path, name: str = "local") -> dict[tuple[str, str], Any]:
    settings = Settings(data_dir=tmp_path / name, embedding={"model": "none"})
    with HybridSearch(settings) as hs:
        hs.ingest_folder(folder)
    return snapshot(settings)


def requests_to(url: str, method: str, endpoint: str) -> int:
    """How many ``method endpoint`` requests the service answered 200 (its own /metrics)."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    return sum(
        int(s.value)
        for family in text_string_to_metric_families(text)
        if family.name == "hybridsag_http_requests"
        for s in family.samples
        if s.name.endswith("_total")
        and s.labels == {"method": method, "endpoint": endpoint, "status": "200"}
    )


def test_a_sync_gives_what_an_in_process_index_gives(
    service: tuple[str, Settings], docs: Path, tmp_path: Path
) -> None:
    url, settings = service
    with client(url) as c:
        report = c.sync_folder(docs)
    expected = in_process(tmp_path, docs)
    got = snapshot(settings)
    assert got == expected
    assert ("", "guide/page.html") in got and ("", "drafts/secret.md") not in got  # .gitignore
    assert got[("", "notes/legacy.txt")][2] == {"encoding": "cp1252"}
    assert report["indexed"] == len(expected) and report["errors"] == {}
    assert report["sync"]["uploaded"] == len(expected) == report["sync"]["files"]
    assert report["root"] == str(docs.resolve())
    with HybridSearch(settings) as hs:
        record = hs.resource("guide/quickstart.md")
        assert record is not None
        assert record.source_root == str(docs.resolve())
        assert record.source_uri == str(docs.resolve() / "guide" / "quickstart.md")
        assert record.source_mtime_ns is None  # the client's file: never stat'ed by the service
        hit = hs.search("E-4711", top_k=1).results[0]
        assert hit.resource_id == "guide/page.html" and hit.stale is False


def test_an_unchanged_folder_sends_only_the_manifest_and_the_commit(
    service: tuple[str, Settings], docs: Path
) -> None:
    url, _ = service
    with client(url) as c:
        first = c.sync_folder(docs)
        puts = requests_to(url, "PUT", "/v1/sync/files")
        again = c.sync_folder(docs)
    assert puts == first["sync"]["uploaded"] > 0
    assert requests_to(url, "PUT", "/v1/sync/files") == puts  # not one upload more
    assert again["sync"]["requests"] == 2 and again["sync"]["uploaded"] == 0
    assert again["indexed"] == 0 and again["unchanged"] == first["indexed"]
    assert again["pruned"] == [] and again["errors"] == {}


def test_edits_additions_and_deletions_are_synced_and_pruned(
    service: tuple[str, Settings], docs: Path, tmp_path: Path
) -> None:
    url, settings = service
    with client(url) as c:
        c.sync_folder(docs)
        (docs / "guide" / "naming.md").write_text("# Naming\n\nCall it `zebra-crossing`.\n", encoding="utf-8")
        (docs / "guide" / "new.md").write_text("# New page\n\nAll about `okapi`.\n", encoding="utf-8")
        (docs / "notes" / "troubleshooting.txt").unlink()
        shutil.rmtree(docs / "zh")
        report = c.sync_folder(docs)
        assert report["sync"]["uploaded"] == 2
        assert sorted(report["pruned"]) == sorted(
            ["notes/troubleshooting.txt", "zh/安装指南.md", "zh/发布说明.md", "zh/常见问题.md", "zh/我的喜好.md"]
        )
        found = c.search("zebra-crossing", top_k=1)["results"]
        assert found and found[0]["resource_id"] == "guide/naming.md"
    assert snapshot(settings) == in_process(tmp_path, docs)


def test_a_sync_cut_off_half_way_is_completed_by_the_next_uploading_only_the_rest(
    service: tuple[str, Settings], docs: Path, tmp_path: Path
) -> None:
    url, settings = service

    class CutAfter(httpx.HTTPTransport):
        """A real transport whose connection drops before the ``n+1``-th upload."""

        def __init__(self, n: int) -> None:
            super().__init__()
            self.left = n

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "PUT":
                if self.left == 0:
                    raise httpx.ConnectError("connection cut", request=request)
                self.left -= 1
            return super().handle_request(request)

    total = len(in_process(tmp_path, docs))
    half = total // 2
    with client(url, transport=CutAfter(half)) as c, pytest.raises(ServiceError, match="connection cut"):
        c.sync_folder(docs)
    assert len(snapshot(settings)) == half
    with client(url) as c:
        report = c.sync_folder(docs)
    assert report["sync"]["uploaded"] == total - half
    assert report["unchanged"] == half and report["pruned"] == []
    assert requests_to(url, "PUT", "/v1/sync/files") == total
    assert snapshot(settings) == in_process(tmp_path, docs, "again")


def test_a_file_over_the_body_limit_is_skipped_and_reported(tmp_path: Path) -> None:
    folder = tmp_path / "small"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSmall `alpha` page.\n", encoding="utf-8")
    (folder / "big.md").write_text("# Big\n\n" + "word " * 400, encoding="utf-8")  # 2 KB
    settings = _settings(tmp_path / "data", max_body_bytes=1024)
    with running_service(settings, reconciler=False) as url, client(url) as c:
        report = c.sync_folder(folder)
        assert report["indexed"] == 1
        assert "server.max_body_bytes" in report["errors"]["big.md"]
        assert "skipped" in report["errors"]["big.md"]
        assert requests_to(url, "PUT", "/v1/sync/files") == 1
        again = c.sync_folder(folder)  # still skipped, and still not pruned
        assert set(again["errors"]) == {"big.md"} and again["pruned"] == []
    assert [rid for _, rid in snapshot(settings)] == ["a.md"]


def test_a_tenant_token_syncs_into_its_own_tenant_only(
    service: tuple[str, Settings], docs: Path, tmp_path: Path
) -> None:
    url, settings = service
    with client(url) as admin:
        admin.sync_folder(docs)  # tenant ""
    with client(url, ACME) as acme:
        with pytest.raises(ForbiddenError, match="holds tenant 'acme' only"):
            acme.sync_folder(docs, tenant="other")
        (docs / "README.md").unlink()
        report = acme.sync_folder(docs)
        assert report["pruned"] == []  # tenant "" keeps its README; acme never had one
    everything = snapshot(settings)
    expected = in_process(tmp_path, docs)
    assert {rid for t, rid in everything if t == "acme"} == {rid for _, rid in expected}
    untenanted = {rid for t, rid in everything if t == ""}
    assert untenanted == {rid for _, rid in expected} | {"README.md"}
    with client(url, ACME) as acme:
        hits = acme.search("quickstart", top_k=10)["results"]
    assert hits and {h["tenant"] for h in hits} == {"acme"}


def test_the_sync_routes_refuse_bad_requests(service: tuple[str, Settings]) -> None:
    url, _ = service
    body = b"# A\n\nText.\n"
    sha = hashlib.sha256(body).hexdigest()
    put = {"root": "/home/me/docs", "path": "a.md", "sha256": sha}
    raw = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/octet-stream"}
    with httpx.Client(base_url=url, timeout=30) as h:
        r = h.put("/v1/sync/files", params={**put, "sha256": "0" * 64}, content=body, headers=raw)
        assert r.status_code == 422 and "SHA-256" in r.json()["detail"][0]["msg"]
        r = h.put("/v1/sync/files", params={**put, "path": "../a.md"}, content=body, headers=raw)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "path"]
        r = h.put("/v1/sync/files", params={**put, "root": "docs"}, content=body, headers=raw)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "root"]
        json_type = {**raw, "Content-Type": "application/json"}
        r = h.put("/v1/sync/files", params=put, content=body, headers=json_type)
        assert r.status_code == 415 and "application/octet-stream" in r.json()["detail"][0]["msg"]
        # octet-stream is taken on the upload route only
        r = h.post("/v1/resources", content=b"[]", headers=raw)
        assert r.status_code == 415
        r = h.put("/v1/sync/files", params=put, content=body, headers={**raw, "Authorization": f"Bearer {READER}"})
        assert r.status_code == 403
        r = h.put("/v1/sync/files", params={**put, "mode": "x"}, content=body, headers=raw)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "mode"]
        admin = {"Authorization": f"Bearer {ADMIN}"}
        entry = {"path": "a.md", "size": 3, "mtime_ns": 1, "sha256": sha}
        r = h.post("/v1/sync", json={"root": "/d", "files": [entry, entry]}, headers=admin)
        assert r.status_code == 422 and "listed twice" in r.text
        r = h.post("/v1/sync", json={"root": "/d/../e", "files": [entry]}, headers=admin)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "root"]
        r = h.post("/v1/sync", json={"root": "/d", "files": [{**entry, "path": ".git/x.md"}]}, headers=admin)
        assert r.status_code == 422 and "hidden" in r.text
        # the upload is ingested: an uploaded file is a resource, and re-asking needs nothing
        r = h.put("/v1/sync/files", params=put, content=body, headers=raw)
        assert r.status_code == 200 and r.json()["indexed"] == 1
        need = h.post("/v1/sync", json={"root": "/home/me/docs", "files": [{**entry, "size": len(body)}]}, headers=admin)
        assert need.json()["need"] == [] and need.json()["unchanged"] == 1
        # an empty manifest's commit prunes nothing, and says why
        r = h.post("/v1/sync/commit", json={"root": "/home/me/docs", "paths": []}, headers=admin)
        assert r.json()["pruned"] == [] and "nothing pruned" in r.json()["warnings"][0]


def test_a_missing_folder_is_refused_before_anything_is_sent(service: tuple[str, Settings], tmp_path: Path) -> None:
    url, _ = service
    with client(url) as c, pytest.raises(InputError, match="does not exist"):
        c.sync_folder(tmp_path / "nowhere")
    assert requests_to(url, "POST", "/v1/sync") == 0


@pytest.mark.slow
def test_a_sync_on_the_embedded_default_matches_in_process_vectors_included(
    tmp_path: Path, docs: Path
) -> None:
    """Milvus Lite and the packaged model: the synced chunks are embedded as in-process ones
    are (one vector a chunk), and the dense path finds them."""
    for extra in ("notes/legacy.txt", "guide/page.html", "empty.md"):
        (docs / extra).unlink()
    shutil.rmtree(docs / "zh")
    local = Settings(data_dir=tmp_path / "local-dense")
    with HybridSearch(local) as hs:
        hs.ingest_folder(docs)
        local_vectors = hs.components.dense_index().count()
        question = "how do I install the toolkit"
        local_hits = [h.chunk_id for h in hs.search(question, top_k=3, paths=["dense"]).results]
    settings = Settings(
        data_dir=tmp_path / "dense", server={"token": ADMIN, "reconciler": False, "ready_cache_s": 0}
    )
    with running_service(settings, reconciler=False) as url, client(url) as c:
        report = c.sync_folder(docs)
        assert report["vectors"] == report["chunks"] == local_vectors > 0
        checks = c.ready()["checks"]
        assert checks["milvus"] == f"ok: {local_vectors} vectors"
        hits = c.search(question, top_k=3, paths=["dense"])["results"]
        assert [h["chunk_id"] for h in hits] == local_hits and len(local_hits) == 3
    assert snapshot(settings) == snapshot(local)
