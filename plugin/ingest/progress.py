"""How an ingest reports its progress: :class:`IngestProgress` and :func:`as_progress`.

Apart from the write path so that the CLI can define
its progress bars without importing the write path, the chunker or the dense side.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["IngestProgress", "as_progress"]


class IngestProgress:
    """What an ingest tells as it goes; every hook is a no-op here, a progress bar overrides
    the ones it shows. Called from one thread: the one that stages the batches (the ingesting
    thread, or the stager thread of an ingest of several batches)."""

    def start(self, documents: int | None) -> None:
        """The ingest expects ``documents`` items (``None``: not known in advance)."""

    def prepared(self, documents: int, chunks: int) -> None:
        """``documents`` more items are done with reading and chunking (skipped, unchanged or
        failed ones count with ``chunks`` 0)."""

    def embedding(self, chunks: int) -> None:
        """``chunks`` more chunks are about to be embedded."""

    def embedded(self, chunks: int) -> None:
        """``chunks`` more chunks were embedded."""


class _CountProgress(IngestProgress):
    """A plain callable given the number of documents done, as an :class:`IngestProgress`."""

    def __init__(self, tick: Callable[[int], None]) -> None:
        self.tick = tick

    def prepared(self, documents: int, chunks: int) -> None:
        if documents:
            self.tick(documents)


def as_progress(progress: IngestProgress | Callable[[int], None] | None) -> IngestProgress:
    """``progress`` as an :class:`IngestProgress` (a callable counts documents; ``None`` is
    silent)."""
    if progress is None:
        return IngestProgress()
    if isinstance(progress, IngestProgress):
        return progress
    return _CountProgress(progress)
