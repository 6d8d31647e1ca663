"""``GET /ui`` in a real headless browser (Debian's chromium driven by Playwright) against the
real service: a search shows the fused list beside each path's own list with the explain data
on click, and the experiments' reports load with their charts. A screenshot of the page is
written to ``<tmp_path>/ui.png`` (run with ``--basetemp DIR`` to keep it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.servicesupport import ADMIN, running_service
from tests.settings_support import clean_env_settings

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH: the /ui test drives Debian's chromium (apt-get install chromium; "
    ".ci/run installs it)",
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
