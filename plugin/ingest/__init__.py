"""Ingest: what turns files and records into indexed resources (sources, formats, front matter, the
chunker, folder sync and the write path). A search never loads it.
"""

__all__: list[str] = []
