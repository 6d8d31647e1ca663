"""``GET /ui`` in a real headless browser (Debian's chromium driven by Playwright) against the
real service: a search shows the fused list beside each path's own list with the explain data
on click, and the experiments' reports load with their charts. A screenshot of the page is
written to ``<tmp_path>/ui.png`` (run with ``--basetemp DIR`` to keep it). The page's own
search (``POST /v1/ui/search``: each result as the CLI words it) is also checked over plain
HTTP, which needs no browser."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsag.output.focus import terms_pattern
from hybridsag.output.render import explain_lines, headings_below, snippet
from hybridsag.results import SearchResult
from hybridsag.search import HybridSearch
from hybridsag.service.ui import SNIPPET_WIDTH, render_page
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright import sync_api
except ImportError:  # the browser tests skip; the HTTP one runs
    sync_api = None  # type: ignore[assignment]
browser_test = pytest.mark.skipif(
    CHROMIUM is None or sync_api is None,
    reason="no chromium on PATH or no playwright: the /ui test drives Debian's chromium "
    "(apt-get install chromium; .ci/run installs it) with playwright (pip install -e '.[test]')",
)
#: Waits in the browser (a loaded 2-core machine answers slowly; nothing here is timed).
TIMEOUT_MS = 120_000
EXPERIMENT = {
    "name": "ui-il",
    "mode": "interleave",
    "arms": [{"name": "bm25", "paths": ["bm25"]}, {"name": "sag2", "paths": ["sag2"]}],
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    settings = clean_env_settings(
        data_dir=tmp_path_factory.mktemp("ab-ui") / "data",
        embedding={"model": "none"},
        server={"token": ADMIN, "reconciler": False},
        ab={"experiments": [EXPERIMENT], "min_queries": 2},
    )
    with HybridSearch(settings) as hs:
        hs.ingest_folder(ROOT / "samples" / "corpus")
    with running_service(settings, reconciler=False) as url:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120
        ) as c:
            for i, query in enumerate(["ReActAgent", "install on Linux", "release notes"]):
                body = c.post(
                    "/v1/search", json={"query": query, "user": f"u{i}", "experiment": "ui-il"}
                ).json()
                c.post(
                    "/v1/feedback", json={"query_id": body["query_id"], "position": 1}
                ).raise_for_status()
        yield url, settings


@browser_test
def test_ui_search_columns_explain_and_reports(
    served: tuple[str, Settings], tmp_path: Path
) -> None:
    url, _ = served
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{url}/ui")
            page.fill("#token", ADMIN)
            page.fill("#q", "ReActAgent")
            page.click("button[type=submit]")
            page.wait_for_selector("#columns .col[data-path=title]")
            columns = page.eval_on_selector_all(
                "#columns .col", "cols => cols.map(c => c.dataset.path)"
            )
            assert columns[0] == "fused" and {"sag2", "bm25", "title"} <= set(columns[1:])
            assert "dense" not in columns  # no embedding model here
            fused = page.locator(".col[data-path=fused] li")
            assert fused.count() >= 1
            first = fused.first
            assert "sag2" in (first.get_attribute("title") or "")  # the explain data on hover
            assert not first.locator(".why").is_visible()
            first.click()
            assert first.locator(".why").is_visible()  # and kept open on click
            assert page.text_content("#status") == ""

            page.click("#load")
            page.wait_for_selector(".exp[data-experiment=ui-il] img.chart")
            summary = page.text_content(".exp[data-experiment=ui-il] .summary") or ""
            assert "deciding queries" in summary or "no preference" in summary
            rows = page.locator(".exp[data-experiment=ui-il] tr")
            assert rows.count() == 3  # the header, bm25, sag2
            loaded = page.eval_on_selector(
                ".exp[data-experiment=ui-il] img.chart",
                "img => img.decode().then(() => img.naturalWidth)",
            )
            assert loaded > 100  # the PNG drew
            shot = tmp_path / "ui.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
            assert errors == []
        finally:
            browser.close()


@browser_test
def test_ui_reports_a_bad_token_in_the_page(served: tuple[str, Settings]) -> None:
    url, _ = served
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{url}/ui")
            page.fill("#token", "not-the-token-0123456789")
            page.fill("#q", "ReActAgent")
            page.click("button[type=submit]")
            page.wait_for_function("document.getElementById('status').textContent.includes('401')")
            assert page.locator("#columns .col").count() == 0
        finally:
            browser.close()


def test_ui_results_are_worded_as_the_cli_words_them(served: tuple[str, Settings]) -> None:
    """The page's lists (issue 28): heading path, resource and lines, a snippet and the
    explanation in the CLI's words (render.explain_lines), not titles alone and raw JSON."""
    url, _ = served
    body = {"query": "error codes", "top_k": 5, "paths": ["bm25"]}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120) as c:
        raw = c.post("/v1/search", json=body).json()
        shown = c.post("/v1/ui/search", json=body).json()
        bad = c.post("/v1/ui/search", json={**body, "top_k": 0})
    assert httpx.post(f"{url}/v1/ui/search", json=body).status_code == 401  # the token's
    assert bad.status_code == 422  # the body /v1/search takes, checked as there
    assert shown["query"] == body["query"] and len(shown["results"]) == len(raw["results"]) >= 2
    assert {"error", "codes"} & {t.casefold() for t in shown["terms"]}
    pattern = terms_pattern(shown["terms"])
    for r, d in zip(raw["results"], shown["results"], strict=True):
        result = SearchResult.from_dict(r)
        name = r["title"] or r["resource_id"]
        assert d["heading"] == " › ".join([name, *headings_below(name, r["heading_path"])])
        assert d["where"] == f"{r['resource_id']} · lines {r['start_line']}-{r['end_line']}"
        assert d["snippet"] == snippet(r["text"], pattern, width=SNIPPET_WIDTH)
        assert d["why"] == explain_lines(result) and d["why"][0].startswith("bm25 #")
        assert not any("{" in line for line in d["why"])  # words, not JSON
    # results of one title are told apart by their heading path or lines
    assert len({(d["heading"], d["where"]) for d in shown["results"]}) == len(shown["results"])
    page = render_page(["bm25"])
    assert "/v1/ui/search" in page and "JSON.stringify(r.paths" not in page
