"""The system of record: the store (SQLite or PostgreSQL; ``store``, over ``dialect`` and
``postgres``), resource and chunk identity (``keys``), the schema and its migrations
(``schema``), the records a read returns (``rows``), who may see what (``filters``), the ledger
that owns the record's state, the reads a lexical index makes of the record tables
(``index_reads``), the reconcile lease's rows (``lease``), write-claim owners and the service
lock. Every SQL statement on the record tables lives in this package.
"""

__all__: list[str] = []
