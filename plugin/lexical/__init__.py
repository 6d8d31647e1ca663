"""The lexical side: the one tokenizer, the ``LexicalIndex`` contract and its backends (FTS5 and
PostgreSQL in the store, Milvus full-text search).
"""

__all__: list[str] = []
