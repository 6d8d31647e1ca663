"""The dense side: the ``Embedder`` contract and its backends, the embedding cache, and the
``DenseIndex`` contract with its Milvus adapter.
"""

__all__: list[str] = []
