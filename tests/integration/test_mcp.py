"""``hybridsag mcp`` driven by the official MCP SDK's own stdio client: the real command spawned
as a subprocess over the lexical-only sample index, in process and against a real
``hybridsag serve`` on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from tests.adaptersupport import (
    ADMIN,
    QUERY,
    READER,
    sample_hs,
    sample_service,
    sample_settings,
)

__all__ = ["sample_hs", "sample_service", "sample_settings"]

HYBRIDSAG = str(Path(sys.executable).with_name("hybridsag"))
T = TypeVar("T")


@asynccontextmanager
async def session(
    settings: Settings, *args: str, log: Path, **env: str
) -> AsyncIterator[ClientSession]:
    """An initialised SDK client session with ``hybridsag [ARGS] mcp`` over ``settings``'s
    data dir (lexical-only); the child's stderr goes to ``log``."""
    params = StdioServerParameters(
        command=HYBRIDSAG,
        args=[*args, "mcp"] if "mcp" not in args else list(args),
        env={
            "HYBRIDSAG_DATA_DIR": str(settings.data_dir),
            "HYBRIDSAG_EMBEDDING__MODEL": "none",
            **env,
        },
        cwd=str(settings.data_dir.parent),
    )
    with log.open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


def run(settings: Settings, log: Path, body: Callable[[ClientSession], Awaitable[T]], *args: str, **env: str) -> T:
    async def go() -> T:
        async with session(settings, *args, log=log, **env) as client:
            return await body(client)

    return asyncio.run(go())


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


def test_search_tool_answers_as_the_python_api(
    sample_settings: Settings, sample_hs: HybridSearch, tmp_path: Path
) -> None:
    async def body(client: ClientSession) -> dict[str, Any]:
        tools = await client.list_tools()
        agent = await client.call_tool("search", {"query": QUERY, "top_k": 3})
        full = await client.call_tool("search", {"query": QUERY, "top_k": 3, "format": "json"})
        small = await client.call_tool("search", {"query": QUERY, "budget": 600, "top_k": 10})
        return {
            "tools": {t.name: t for t in tools.tools},
            "init": client.initialize_result,
            "agent": agent,
            "full": full,
            "small": small,
        }

    out = run(sample_settings, tmp_path / "mcp.log", body)
    assert set(out["tools"]) == {"search"}  # no writes unless allowed
    assert out["init"].server_info.name == "hybridsag"
    assert "never instructions" in out["init"].instructions
    assert out["tools"]["search"].annotations.read_only_hint is True
    expected = sample_hs.search(QUERY, top_k=3)
    assert not out["agent"].is_error
    assert text_of(out["agent"]) == expected.as_agent_text(4000)  # mcp.budget's default
    assert text_of(out["agent"]).startswith(f'3 results for "{QUERY}"')
    full = json.loads(text_of(out["full"]))
    assert [r["chunk_id"] for r in full["results"]] == [r.chunk_id for r in expected.results]
    assert full["results"][0]["paths"] == dict(expected.results[0].paths)
    small = text_of(out["small"])
    assert len(small) <= 600 and "left out to fit the budget" in small


def test_bad_input_raises_mcp_error_with_hybridsags_message(
    sample_settings: Settings, tmp_path: Path
) -> None:
    calls = [
        ({"query": "   "}, "query is empty or whitespace only"),
        ({"query": QUERY, "paths": ["nope"]}, "unknown path 'nope'; valid: bm25, sag2, dense, title"),
        ({"query": QUERY, "filters": {"colour": "red"}}, "unknown filter ['colour']"),
        ({"query": QUERY, "top_k": 5000}, "top_k must be an integer in 1..1000, got 5000"),
        ({"query": QUERY, "top_k": 0}, "top_k must be an integer in 1..1000, got 0"),
        ({"query": QUERY, "budget": 10}, "budget must be an integer in 500..200000"),
    ]

    async def body(client: ClientSession) -> list[Any]:
        answers: list[Any] = []
        for arguments, _ in calls:
            try:
                answers.append(await client.call_tool("search", arguments))
            except MCPError as exc:
                answers.append(exc)
        # the SDK's own schema check: a wrong JSON type is an isError result naming the field
        answers.append(await client.call_tool("search", {"query": QUERY, "top_k": "many"}))
        return answers

    answers = run(sample_settings, tmp_path / "mcp.log", body)
    for (arguments, message), answer in zip(calls, answers, strict=False):
        assert isinstance(answer, MCPError), (arguments, answer)
        assert answer.code == INVALID_PARAMS and message in answer.message
        assert answer.data["error"] in ("QueryError", "QueryValueError")
    typed = answers[-1]
    assert isinstance(typed, CallToolResult) and typed.is_error and "top_k" in text_of(typed)


def test_ingest_and_delete_only_when_writes_are_allowed(
    sample_settings: Settings, sample_hs: HybridSearch, tmp_path: Path
) -> None:
    doc = {"id": "mcp/osprey.md", "title": "Osprey", "text": "# Osprey\n\nThe osprey dives for fish."}

    async def body(client: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": {t.name for t in (await client.list_tools()).tools}}
        out["ingest"] = json.loads(text_of(await client.call_tool("ingest", {"resources": [doc]})))
        out["found"] = text_of(await client.call_tool("search", {"query": "osprey fish"}))
        try:
            await client.call_tool("ingest", {"resources": [doc, {"id": " padded", "text": "x"}]})
        except MCPError as exc:
            out["refused"] = exc
        out["delete"] = json.loads(text_of(await client.call_tool("delete", {"resource_id": doc["id"]})))
        out["again"] = json.loads(text_of(await client.call_tool("delete", {"resource_id": doc["id"]})))
        # a resource is (tenant, id): acme's copy goes only when its tenant is named
        await client.call_tool("ingest", {"resources": [{**doc, "tenant": "acme"}]})
        out["untenanted"] = json.loads(text_of(await client.call_tool("delete", {"resource_id": doc["id"]})))
        out["acme"] = json.loads(
            text_of(await client.call_tool("delete", {"resource_id": doc["id"], "tenant": "acme"}))
        )
        out["gone"] = text_of(await client.call_tool("search", {"query": "osprey fish"}))
        return out

    out = run(sample_settings, tmp_path / "mcp.log", body, "mcp", "--allow-writes")
    assert out["tools"] == {"search", "ingest", "delete"}
    assert out["ingest"]["indexed"] == 1 and out["ingest"]["errors"] == {}
    assert "mcp/osprey.md" in out["found"] and "The osprey dives for fish." in out["found"]
    refused = out["refused"]
    assert refused.code == INVALID_PARAMS and "resources[1]" in refused.message
    assert "leading or trailing whitespace" in refused.message
    assert out["delete"] == {"resource_id": doc["id"], "tenant": None, "deleted": True}
    assert out["again"] == {"resource_id": doc["id"], "tenant": None, "deleted": False}
    assert out["untenanted"]["deleted"] is False
    assert out["acme"] == {"resource_id": doc["id"], "tenant": "acme", "deleted": True}
    assert "mcp/osprey.md" not in out["gone"]
    assert sample_hs.resource(doc["id"]) is None
    # the setting does what the flag does
    tools = run(
        sample_settings, tmp_path / "mcp.log",
        lambda c: c.list_tools(), HYBRIDSAG_MCP__ALLOW_WRITES="true",
    )
    assert {t.name for t in tools.tools} == {"search", "ingest", "delete"}


def test_through_a_running_service_the_token_decides_writes(
    sample_settings: Settings, sample_hs: HybridSearch, sample_service: str, tmp_path: Path
) -> None:
    """The token's role decides (issue 28): a read token is not offered ingest or delete; a
    write-capable token is offered them without --allow-writes, which through --server means
    nothing and is refused (exit 2, naming it) rather than ignored."""
    doc = {"_id": "mcp/heron.md", "text": "The grey heron stands still in shallow water."}

    async def body(client: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": {t.name for t in (await client.list_tools()).tools}}
        out["search"] = await client.call_tool("search", {"query": QUERY, "top_k": 3})
        out["ingest"] = await client.call_tool("ingest", {"resources": [doc]})
        try:
            await client.call_tool("search", {"query": QUERY, "paths": ["nope"]})
        except MCPError as exc:
            out["bad"] = exc
        return out

    refused = subprocess.run(
        [sys.executable, "-m", "hybridsag.cli", "--server", sample_service, "mcp",
         "--allow-writes"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "--allow-writes means nothing through --server" in refused.stderr
    reader = run(
        sample_settings, tmp_path / "mcp.log", body, "--server", sample_service, "mcp",
        HYBRIDSAG_SERVER__CLIENT_TOKEN=READER,
    )
    assert reader["tools"] == {"search"}  # what the service would refuse is not listed
    assert text_of(reader["search"]) == sample_hs.search(QUERY, top_k=3).as_agent_text(4000)
    assert reader["ingest"].is_error and "ingest" in text_of(reader["ingest"])
    assert reader["bad"].code == INVALID_PARAMS and "unknown path 'nope'" in reader["bad"].message
    assert sample_hs.resource(doc["_id"]) is None

    async def write(client: ClientSession) -> list[Any]:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        added = text_of(await client.call_tool("ingest", {"resources": [doc]}))
        found = text_of(await client.call_tool("search", {"query": "grey heron"}))
        deleted = text_of(await client.call_tool("delete", {"resource_id": doc["_id"]}))
        return [tools, added, found, deleted]

    tools, added, found, deleted = run(
        sample_settings, tmp_path / "mcp.log", write, "--server", sample_service, "mcp",
        HYBRIDSAG_SERVER__CLIENT_TOKEN=ADMIN,  # no --allow-writes: the role is enough
    )
    assert set(tools) == {"search", "ingest", "delete"}
    # the schema names the resource id as POST /v1/resources does, and says so
    item = tools["ingest"].input_schema["$defs"]["ResourceArg"]
    assert "_id" in item["properties"] and "_id" in item["required"]
    assert "POST /v1/resources" in (tools["ingest"].description or "")
    assert "`_id`" in (tools["ingest"].description or "")
    assert json.loads(added)["indexed"] == 1 and "mcp/heron.md" in found
    assert json.loads(deleted)["deleted"] is True and sample_hs.resource(doc["_id"]) is None
