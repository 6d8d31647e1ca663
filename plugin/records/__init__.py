"""The system of record: the store (SQLite or PostgreSQL), the ledger that owns the record's state,
write-claim owners and the service lock.
"""

__all__: list[str] = []
