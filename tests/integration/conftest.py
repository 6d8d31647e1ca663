"""Fixtures for integration tests.

``milvus_server``: the URI of a real Milvus standalone 2.3.5 (PyPI package ``milvus``) started once
per session and killed at its end; skipped only when that package is not installed. The process
handling lives in :mod:`tests.milvusserver`, so that other test folders (the dense conformance
suite) import the same fixture and share the same server.
"""

from __future__ import annotations

from tests.milvusserver import milvus_server

__all__ = ["milvus_server"]
