"""A tenant learns nothing about another tenant's documents from its own results.

FTS5's bm25() weighs a term by its document frequency over the whole index, so a raw lexical
score told tenant A whether a term occurs in tenant B's documents (-1.4e-06 when B's documents
hold it everywhere, -4.04 when not). A search with ``filters.tenant`` set therefore shows, for
the paths whose scores depend on the whole index, ranks and RRF terms only. Checked here: the
results (order, fused score, every path's contribution, the explanation) of tenant A's search
are identical whether or not tenant B's corpus holds the query term.

Real SQLite, real Milvus Lite, the real packaged model; two data dirs that differ only in B's
corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hybridsag.paths import PATHS
from hybridsag.search import HybridSearch

from tests.consistency_support import make_settings, open_search

TENANT_A = {
    "a1": "The zebra at the city zoo eats hay in the morning.",
    "a2": "Zebra stripes confuse flies; the zebra foal stays near its mother.",
    "a3": "Our zoo map shows the zebra paddock next to the giraffes.",
    "a4": "Feeding times at the zoo are posted at the gate.",
}
#: B's corpus with and without the query term (the same words otherwise).
TENANT_B = {
    True: {f"b{i}": f"Report {i}: the zebra count in the reserve rose again." for i in range(12)},
    False: {f"b{i}": f"Report {i}: the rhino count in the reserve rose again." for i in range(12)},
}
QUERY = "zebra"
ALL_PATHS = ["bm25", "sag2", "dense", "title"]


def _index(data_dir: Path, b_holds_term: bool) -> HybridSearch:
    hs = open_search(make_settings(data_dir))
    for rid, text in TENANT_A.items():
        hs.ingest(rid, text, title=f"Zoo note {rid}", tenant="A")
    for rid, text in TENANT_B[b_holds_term].items():
        hs.ingest(rid, text, title=f"Reserve report {rid}", tenant="B")
    return hs


def _seen_by_a(hs: HybridSearch) -> list[dict[str, Any]]:
    resp = hs.search(QUERY, paths=ALL_PATHS, filters={"tenant": "A"}, top_k=10)
    assert not resp.degraded, resp.reasons
    return [r.as_dict() for r in resp.results]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("tenants")
    with _index(root / "with", True) as with_term, _index(root / "without", False) as without:
        yield with_term, without


def test_tenant_a_sees_the_same_results_whether_or_not_b_holds_the_term(both: Any) -> None:
    with_term, without = both
    seen_with, seen_without = _seen_by_a(with_term), _seen_by_a(without)
    assert {"a1", "a2", "a3"} <= {r["resource_id"] for r in seen_with} <= set(TENANT_A)
    assert seen_with == seen_without  # order, scores, every path's facts, the why lines


def test_tenant_scoped_results_show_no_score_that_depends_on_the_whole_index(both: Any) -> None:
    with_term, _ = both
    for result in _seen_by_a(with_term):
        for name, facts in result["paths"].items():
            if PATHS[name].corpus_scores:
                assert facts["raw_score"] is None and facts["score"] is None, (name, facts)
                assert isinstance(facts["rank"], int) and facts["rrf_term"] > 0
            else:  # a cosine is a property of the query and the passage alone
                assert isinstance(facts["raw_score"], float)
        lexical = [line for line in result["why"] if not line.startswith("dense:")]
        assert lexical and not any("raw score" in line for line in lexical), result["why"]


def test_an_unscoped_search_still_explains_raw_scores(both: Any) -> None:
    """An operator's search (no tenant filter) sees every engine score, as before."""
    with_term, without = both
    raw = {}
    for name, hs in (("with", with_term), ("without", without)):
        resp = hs.search(QUERY, paths=["bm25"], top_k=20)
        raw[name] = {r.resource_id: r.paths["bm25"]["raw_score"] for r in resp.results}
        assert all(isinstance(v, float) for v in raw[name].values())
    # the side channel this module closes for tenants: the same A passage, different bm25
    assert raw["with"]["a2"] != raw["without"]["a2"]
