"""The reconciler's single-flight lease: one row in the store's ``reconcile_lease`` table, read
and written through :mod:`hybridsag.records.lease` (which holds its SQL).

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
from hybridsag.records.lease import drop_lease, extend_lease, read_lease, write_lease
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
        row = self._sql(lambda c: read_lease(c, self.name))
        if row is None:
            return None
        return {
            "owner": row.owner,
            "acquired_at": row.acquired_at,
            "expires_at": row.expires_at,
            "expired": row.expires_at <= self._clock(),
        }

    def acquire(self) -> None:
        """Take the lease (or extend it when this owner holds it).

        Raises:
            ConsistencyError: another owner holds an unexpired lease (and is not a process of
                this host that is gone).
        """
        now = self._clock()

        def take(conn: Any) -> None:
            row = read_lease(conn, self.name)
            held = row is not None and row.owner != self.owner and row.expires_at > now
            if row is not None and held and owner_gone(row.owner):
                log.warning(
                    "taking over the reconcile lease of %r (until %s): its process is gone "
                    "from this host",
                    row.owner,
                    _iso(row.expires_at),
                )
            elif row is not None and held:
                raise ConsistencyError(
                    f"another reconcile holds the lease: owner {row.owner!r} until "
                    f"{_iso(row.expires_at)} ({row.expires_at - now:.0f} s from now; "
                    f"consistency.lease_s={self.ttl_s:g}); "
                    "wait for it to finish, or for the lease to expire if it crashed"
                )
            write_lease(conn, self.name, self.owner, now, now + self.ttl_s)

        self._write(take)

    def renew(self) -> None:
        """Push the expiry ``ttl_s`` ahead.

        Raises:
            ConsistencyError: the lease is no longer this owner's (it expired and was taken).
        """
        now = self._clock()

        def extend(conn: Any) -> None:
            if not extend_lease(conn, self.name, self.owner, now + self.ttl_s):
                row = read_lease(conn, self.name)
                who = "nobody" if row is None else repr(row.owner)
                raise ConsistencyError(
                    f"the reconcile lease of {self.owner!r} was lost (now held by {who}); "
                    f"a batch ran longer than consistency.lease_s={self.ttl_s:g}: raise it"
                )

        self._write(extend)

    def release(self) -> None:
        """Drop the lease if this owner holds it (no error otherwise)."""
        self._write(lambda c: drop_lease(c, self.name, self.owner))

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
