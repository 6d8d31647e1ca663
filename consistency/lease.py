"""The reconciler's single-flight lease: one row in the store's ``reconcile_lease`` table.

A lease has an owner id (``host:pid:random``) and an expiry (``consistency.lease_s`` from now).
:meth:`Lease.acquire` takes it when no row exists, when the row is expired (its owner crashed),
when its owner is a process of this host that is gone (killed with SIGKILL: no need to wait out
the expiry), or when this owner already holds it; otherwise it raises :class:`~hybridsag.errors.ConsistencyError` naming the
holder and the expiry. A long apply calls :meth:`Lease.renew` between batches; a renew that finds
the lease taken by someone else raises, so two reconcilers never mutate at once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from hybridsag.consistency.plan import owner_alive
from hybridsag.errors import ConsistencyError, StoreError
from hybridsag.records.store import Store

__all__ = ["LEASE_NAME", "Lease", "new_owner_id", "owner_gone"]

log = logging.getLogger(__name__)

#: The row name of the reconcile lease.
LEASE_NAME = "reconcile"


def new_owner_id() -> str:
    """``host:pid:random`` — unique per reconciler instance, readable in errors and reports."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str) -> bool:
    """Whether ``owner`` (a :func:`new_owner_id`) names a process of this host that no longer
    exists (:func:`~hybridsag.consistency.plan.owner_alive`). An owner of another host, or one
    in another form, is never taken for gone: only its lease's expiry frees it."""
    host, _, rest = owner.partition(":")
    pid, _, _random = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return not owner_alive(int(pid))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


class Lease:
    """A named lease in ``store`` held by ``owner`` for ``ttl_s`` seconds at a time.

    Example::

        lease = Lease(store, ttl_s=600)
        with lease.held():          # ConsistencyError when another live owner holds it
            ...
            lease.renew()           # between batches of a long run
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: float,
        owner: str | None = None,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s={ttl_s!r} must be > 0")
        self.store = store
        self.ttl_s = float(ttl_s)
        self.owner = owner or new_owner_id()
        self.name = name
        self._clock = clock

    def holder(self) -> dict[str, Any] | None:
        """The lease row (owner, acquired_at, expires_at, expired) or None when nobody holds it."""
        row = self._sql(
            lambda c: c.execute(
                "SELECT owner, acquired_at, expires_at FROM reconcile_lease WHERE name = ?",
                (self.name,),
            ).fetchone()
        )
        if row is None:
            return None
        return {
            "owner": row[0],
            "acquired_at": row[1],
            "expires_at": row[2],
            "expired": row[2] <= self._clock(),
        }

    def acquire(self) -> None:
        """Take the lease (or extend it when this owner holds it).

        Raises:
            ConsistencyError: another owner holds an unexpired lease (and is not a process of
                this host that is gone).
        """
        now = self._clock()

        def take(conn: Any) -> None:
            row = conn.execute(
                "SELECT owner, expires_at FROM reconcile_lease WHERE name = ?", (self.name,)
            ).fetchone()
            if row is not None and row[0] != self.owner and row[1] > now and owner_gone(row[0]):
                log.warning(
                    "taking over the reconcile lease of %r (until %s): its process is gone "
                    "from this host",
                    row[0],
                    _iso(row[1]),
                )
            elif row is not None and row[0] != self.owner and row[1] > now:
                raise ConsistencyError(
                    f"another reconcile holds the lease: owner {row[0]!r} until {_iso(row[1])} "
                    f"({row[1] - now:.0f} s from now; consistency.lease_s={self.ttl_s:g}); "
                    "wait for it to finish, or for the lease to expire if it crashed"
                )
            conn.execute(
                "INSERT INTO reconcile_lease(name, owner, acquired_at, expires_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                (self.name, self.owner, now, now + self.ttl_s),
            )

        self._write(take)

    def renew(self) -> None:
        """Push the expiry ``ttl_s`` ahead.

        Raises:
            ConsistencyError: the lease is no longer this owner's (it expired and was taken).
        """
        now = self._clock()

        def extend(conn: Any) -> None:
            cur = conn.execute(
                "UPDATE reconcile_lease SET expires_at = ? WHERE name = ? AND owner = ?",
                (now + self.ttl_s, self.name, self.owner),
            )
            if cur.rowcount != 1:
                row = conn.execute(
                    "SELECT owner FROM reconcile_lease WHERE name = ?", (self.name,)
                ).fetchone()
                who = "nobody" if row is None else repr(row[0])
                raise ConsistencyError(
                    f"the reconcile lease of {self.owner!r} was lost (now held by {who}); "
                    f"a batch ran longer than consistency.lease_s={self.ttl_s:g}: raise it"
                )

        self._write(extend)

    def release(self) -> None:
        """Drop the lease if this owner holds it (no error otherwise)."""
        self._write(
            lambda c: c.execute(
                "DELETE FROM reconcile_lease WHERE name = ? AND owner = ?", (self.name, self.owner)
            )
        )

    @contextmanager
    def held(self) -> Iterator[Lease]:
        """Acquire, yield, release (also on error)."""
        self.acquire()
        try:
            yield self
        finally:
            self.release()

    # -- plumbing --------------------------------------------------------------------------------

    def _write(self, fn: Callable[[Any], Any]) -> None:
        try:
            with self.store.atomic() as conn:
                fn(conn)
        except self.store.errors as exc:
            raise StoreError(f"reconcile lease on {self.store.name}: {exc}") from exc

    def _sql(self, fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(self.store.connection())
        except self.store.errors as exc:
            raise StoreError(f"reconcile lease on {self.store.name}: {exc}") from exc
