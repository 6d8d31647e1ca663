"""``Settings``: env prefix and nesting, TOML, .env, unknown keys, ranges, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from hybridsag.components import Components
from hybridsag.errors import ConfigError
from hybridsag.settings import Settings
from pydantic import SecretStr, ValidationError


def test_defaults() -> None:
    s = Settings()
    assert s.data_dir == Path(".hybridsag")
    assert s.sqlite_path == Path(".hybridsag") / "hybridsag.sqlite3"
    assert (s.fusion.k, s.query.max_chars, s.query.max_terms) == (10.0, 4096, 80)
    assert s.fusion.weights == {"bm25": 1.0, "sag2": 1.0, "dense": 1.0, "title": 0.25}
    assert (s.fusion.method, s.fusion.normalisation, s.fusion.trust) == ("convex", "minmax", True)
    assert s.fusion.trust_model is None
    assert s.search.paths == ("sag2", "dense", "title", "bm25")
    assert (s.lexical.title_weight, s.lexical.heading_weight, s.lexical.body_weight) == (2, 2, 1)
    assert (s.chunking.target_chars, s.chunking.mode) == (512, "sag")
    assert (s.fusion.judge_accept, s.fusion.judge_order) == (0.5, True)
    assert s.judge.weights_file == Path("default")


def test_example_toml_is_valid_and_states_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "hybridsag.example.toml"
    monkeypatch.setenv("HYBRIDSAG_CONFIG", str(example))
    s = Settings()
    monkeypatch.delenv("HYBRIDSAG_CONFIG")
    plain = Settings()
    assert s.fusion == plain.fusion
    assert s.judge == plain.judge
    assert s.search == plain.search
    assert s.formats == plain.formats
    assert s.ingest == plain.ingest


def test_env_prefix_and_nested_delimiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_FUSION__K", "30")
    monkeypatch.setenv("HYBRIDSAG_DATA_DIR", "/srv/hs")
    monkeypatch.setenv("HYBRIDSAG_EMBEDDING__MODEL", "none")
    monkeypatch.setenv("FUSION__K", "99")  # no prefix: ignored
    s = Settings()
    assert s.fusion.k == 30.0
    assert s.data_dir == Path("/srv/hs")
    assert s.embedding.model == "none"
    assert Settings(fusion={"k": 5}).fusion.k == 5.0  # keyword arguments win over env


def test_toml_file_via_hybridsag_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    toml = tmp_path / "custom.toml"
    toml.write_text(
        'data_dir = "from-toml"\n[chunking]\ntarget_chars = 800\n[fusion]\nk = 10\n', "utf-8"
    )
    monkeypatch.setenv("HYBRIDSAG_CONFIG", str(toml))
    s = Settings()
    assert (s.data_dir, s.chunking.target_chars, s.fusion.k) == (Path("from-toml"), 800, 10.0)
    monkeypatch.setenv("HYBRIDSAG_FUSION__K", "20")  # env beats the TOML file
    assert Settings().fusion.k == 20.0


def test_default_toml_location(tmp_path: Path) -> None:
    assert Settings().query.max_chars == 4096  # cwd is tmp_path: no config/ there
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "hybridsag.toml").write_text("[query]\nmax_chars = 2000\n", "utf-8")
    assert Settings().query.max_chars == 2000


def test_dotenv_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "HYBRIDSAG_QUERY__MAX_CHARS=100\nHYBRIDSAG_SEARCH__TOP_K=7\n", "utf-8"
    )
    s = Settings()
    assert (s.query.max_chars, s.search.top_k) == (100, 7)
    monkeypatch.setenv("HYBRIDSAG_SEARCH__TOP_K", "3")  # the environment beats .env
    assert Settings().search.top_k == 3


def test_unknown_keys_are_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="bogus"):
        Settings(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="bogus"):
        Settings(fusion={"bogus": 1})
    monkeypatch.setenv("HYBRIDSAG_FUSION__BOGUS", "1")
    with pytest.raises(ValidationError, match="bogus"):
        Settings()
    monkeypatch.delenv("HYBRIDSAG_FUSION__BOGUS")
    (tmp_path / ".env").write_text("HYBRIDSAG_BOGUS=2\n", "utf-8")
    with pytest.raises(ValidationError, match="bogus"):
        Settings()
    (tmp_path / ".env").unlink()
    toml = tmp_path / "c.toml"
    toml.write_text("[chunking]\nbogus = 1\n", "utf-8")
    monkeypatch.setenv("HYBRIDSAG_CONFIG", str(toml))
    with pytest.raises(ValidationError, match="bogus"):
        Settings()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"chunking": {"target_chars": 399}}, "target_chars"),
        ({"chunking": {"target_chars": 12_001}}, "target_chars"),
        ({"query": {"max_chars": 0}}, "max_chars"),
        ({"query": {"max_terms": 501}}, "max_terms"),
        ({"fusion": {"k": 0}}, "k"),
        ({"lexical": {"title_weight": -1}}, "title_weight"),
        ({"search": {"top_k": 0}}, "top_k"),
        ({"fusion": {"weights": {"bm25": -1.0}}}, "bm25"),
        ({"chunking": {"mode": "sentences"}}, "mode"),
        ({"chunking": {"target_chars": 400, "overlap_chars": 400}}, "overlap_chars"),
    ],
)
def test_ranges_are_checked(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**kwargs)  # type: ignore[arg-type]
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search": {"paths": ["bm25", "nope"]}}, r"unknown path 'nope' in search\.paths; valid: bm25, sag2"),
        ({"fusion": {"weights": {"nope": 1.0}}}, r"unknown path 'nope' in fusion\.weights"),
        ({"judge": {"name": "nope"}}, r"unknown judge 'nope' \(judge\.name\); valid: chat, cross-encoder, features, jev, none, reranker"),
    ],
)
def test_names_are_checked_against_the_registries(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    """Path and judge names come from registries a team may extend, so they are checked when
    the parts are built (the CLI does that first thing), with the valid names listed."""
    settings = Settings(data_dir=tmp_path / "d", embedding={"model": "none"}, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        Components(settings)


def test_range_edges_are_accepted() -> None:
    assert Settings(chunking={"target_chars": 400, "overlap_chars": 0}).chunking.target_chars == 400
    assert Settings(chunking={"target_chars": 12_000}).chunking.target_chars == 12_000


def test_env_range_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_CHUNKING__TARGET_CHARS", "399")
    with pytest.raises(ValidationError, match="target_chars"):
        Settings()


def test_secrets_are_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDSAG_JUDGE__JEV__API_KEY", "sk-env-secret")
    s = Settings(server={"token": "tok-secret-0123456789"}, milvus={"token": "mv-secret"})
    key = s.judge.jev.api_key
    assert isinstance(key, SecretStr) and key.get_secret_value() == "sk-env-secret"
    assert s.server.token is not None and s.server.token.get_secret_value() == "tok-secret-0123456789"
    for shown in (repr(s), str(s), repr(s.judge), str(s.public_dict()), s.model_dump_json()):
        for secret in ("sk-env-secret", "tok-secret-0123456789", "mv-secret"):
            assert secret not in shown


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.fusion.k = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------- watched sources


def test_watched_folders_may_not_overlap_within_a_tenant(tmp_path: Path) -> None:
    from hybridsag.settings import SourcesSettings

    docs = tmp_path / "docs"
    ok = SourcesSettings(watch=[{"path": docs}, {"path": docs, "tenant": "t"}, {"path": tmp_path / "x"}])
    assert [w.tenant for w in ok.watch] == ["", "t", ""]
    for second in (docs, docs / "inner", tmp_path):
        with pytest.raises(ValidationError, match="overlap; watch the outer folder only"):
            SourcesSettings(watch=[{"path": docs}, {"path": second}])
    with pytest.raises(ValidationError, match="path is empty"):
        SourcesSettings(watch=[{"path": " "}])
    with pytest.raises(ValidationError, match="debounce_ms"):
        SourcesSettings(debounce_ms=5)
