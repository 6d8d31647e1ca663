"""What every settings section is built on: :class:`Section` (frozen, unknown keys refused,
input values never shown in an error), :class:`RemoteSection` (a remote endpoint's URL, key and
timeouts) and :func:`comma_list` (a list setting as people type it)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = [
    "RemoteSection",
    "Section",
    "comma_list",
    "named_folder",
]


class Section(BaseModel):
    """The base of every settings section: frozen, unknown keys refused, and no input value in
    a validation error's text."""

    # hide_input_in_errors: a ValidationError's text never shows a value (a secret may be one)
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class RemoteSection(Section):
    """What every remote model endpoint is set up with (the HTTP embedders, the reranker and chat
    judges; :mod:`hybridsag.remote_calls`): the server's root ``base_url``, ``path`` (None: the
    endpoint kind's usual path), the bearer ``api_key`` (a secret, optional), the timeouts, the
    retries on 408/429/5xx (``backoff_s`` doubling, a ``Retry-After`` longer than
    ``max_retry_wait_s`` ends them) and the requests in flight at once."""

    #: the server's root URL (required where the endpoint is used)
    base_url: str | None = None
    #: the endpoint's path, appended to ``base_url`` (starts with ``/``); None: the usual one
    path: str | None = None
    #: the bearer key, optional (set it in the environment or ``.env``)
    api_key: SecretStr | None = None
    #: seconds per call
    timeout_s: float = Field(30.0, gt=0, le=600)
    #: seconds to connect
    connect_timeout_s: float = Field(5.0, gt=0, le=600)
    #: retries on 408/429/5xx and transport errors
    max_retries: int = Field(3, ge=0, le=20)
    #: the first retry's wait in seconds, doubling
    backoff_s: float = Field(0.5, ge=0, le=60)
    #: a longer ``Retry-After`` ends the retries
    max_retry_wait_s: float = Field(30.0, ge=0, le=3600)
    #: requests in flight at once
    max_in_flight: int = Field(4, ge=1, le=64)

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"path {value!r} must start with '/' (it is appended to base_url)")
        return value


def comma_list(value: object) -> object:
    """A list setting as people type it: ``"bm25, title"`` or ``'["bm25", "title"]'`` become
    ``["bm25", "title"]``; anything that is not a string is returned as is (ValueError for a
    string that starts like JSON but does not parse).

    Args:
        value: The value as a source gave it.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not a JSON list ({exc.msg}); write a,b or [\"a\", \"b\"]") from None
    return [part.strip() for part in text.split(",") if part.strip()]


def named_folder(value: object, empty: str) -> object:
    """``value`` (a folder setting before validation); ValueError ``empty`` when it is blank."""
    if isinstance(value, str | Path) and not str(value).strip():
        raise ValueError(empty)
    return value
