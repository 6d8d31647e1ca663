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
from hybridsag.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConsistencyError",
    "DenseError",
    "FusedHit",
    "Hit",
    "HybridSagError",
    "IndexMismatchError",
    "IngestError",
    "InputError",
    "JudgeError",
    "JudgeResponseError",
    "JudgeTimeoutError",
    "LexicalError",
    "QueryError",
    "Settings",
    "StoreError",
    "__version__",
]
