"""Where settings come from: the TOML file, the environment and ``.env`` (unknown keys and
bad JSON refused with the key named), and the layers :func:`setting_layers` stacks."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsError,
    TomlConfigSettingsSource,
)

from hybridsag.errors import ConfigError
from hybridsag.settings.ranking import FusionSettings

__all__ = [
    "CONFIG_VARIABLE",
    "section_model",
    "setting_layers",
    "toml_path",
]


#: The environment variable naming the TOML file (not a setting itself).
CONFIG_VARIABLE = "HYBRIDSAG_CONFIG"

def toml_path() -> Path | None:
    """The TOML file ``Settings`` reads: the file ``HYBRIDSAG_CONFIG`` names (ConfigError when it
    names no file), else ``config/hybridsag.toml`` in the working directory when it exists."""
    explicit = os.environ.get(CONFIG_VARIABLE, "")
    if explicit.strip():
        path = Path(explicit).expanduser()
        if not path.is_file():
            what = "a folder" if path.is_dir() else "no file"
            raise ConfigError(f"{CONFIG_VARIABLE}={explicit} names {what}: point it at a TOML file")
        return path
    candidate = Path("config/hybridsag.toml")
    return candidate if candidate.is_file() else None


def _toml_source(settings_cls: type[BaseSettings], path: Path) -> TomlConfigSettingsSource:
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"TOML file {path} does not parse: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read TOML file {path}: {exc}") from None


def _field_at(settings_cls: type[BaseModel], parts: list[str]) -> tuple[Any, bool]:
    """What the name parts of a ``HYBRIDSAG_*`` variable lead to: ``(field, True)`` for a
    setting (a mapping setting takes any keys below it), ``(None, True)`` for an unknown key
    inside a known section (pydantic reports that one), ``(None, False)`` for a name that is
    no setting at all (an unknown section, or parts below a plain value)."""
    model: type[BaseModel] | None = settings_cls
    for depth, part in enumerate(parts):
        if model is None:
            return None, False
        field = model.model_fields.get(part)
        if field is None:
            return None, depth > 0
        if _is_mapping(field):
            return field, True
        model = section_model(field.annotation)
        if depth == len(parts) - 1:
            return field, True
    return None, False


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The section class of a field annotation (``FusionSettings``), else None.

    Args:
        annotation: A field's annotation.
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _is_mapping(field: Any) -> bool:
    return field is not None and getattr(field.annotation, "__origin__", None) is dict


class _JsonCheck:
    """Shared by the two environment sources: unknown ``HYBRIDSAG_*`` names are passed on as
    extra keys (``extra="forbid"`` then reports them), and a value that must be JSON but is not
    is a ConfigError naming the variable."""

    where: str
    env_vars: Mapping[str, str | None]
    env_prefix: str
    settings_cls: type[BaseSettings]

    def _unknown(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self.env_vars.items():
            if not name.lower().startswith(self.env_prefix.lower()):
                continue
            rest = name[len(self.env_prefix) :].lower()
            if rest == CONFIG_VARIABLE[len("HYBRIDSAG_") :].lower():
                continue
            field, named = _field_at(self.settings_cls, rest.split("__"))
            if field is None and not named:
                out[name.lower()] = value
        return out

    def _bad_json(self, source: PydanticBaseSettingsSource) -> ConfigError:
        for name, value in self.env_vars.items():
            if value is None or not name.lower().startswith(self.env_prefix.lower()):
                continue
            parts = name[len(self.env_prefix) :].lower().split("__")
            field, _named = _field_at(self.settings_cls, parts)
            if field is None or NoDecode in field.metadata or not source.field_is_complex(field):
                continue
            try:
                json.loads(value)
            except ValueError as exc:
                kind = 'an object such as {"bm25": 1.0}' if _is_mapping(field) else "JSON"
                return ConfigError(
                    f"{name.upper()} ({self.where}) is not valid JSON ({exc.msg} at character "
                    f"{exc.pos}); {'.'.join(parts)} takes {kind}"
                )
        return ConfigError(f"a HYBRIDSAG_* value ({self.where}) cannot be read")


class _EnvSource(EnvSettingsSource, _JsonCheck):
    where = "environment"

    def __call__(self) -> dict[str, Any]:
        try:
            data = super().__call__()
        except SettingsError:
            raise self._bad_json(self) from None
        return {**data, **self._unknown()}


class _DotEnvSource(DotEnvSettingsSource, _JsonCheck):
    @property
    def where(self) -> str:  # type: ignore[override]
        return f".env file {Path(str(self.env_file)).resolve()}"

    def __call__(self) -> dict[str, Any]:
        try:
            return super().__call__()
        except SettingsError:
            raise self._bad_json(self) from None


def setting_layers(
    settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource
) -> list[tuple[str, PydanticBaseSettingsSource]]:
    """The sources ``Settings`` reads, highest priority first, each with its kind: ``"init"``
    (keyword arguments), ``"env"``, ``".env"``, ``"toml"``. Raises ConfigError for a
    ``HYBRIDSAG_CONFIG`` that names no file, a TOML file that does not parse and a ``.env``
    file that cannot be read.

    Args:
        settings_cls: The settings class the sources read for.
        init: The source of the keyword arguments.
    """
    try:
        dotenv = _DotEnvSource(settings_cls)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the .env file {Path('.env').resolve()}: {exc}") from None
    layers: list[tuple[str, PydanticBaseSettingsSource]] = [
        ("init", init),
        ("env", _EnvSource(settings_cls)),
        (".env", dotenv),
    ]
    toml = toml_path()
    if toml is not None:
        layers.append(("toml", _toml_source(settings_cls, toml)))
    return layers
