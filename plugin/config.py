"""Reading settings at an entry point: one-line errors, and where each value came from.

:func:`load_settings` builds :class:`~hybridsag.settings.Settings` the way the CLI (and any other
entry point) should: a bad value, an unknown key or an unknown ``HYBRIDSAG_*`` variable is a
:class:`~hybridsag.errors.ConfigError` whose message names the key, the variable or the file and
says what is wrong, one clause per problem on one line. Messages are built from pydantic's error
list, never from its text: the input value is shown only for a plain value of a setting that is
not a secret (``SecretStr`` fields, and any key whose name looks like one: key, token, secret,
password, credential, auth), and never for an unknown key (a misspelled ``api_kye`` holds a key).

:func:`setting_origins` says for every setting that is not a default where its value came from
(keyword arguments or the command line, the environment, a ``.env`` file, a TOML file);
:func:`settings_table` lists every setting in effect with that origin, secrets masked, for
``hybridsag doctor``.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_settings import InitSettingsSource

from hybridsag.errors import ConfigError
from hybridsag.settings import Settings, section_model, setting_layers, toml_path

__all__ = [
    "MASK",
    "describe_errors",
    "is_secret_key",
    "load_settings",
    "setting_origins",
    "settings_table",
]

#: What a set secret is shown as.
MASK = "***"
_PREFIX = "HYBRIDSAG_"
_SECRET_NAME = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)
#: Most problems named in one message; the rest are counted.
_MAX_PROBLEMS = 5


def load_settings(
    overrides: Mapping[str, Any] | None = None, *, origin: str = "keyword argument"
) -> Settings:
    """``Settings(**overrides)``, with every problem as one :class:`ConfigError`.

    ``origin`` names where the overrides came from in messages and in :func:`setting_origins`
    (the CLI passes ``"command line"``).

    Raises:
        ConfigError: a bad value, an unknown key or ``HYBRIDSAG_*`` variable, a value that must
            be JSON and is not, a ``HYBRIDSAG_CONFIG`` that names no file, a TOML or ``.env``
            file that cannot be read. The message is one line and shows no secret.

    Example: ``load_settings({"data_dir": Path("/srv/hs")}, origin="command line")``
    """
    init = dict(overrides or {})
    try:
        return Settings(**init)
    except ValidationError as exc:
        message = describe_errors(exc, setting_origins(init, origin=origin))
    raise ConfigError(message)


def setting_origins(
    overrides: Mapping[str, Any] | None = None, *, origin: str = "keyword argument"
) -> dict[str, str]:
    """Dotted key -> where its value comes from, for every key a source sets (the others are
    defaults): ``origin`` for ``overrides``, ``"environment (HYBRIDSAG_FUSION__K)"``,
    ``".env file /abs/.env (HYBRIDSAG_X)"``, ``"TOML file /abs/c.toml"``. An unknown variable
    appears under its lower-case name. ConfigError as :func:`load_settings`."""
    init = InitSettingsSource(Settings, init_kwargs=dict(overrides or {}))
    layers = setting_layers(Settings, init)
    toml = toml_path()
    origins: dict[str, str] = {}
    for kind, source in reversed(layers):  # lowest priority first: higher ones overwrite
        for path in _leaf_paths(Settings, source()):
            origins[".".join(path)] = _label(kind, path, origin, toml)
    return origins


def settings_table(settings: Settings, origins: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every setting in effect: ``{"key", "value", "origin"}`` rows in declaration order;
    secrets are :data:`MASK` (or None when unset), a password in a URL is masked too."""
    rows: list[dict[str, Any]] = []
    secrets = _secret_keys(Settings)

    def walk(model: BaseModel, prefix: tuple[str, ...]) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            path = (*prefix, name)
            key = ".".join(path)
            if isinstance(value, BaseModel):
                walk(value, path)
                continue
            if key in secrets or isinstance(value, SecretStr):
                shown: Any = None if value is None else MASK
            elif isinstance(value, Path):
                shown = str(value)
            elif isinstance(value, tuple):
                shown = list(value)
            elif isinstance(value, str) and "://" in value:
                shown = _mask_url(value)
            else:
                shown = value
            rows.append({"key": key, "value": shown, "origin": _origin_of(path, origins)})

    walk(settings, ())
    return rows


def is_secret_key(key: str) -> bool:
    """Whether a dotted key is a secret setting or looks like one by its last part."""
    return key in _secret_keys(Settings) or bool(_SECRET_NAME.search(key.rsplit(".", 1)[-1]))


def describe_errors(exc: ValidationError, origins: Mapping[str, str]) -> str:
    """One line naming every problem of ``exc`` (at most five, then a count), each with where
    the value came from. Input values only as the module docstring allows."""
    parts = [_describe(err, origins) for err in exc.errors(include_url=False)]
    if len(parts) > _MAX_PROBLEMS:
        parts = [*parts[:_MAX_PROBLEMS], f"and {len(parts) - _MAX_PROBLEMS} more"]
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------


def _describe(err: Mapping[str, Any], origins: Mapping[str, str]) -> str:
    loc = tuple(str(part) for part in err.get("loc", ()))
    key = ".".join(loc)
    where = _origin_of(loc, origins)
    if err.get("type") == "extra_forbidden":
        if len(loc) == 1 and loc[0].upper().startswith(_PREFIX):
            return _unknown_variable(loc[0], where)
        hint = _closest(loc[-1], _fields_at(loc[:-1]))
        hint = f"; did you mean {'.'.join((*loc[:-1], hint))}?" if hint else ""
        return f"unknown setting {key} ({where}){hint}"
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    value = err.get("input")
    shown = ""
    if (
        loc
        and not is_secret_key(key)
        and isinstance(value, str | int | float | bool)
        and not isinstance(value, SecretStr)
    ):
        text = repr(value)
        shown = f" = {text[:60] + '…' if len(text) > 60 else text}"
    return f"{key or 'settings'}{shown} ({where}): {message}"


def _unknown_variable(name: str, where: str) -> str:
    parts = name.upper()[len(_PREFIX) :].split("__")
    top = [f.upper() for f in Settings.model_fields]
    guess = _closest(parts[0], top)
    hint = ""
    if guess:
        hint = f"; did you mean {_PREFIX}{'__'.join([guess, *parts[1:]])}?"
    where = where.split(" (", 1)[0]  # the variable is named already
    missing = parts[0].lower()
    return f"unknown setting {name.upper()} ({where}): there is no setting {missing!r}{hint}"


def _closest(word: str, options: list[str]) -> str | None:
    found = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return found[0] if found else None


def _fields_at(loc: tuple[str, ...]) -> list[str]:
    model: type[BaseModel] | None = Settings
    for part in loc:
        field = model.model_fields.get(part) if model is not None else None
        model = section_model(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _origin_of(path: tuple[str, ...], origins: Mapping[str, str]) -> str:
    for n in range(len(path), 0, -1):
        found = origins.get(".".join(path[:n]))
        if found:
            return found
    below = sorted({v for k, v in origins.items() if k.startswith(".".join(path) + ".")})
    return ", ".join(below) if below and path else "default"


def _label(kind: str, path: tuple[str, ...], origin: str, toml: Path | None) -> str:
    if kind == "init":
        return origin
    if kind == "toml":
        return f"TOML file {toml.resolve() if toml else '?'}"
    if path[0].upper().startswith(_PREFIX):  # an unknown variable, under its own name
        name = path[0].upper()
    else:
        name = _PREFIX + "__".join(path).upper()
    if kind == "env":
        return f"environment ({name})"
    return f".env file {Path('.env').resolve()} ({name})"


def _leaf_paths(
    model: type[BaseModel] | None, data: Mapping[str, Any]
) -> Iterator[tuple[str, ...]]:
    for key, value in data.items():
        field = model.model_fields.get(key) if model is not None else None
        section = section_model(field.annotation) if field is not None else None
        if section is not None and isinstance(value, Mapping):
            yield from ((key, *rest) for rest in _leaf_paths(section, value))
        else:
            yield (key,)


def _secret_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if ann is SecretStr or SecretStr in typing.get_args(ann):
            out.add(key)
        section = section_model(ann)
        if section is not None:
            out |= _secret_keys(section, key + ".")
    return out


def _mask_url(value: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password; anything else as is."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if parts.password is None:
        return value
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:{MASK}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
