"""config/hybridsag.example.toml and config/example.env list every setting of the ``Settings``
model, with its default and its range; these tests fail when either drifts from the model.

Conventions the files follow (and these tests read):
- TOML: one ``key = value`` line per setting in its ``[section]``; a setting whose default is
  None, or a secret, is a commented example (``# key = value``). A setting with a range or a
  closed set of values says so in the line's comment (``[400, 12000]``, ``(0, 3600]``,
  ``[0, inf)``, ``one of sag|passage``).
- .env: every setting as ``# HYBRIDSAG_SECTION__KEY=default`` (commented: a copied file changes
  nothing until a line is uncommented), the line above it ``# section.key: <range>``.
"""

from __future__ import annotations

import json
import re
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from hybridsag.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TOML = ROOT / "config" / "hybridsag.example.toml"
ENV = ROOT / "config" / "example.env"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _leaves(ann, (*prefix, name))
        else:
            yield ".".join((*prefix, name)), field


def expected_range(field: Any) -> str | None:
    """The range text a setting's comment must carry, or None when it has none."""
    lo = hi = None
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            lo = f"[{_number(m.ge)}"
        if getattr(m, "gt", None) is not None:
            lo = f"({_number(m.gt)}"
        if getattr(m, "le", None) is not None:
            hi = f"{_number(m.le)}]"
        if getattr(m, "lt", None) is not None:
            hi = f"{_number(m.lt)})"
    if lo or hi:
        return f"{lo or '(-inf'}, {hi or 'inf)'}"
    args = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    literal = field.annotation if typing.get_origin(field.annotation) is typing.Literal else None
    if literal is None and len(args) == 1 and typing.get_origin(args[0]) is typing.Literal:
        literal = args[0]
    if literal is not None:
        return "one of " + "|".join(typing.get_args(literal))
    return None


def leaves() -> dict[str, Any]:
    return dict(_leaves(Settings))


def default_json(key: str, field: Any) -> Any:
    """The default as JSON data (None for no default or a secret)."""
    value = field.get_default(call_default_factory=True)
    if value is None or isinstance(value, SecretStr):
        return None
    section = Settings.model_construct()
    for part in key.split("."):
        section = getattr(section, part)
    return json.loads(json.dumps(_jsonable(section)))


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


_TOML_LINE = re.compile(r"^(#\s*)?([a-z0-9_]+)\s*=\s*(.*)$")
_SECTION = re.compile(r"^\[([a-z0-9_.]+)\]")


def toml_entries() -> dict[str, tuple[Any, str, bool]]:
    """key -> (value, comment, active) for every setting line of the example TOML."""
    out: dict[str, tuple[Any, str, bool]] = {}
    section = ""
    for raw in TOML.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if m := _SECTION.match(line):
            section = m.group(1)
            continue
        m = _TOML_LINE.match(line)
        if not m:
            continue
        key = f"{section}.{m.group(2)}" if section else m.group(2)
        value_part, _, comment = m.group(3).partition("  #")
        assert key not in out, f"{key} is listed twice"
        out[key] = (tomllib.loads(f"v = {value_part}")["v"], comment, m.group(1) is None)
    return out


def _toml_value(entries: dict[str, tuple[Any, str, bool]], key: str) -> tuple[Any, str, bool]:
    if key in entries:
        return entries[key]
    parts = {k[len(key) + 1 :]: v for k, v in entries.items() if k.startswith(key + ".")}
    assert parts, f"{key} is missing from {TOML.name}"
    return {k: v[0] for k, v in parts.items()}, "", all(v[2] for v in parts.values())


@pytest.mark.parametrize("key", sorted(leaves()))
def test_toml_lists_the_setting_with_default_and_range(key: str) -> None:
    field = leaves()[key]
    value, comment, active = _toml_value(toml_entries(), key)
    want = default_json(key, field)
    if want is None:
        assert not active, f"{key}: no default (or a secret): must be a commented example"
    else:
        assert active, f"{key} must be an active line with its default"
        assert value == want, f"{key} = {value!r} in {TOML.name}, the default is {want!r}"
    rng = expected_range(field)
    if rng is not None:
        assert rng in comment, f"{key}: comment {comment!r} must give the range {rng!r}"


def test_toml_lists_nothing_else() -> None:
    keys = set(leaves())
    extra = [k for k in toml_entries() if k not in keys and k.rpartition(".")[0] not in keys]
    assert extra == []


def test_toml_loads_as_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "h.toml"
    target.write_text(TOML.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("HYBRIDSAG_CONFIG", str(target))
    loaded = Settings(_env_file=None).model_dump()
    monkeypatch.delenv("HYBRIDSAG_CONFIG")
    monkeypatch.chdir(tmp_path)  # no config/hybridsag.toml here: every setting at its default
    assert loaded == Settings(_env_file=None).model_dump()


_ENV_LINE = re.compile(r"^(#\s*)?HYBRIDSAG_([A-Z0-9_]+)=(.*)$")


def env_entries() -> dict[str, tuple[str, str, bool]]:
    """key -> (raw value, the comment line above, active) for every setting of example.env."""
    out: dict[str, tuple[str, str, bool]] = {}
    previous = ""
    for raw in ENV.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        m = _ENV_LINE.match(line)
        if m:
            key = m.group(2).lower().replace("__", ".")
            assert key not in out, f"{key} is listed twice"
            out[key] = (m.group(3), previous, m.group(1) is None)
        previous = line
    return out


@pytest.mark.parametrize("key", sorted(leaves()))
def test_env_lists_the_setting_with_default_and_range(key: str) -> None:
    field = leaves()[key]
    entries = env_entries()
    assert key in entries, f"HYBRIDSAG_{key.upper().replace('.', '__')} is missing from {ENV.name}"
    raw, above, _ = entries[key]
    want = default_json(key, field)
    if want is not None:
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(want, str):
            value = raw
        assert value == want, f"{key}={raw!r} in {ENV.name}, the default is {want!r}"
    rng = expected_range(field)
    if rng is not None:
        assert above.startswith(f"# {key}:") and rng in above, f"{key}: {above!r} must give {rng!r}"


def test_env_lists_nothing_else() -> None:
    assert sorted(set(env_entries()) - set(leaves())) == []


def test_env_values_are_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every listed default, set in the environment, makes a valid Settings (the examples of
    settings without a default are placeholders)."""
    fields = leaves()
    for key, (raw, _, _) in env_entries().items():
        if default_json(key, fields[key]) is not None:
            monkeypatch.setenv(f"HYBRIDSAG_{key.upper().replace('.', '__')}", raw)
    assert Settings(_env_file=None).model_dump() == Settings.model_construct().model_dump()


def test_the_checker_can_fail() -> None:
    fields = leaves()
    assert expected_range(fields["chunking.target_chars"]) == "[400, 12000]"
    assert expected_range(fields["milvus.timeout_s"]) == "(0, 3600]"
    assert expected_range(fields["consistency.max_delete_count"]) == "[0, inf)"
    assert expected_range(fields["chunking.mode"]) == "one of sag|passage"
    assert expected_range(fields["fusion.judge_accept"]) == "[0, 1]"
    assert expected_range(fields["embedding.model"]) is None
    assert default_json("search.paths", fields["search.paths"]) == ["sag2", "dense", "title", "bm25"]
    assert default_json("server.token", fields["server.token"]) is None
