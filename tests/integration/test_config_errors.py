"""Configuration that fails loudly: every bad setting is one line naming it, exit 2, no traceback;
``doctor`` shows where each setting came from; a search needs an index; a judge without a key
degrades."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import SAMPLES, lexical_only, run, sample_index  # noqa: F401
from hybridsag.config import load_settings, setting_origins
from hybridsag.errors import ConfigError
from hybridsag.settings import Settings

pytestmark = pytest.mark.usefixtures("lexical_only")


BAD_TOML = "[fusion\nk = 3\n"


@pytest.mark.parametrize(
    ("env", "toml", "named"),
    [
        ({"HYBRIDSAG_CONFIG": "missing.toml"}, None, ["HYBRIDSAG_CONFIG=missing.toml", "no file"]),
        ({"HYBRIDSAG_CONFIG": "."}, None, ["HYBRIDSAG_CONFIG=.", "a folder"]),
        ({}, BAD_TOML, ["c.toml", "does not parse", "line 1"]),
        ({"HYBRIDSAG_FUZION__K": "3"}, None, ["HYBRIDSAG_FUZION__K", "HYBRIDSAG_FUSION__K?"]),
        ({"HYBRIDSAG_BOGUS": "1"}, None, ["HYBRIDSAG_BOGUS", "unknown setting"]),
        ({"HYBRIDSAG_DATA_DIR__X": "1"}, None, ["HYBRIDSAG_DATA_DIR__X"]),
        ({"HYBRIDSAG_FUSION__BOGUS": "1"}, None, ["fusion.bogus", "HYBRIDSAG_FUSION__BOGUS"]),
        ({"HYBRIDSAG_FUSION__K": "abc"}, None, ["fusion.k = 'abc'", "HYBRIDSAG_FUSION__K"]),
        ({"HYBRIDSAG_FUSION__WEIGHTS": "{bad"}, None, ["HYBRIDSAG_FUSION__WEIGHTS", "JSON"]),
        ({"HYBRIDSAG_SEARCH__PATHS": "[bm25"}, None, ["search.paths", "JSON list"]),
        ({"HYBRIDSAG_SEARCH__PATHS": "bm25,nope"}, None, ["'nope'", "search.paths"]),
        ({"HYBRIDSAG_SEARCH__TOP_K": "0"}, None, ["search.top_k = '0'", "greater than"]),
        ({"HYBRIDSAG_CHUNKING__OVERLAP_CHARS": "600"}, None, ["overlap_chars=600"]),
        ({"HYBRIDSAG_DATA_DIR": ""}, None, ["data_dir", "empty"]),
        ({"HYBRIDSAG_DATA_DIR": "/etc/passwd"}, None, ["/etc/passwd"]),
        ({"HYBRIDSAG_DATA_DIR": "/proc/nope/x"}, None, ["/proc/nope/x"]),
    ],
)
@pytest.mark.parametrize("command", ["search", "index", "doctor"])
def test_a_bad_setting_is_one_line_naming_it_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    env: dict[str, str],
    toml: str | None,
    named: list[str],
    command: str,
) -> None:
    if toml is not None:
        (tmp_path / "c.toml").write_text(toml, "utf-8")
        monkeypatch.setenv("HYBRIDSAG_CONFIG", "c.toml")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = {"search": ["search", "x"], "index": ["index", str(SAMPLES), "-q"], "doctor": ["doctor"]}
    code, text = run(*argv[command])
    err = capsys.readouterr().err
    if command == "doctor":  # doctor reports the failed check on stdout and exits 1
        assert code == 1
        line = next(x for x in text.splitlines() if "FAIL" in x)
    else:
        assert code == 2, (text, err)
        assert err.count("\n") == 1, err
        line = err
    assert "Traceback" not in err + text
    for part in named:
        assert part in line, line


def test_the_console_script_gives_one_line_and_exit_2_for_a_bad_toml(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(BAD_TOML, "utf-8")
    script = Path(sys.executable).parent / "hybridsag"
    env = {"PATH": "/usr/bin:/bin", "HYBRIDSAG_CONFIG": str(tmp_path / "c.toml")}
    proc = subprocess.run(
        [str(script), "search", "x"], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "c.toml does not parse" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_comma_lists_are_accepted_for_list_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_SEARCH__PATHS", "bm25, title")
    assert Settings().search.paths == ("bm25", "title")
    monkeypatch.setenv("HYBRIDSAG_SEARCH__PATHS", '["sag2", "title"]')
    assert Settings().search.paths == ("sag2", "title")


def test_load_settings_names_every_origin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[fusion]\nk = 3\n[query]\nmax_terms = 0\n", "utf-8")
    (tmp_path / ".env").write_text("HYBRIDSAG_TITLE__DEPTH=abc\n", "utf-8")
    monkeypatch.setenv("HYBRIDSAG_CONFIG", "c.toml")
    monkeypatch.setenv("HYBRIDSAG_SEARCH__TOP_K", "-1")
    with pytest.raises(ConfigError) as info:
        load_settings({"data_dir": ""}, origin="command line")
    message = str(info.value)
    assert "\n" not in message
    assert f"query.max_terms = 0 (TOML file {tmp_path / 'c.toml'})" in message
    assert f"title.depth = 'abc' (.env file {tmp_path / '.env'} (HYBRIDSAG_TITLE__DEPTH))" in message
    assert "search.top_k = '-1' (environment (HYBRIDSAG_SEARCH__TOP_K))" in message
    assert "data_dir = '' (command line)" in message


def test_doctor_lists_the_settings_in_effect_and_where_each_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "c.toml").write_text('[fusion]\nk = 30\n[milvus]\ntoken = "tok"\n', "utf-8")
    (tmp_path / ".env").write_text("HYBRIDSAG_QUERY__MAX_CHARS=200\n", "utf-8")
    monkeypatch.setenv("HYBRIDSAG_CONFIG", "c.toml")
    monkeypatch.setenv("HYBRIDSAG_SEARCH__TOP_K", "7")
    code, text = run("--data-dir", str(tmp_path / "dd"), "doctor", "--json")
    assert code == 0, text
    rows = {row["key"]: row for row in json.loads(text)["settings"]}
    toml = f"TOML file {tmp_path / 'c.toml'}"
    assert rows["fusion.k"] == {"key": "fusion.k", "value": 30.0, "origin": toml}
    assert rows["milvus.token"] == {"key": "milvus.token", "value": "***", "origin": toml}
    assert rows["search.top_k"]["origin"] == "environment (HYBRIDSAG_SEARCH__TOP_K)"
    assert rows["query.max_chars"]["origin"].startswith(f".env file {tmp_path / '.env'}")
    assert rows["data_dir"] == {
        "key": "data_dir", "value": str(tmp_path / "dd"), "origin": "command line"
    }  # fmt: skip
    assert rows["fusion.depth"]["origin"] == "default"
    assert rows["judge.jev.api_key"]["value"] is None  # unset secret: no mask, no value
    code, text = run("--data-dir", str(tmp_path / "dd"), "doctor")
    assert code == 0
    assert f"  fusion.k = 30.0  [{toml}]" in text
    assert "fusion.depth" not in text  # defaults only with --all-settings
    code, text = run("--data-dir", str(tmp_path / "dd"), "doctor", "--all-settings")
    assert "  fusion.depth = 100  [default]" in text
    assert setting_origins()["fusion.k"] == toml


def test_search_on_a_data_dir_without_an_index_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "typo"
    code, text = run("--data-dir", str(typo), "search", "ReActAgent")
    assert code == 2 and text == ""
    err = capsys.readouterr().err
    assert f"no index at {typo}" in err and "hybridsag index" in err
    assert not typo.exists()  # nothing was created there
    assert run("--data-dir", str(typo), "delete", "x")[0] == 2
    assert not typo.exists()


def test_a_jev_judge_without_a_key_degrades_to_bm25_order_and_doctor_fails(
    sample_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDSAG_JUDGE__NAME", "jev")
    code, text = run("search", "ReActAgent", "--paths", "sag2", "--json")
    assert code == 0
    data = json.loads(text)
    assert data["degraded"] is True and "api_key is not set" in data["reasons"]["sag2"]
    assert data["results"], "BM25 order, not 0 results"
    assert data["results"][0]["resource_id"] == "guide/agents.md"
    code, text = run("doctor")
    assert code == 1
    assert "[FAIL] judge: ConfigError: judge.jev.api_key is not set" in text
    monkeypatch.setenv("HYBRIDSAG_JUDGE__ON_FAILURE", "raise")
    assert run("search", "ReActAgent", "--paths", "sag2")[0] == 1
