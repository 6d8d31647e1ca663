"""The ``reconcile_lease`` table's statements (the table is made by the store's migration
``0003_reconcile_lease``): one row per lease name, held by ``owner`` until ``expires_at`` (epoch
seconds). What a lease means (who may take it, when it is lost) is
:class:`hybridsag.consistency.Lease`'s; these are its reads and writes, each one statement on
``conn``, a connection of the caller's (a write transaction's for the writes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["LeaseRow", "drop_lease", "extend_lease", "read_lease", "write_lease"]


class LeaseRow(NamedTuple):
    """A lease row: who holds it, since when and until when (epoch seconds)."""

    owner: str
    acquired_at: float
    expires_at: float


def read_lease(conn: Any, name: str) -> LeaseRow | None:
    """The row of the lease ``name``, or None when nobody holds it."""
    row = conn.execute(
        "SELECT owner, acquired_at, expires_at FROM reconcile_lease WHERE name = ?", (name,)
    ).fetchone()
    return None if row is None else LeaseRow._make(row)


def write_lease(conn: Any, name: str, owner: str, acquired_at: float, expires_at: float) -> None:
    """Make ``owner`` the holder of the lease ``name`` (the row made or replaced)."""
    conn.execute(
        "INSERT INTO reconcile_lease(name, owner, acquired_at, expires_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, "
        "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
        (name, owner, acquired_at, expires_at),
    )


def extend_lease(conn: Any, name: str, owner: str, expires_at: float) -> bool:
    """Move the expiry of the lease ``name`` to ``expires_at`` if ``owner`` holds it; whether
    it did."""
    cur = conn.execute(
        "UPDATE reconcile_lease SET expires_at = ? WHERE name = ? AND owner = ?",
        (expires_at, name, owner),
    )
    return bool(cur.rowcount == 1)


def drop_lease(conn: Any, name: str, owner: str) -> None:
    """Remove the lease ``name`` if ``owner`` holds it (nothing otherwise)."""
    conn.execute("DELETE FROM reconcile_lease WHERE name = ? AND owner = ?", (name, owner))
