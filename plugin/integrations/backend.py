"""The adapters' backend, kept importable under its old name: everything here lives in
:mod:`hybridsag.backend` (the one way in for every face) and :mod:`hybridsag.integrations`
(what only the adapters share). New code imports from those."""

from hybridsag.backend import (
    MAX_QUERY_CHARS,
    LocalBackend,
    QueryValueError,
    RemoteBackend,
    SearchBackend,
    SearchOptions,
    make_backend,
)
from hybridsag.integrations import EXPLAIN_KEYS, ExtraMissingError, missing_extra, result_metadata

__all__ = [
    "EXPLAIN_KEYS",
    "ExtraMissingError",
    "LocalBackend",
    "MAX_QUERY_CHARS",
    "QueryValueError",
    "RemoteBackend",
    "SearchBackend",
    "SearchOptions",
    "make_backend",
    "missing_extra",
    "result_metadata",
]
