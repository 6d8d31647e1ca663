"""hybridsag: a hybrid search plugin (SAG2 lexical-judge, dense Milvus, title) with RRF fusion."""

from hybridsag.errors import (
    ConfigError,
    ConsistencyError,
    DenseError,
    HybridSagError,
    IndexMismatchError,
    IngestError,
    InputError,
    JudgeError,
    JudgeResponseError,
    JudgeTimeoutError,
    LexicalError,
    QueryError,
    StoreError,
)
from hybridsag.fusion.types import FusedHit, Hit
from hybridsag.search import HybridSearch, SearchResponse, SearchResult
from hybridsag.settings import Settings
from hybridsag.store import Filters

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConsistencyError",
    "DenseError",
    "Filters",
    "FusedHit",
    "Hit",
    "HybridSagError",
    "HybridSearch",
    "IndexMismatchError",
    "IngestError",
    "InputError",
    "JudgeError",
    "JudgeResponseError",
    "JudgeTimeoutError",
    "LexicalError",
    "QueryError",
    "SearchResponse",
    "SearchResult",
    "Settings",
    "StoreError",
    "__version__",
]
