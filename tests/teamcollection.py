"""A team's own Milvus collection, made in the Milvus Lite of a data dir, for attach-mode tests:
``id`` (VARCHAR primary key), ``resource_id``, ``text``, ``title`` and a ``vector`` of ``dim``
floats under an HNSW COSINE index, with the rows given (dicts of those fields)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hybridsag.milvus_client import lite_path
from hybridsag.settings import Settings

__all__ = ["create_team_collection"]


def create_team_collection(
    settings: Settings, rows: Sequence[Mapping[str, Any]], *, dim: int, name: str = "team_docs"
) -> None:
    """Create collection ``name`` with ``rows`` in ``settings``' Milvus Lite, then release the
    embedded server so that hybridsag can open the same folder."""
    from milvus_lite.server_manager import server_manager_instance
    from pymilvus import DataType, MilvusClient

    path = lite_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    client = MilvusClient(str(path))
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("resource_id", DataType.VARCHAR, max_length=64)
    schema.add_field("text", DataType.VARCHAR, max_length=512)
    schema.add_field("title", DataType.VARCHAR, max_length=128)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    index = client.prepare_index_params()
    index.add_index(field_name="vector", index_type="HNSW", metric_type="COSINE",
                    params={"M": 16, "efConstruction": 200})  # fmt: skip
    client.create_collection(name, schema=schema, index_params=index)
    client.insert(name, [dict(row) for row in rows])
    client.close()
    server_manager_instance.release_server(str(path.resolve()))
