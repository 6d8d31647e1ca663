"""The dense index registry: backend name -> factory (:data:`DENSE_INDEXES`) and
:func:`make_dense_index`, which the composition root calls.

The dense side, one module per job: the ``DenseIndex`` contract, its row and filter types and
:func:`~hybridsag.vectors.contract.check_vector` (:mod:`hybridsag.vectors.contract`); the Milvus
adapter (:mod:`hybridsag.vectors.milvus_dense`: Milvus Lite, a Milvus server, or a team's
collection); the exact in-process index (:mod:`hybridsag.vectors.exact`).

The names this module held before that split (:data:`MOVED`) still import from here for one
release, with a :class:`DeprecationWarning` naming their new home.
"""

from __future__ import annotations

from hybridsag.errors import ConfigError
from hybridsag.lazy import moved_names
from hybridsag.settings import Settings
from hybridsag.vectors import contract, milvus_dense

__all__ = ["DENSE_INDEXES", "make_dense_index"]

#: The names this module held before the dense side was split by job (issue 41), each with the
#: module that owns it now. Imported from here they still work for one release, with a
#: :class:`DeprecationWarning` that names the new home.
MOVED: dict[str, str] = {
    **dict.fromkeys(
        ("PATH", "DenseFilter", "DenseIndex", "DenseIndexFactory", "VectorRow", "check_vector"),
        "hybridsag.vectors.contract",
    ),
    **dict.fromkeys(
        ("LEGACY_COLLECTION", "MilvusDenseIndex", "OWNER_PROPERTY", "default_collection",
         "filter_expression"),
        "hybridsag.vectors.milvus_dense",
    ),
}


__getattr__ = moved_names(__name__, MOVED)


#: Backend name -> factory.
DENSE_INDEXES: dict[str, contract.DenseIndexFactory] = {"milvus": milvus_dense.MilvusDenseIndex}


def make_dense_index(
    settings: Settings, *, index_id: str | None = None, backend: str = "milvus"
) -> contract.DenseIndex:
    """Build the dense index backend named ``backend`` (only ``milvus`` ships) for the index
    ``index_id`` (the data dir's, from :class:`~hybridsag.components.Components`).

    Nothing connects until ``ensure()``.

    Raises:
        ConfigError: unknown backend; the message lists the valid ones.
    """
    try:
        factory = DENSE_INDEXES[backend]
    except KeyError:
        raise ConfigError(
            f"unknown dense index backend {backend!r}; valid: {sorted(DENSE_INDEXES)}"
        ) from None
    return factory(settings, index_id=index_id)
