"""The schema of the system of record: the statuses a resource moves through and the named
migrations (:data:`MIGRATIONS`, applied in order by :meth:`~hybridsag.records.store.Store.migrate`
and recorded in the ``migrations`` table, :data:`MIGRATIONS_TABLE`) that create and change
``resources``, ``chunks``, ``chunk_vectors``, ``tombstones``, ``journal``, ``meta``,
``reconcile_lease`` and ``exclusions``. Each migration is written once, in the common part of
SQLite's and PostgreSQL's dialects (a backend's :meth:`~hybridsag.records.dialect.Backend.schema`
maps the column types).
"""

from __future__ import annotations

from hybridsag.records.keys import KEY_SEP

__all__ = [
    "BACKFILL_BATCH",
    "BACKFILL_META",
    "MIGRATIONS",
    "MIGRATIONS_TABLE",
    "SEARCHABLE_STATUSES",
    "STATUSES",
]

STATUSES = ("indexing", "ready", "failed", "disabled", "deleting")
#: Statuses a caller may ask to search; ``indexing``/``failed``/``deleting`` never are.
SEARCHABLE_STATUSES = ("ready", "disabled")

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_initial",
        f"""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE resources(
            id INTEGER PRIMARY KEY,
            resource_id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL DEFAULT '',
            title_norm TEXT NOT NULL DEFAULT '',
            source_uri TEXT,
            source_mtime_ns INTEGER,
            source_size INTEGER,
            content_sha256 TEXT NOT NULL DEFAULT '',
            tenant TEXT NOT NULL DEFAULT '',
            acl TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            status TEXT NOT NULL CHECK (status IN {STATUSES!r}),
            version INTEGER NOT NULL DEFAULT 0,
            pending_version INTEGER,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            error TEXT
        );
        CREATE INDEX resources_title_norm ON resources(title_norm);
        CREATE INDEX resources_status ON resources(status, tenant);
        CREATE TABLE chunks(
            id INTEGER PRIMARY KEY,
            chunk_id TEXT NOT NULL UNIQUE,
            resource_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            ordinal INTEGER NOT NULL,
            heading_path TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL,
            byte_start INTEGER NOT NULL,
            byte_end INTEGER NOT NULL,
            content_sha256 TEXT NOT NULL
        );
        CREATE INDEX chunks_resource ON chunks(resource_id, version, ordinal);
        CREATE TABLE tombstones(
            resource_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            deleted_at REAL NOT NULL
        );
        CREATE TABLE journal(
            id INTEGER PRIMARY KEY,
            op TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            step TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            detail TEXT
        );
        CREATE INDEX journal_resource ON journal(resource_id);
        """,
    ),
    (
        # Passage vectors beside the chunks, so the offline judge reads a candidate's vector
        # with one SQL query instead of a Milvus round trip; deleted with their chunk.
        "0002_chunk_vectors",
        """
        CREATE TABLE chunk_vectors(
            id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
            vector BLOB NOT NULL
        );
        """,
    ),
    (
        # Single-flight lease of the reconciler (hybridsag.consistency): one row per lease name,
        # held by ``owner`` until ``expires_at`` (epoch seconds); an expired lease may be taken.
        "0003_reconcile_lease",
        """
        CREATE TABLE reconcile_lease(
            name TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            acquired_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        """,
    ),
    (
        # The folder a folder resource's id is relative to (NULL: API or JSONL ingest), so a
        # re-index prunes only its own folder's resources. Resources indexed from a folder
        # before (a source file recorded with its stat) get it from their source path, which
        # is that folder joined with their id.
        "0004_source_root",
        """
        ALTER TABLE resources ADD COLUMN source_root TEXT;
        UPDATE resources SET source_root = substr(source_uri, 1,
                length(source_uri) - length(resource_id) - 1)
            WHERE source_mtime_ns IS NOT NULL AND source_uri IS NOT NULL
              AND length(source_uri) > length(resource_id) + 1
              AND substr(source_uri, length(source_uri) - length(resource_id)) = '/' || resource_id;
        CREATE INDEX resources_source_root ON resources(source_root);
        """,
    ),
    (
        # Identity becomes (tenant, resource_id) (see the module docstring). A tenant's
        # resource was keyed by its id; it is keyed by tenant + KEY_SEP + id from now on, in
        # every table. Its tombstone (a delete in flight) is copied to the new key. The old key
        # keeps a tombstone at the highest version the resource reached, so a resource of
        # tenant "" with that id never makes one of its chunk ids again (chunk ids are kept, as
        # are the Milvus rows, which already carry the id and the tenant apart). Rows of tenant
        # "" are left as they are.
        "0005_tenant_keys",
        f"""
        INSERT INTO tombstones(resource_id, version, deleted_at)
            SELECT r.tenant || '{KEY_SEP}' || t.resource_id, t.version, t.deleted_at
            FROM tombstones t JOIN resources r ON r.resource_id = t.resource_id
            WHERE r.tenant <> '';
        UPDATE tombstones SET version = (
                SELECT CASE WHEN r.pending_version > r.version THEN r.pending_version
                            ELSE r.version END
                FROM resources r WHERE r.resource_id = tombstones.resource_id)
            WHERE EXISTS (
                SELECT 1 FROM resources r
                WHERE r.resource_id = tombstones.resource_id AND r.tenant <> ''
                  AND (r.version > tombstones.version OR r.pending_version > tombstones.version));
        INSERT INTO tombstones(resource_id, version, deleted_at)
            SELECT r.resource_id,
                   CASE WHEN r.pending_version > r.version THEN r.pending_version
                        ELSE r.version END,
                   r.updated_at
            FROM resources r
            WHERE r.tenant <> ''
              AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.resource_id = r.resource_id);
        UPDATE journal SET resource_id = (
                SELECT r.tenant || '{KEY_SEP}' || r.resource_id FROM resources r
                WHERE r.resource_id = journal.resource_id)
            WHERE resource_id IN (SELECT resource_id FROM resources WHERE tenant <> '');
        UPDATE chunks SET resource_id = (
                SELECT r.tenant || '{KEY_SEP}' || r.resource_id FROM resources r
                WHERE r.resource_id = chunks.resource_id)
            WHERE resource_id IN (SELECT resource_id FROM resources WHERE tenant <> '');
        UPDATE resources SET resource_id = tenant || '{KEY_SEP}' || resource_id
            WHERE tenant <> '';
        """,
    ),
    (
        # Deletes that stay: a folder file deleted by hand while it still exists is excluded
        # from its folder (tenant, the root its id is relative to, that id), so the next index,
        # sync, watch or reconcile of the folder leaves it out; the resource's ACL is kept for
        # the day the exclusion is lifted (hybridsag include).
        "0006_exclusions",
        """
        CREATE TABLE exclusions(
            tenant TEXT NOT NULL,
            source_root TEXT NOT NULL,
            path TEXT NOT NULL,
            acl TEXT NOT NULL DEFAULT '[]',
            excluded_at REAL NOT NULL,
            PRIMARY KEY (tenant, source_root, path)
        );
        """,
    ),
    (
        # The SHA-256 of a folder resource's source file as it was read (its bytes, before
        # decoding or conversion; NULL: API or JSONL ingest, or indexed before this), so that a
        # folder sync through the service (hybridsag.ingest.manifest) asks only for files whose bytes
        # it does not hold, and an audit can tell a changed file from a touched one.
        "0007_source_sha256",
        """
        ALTER TABLE resources ADD COLUMN source_sha256 TEXT;
        """,
    ),
    (
        # What fusion reads of a chunk's text, computed once when it is written
        # (hybridsag.fusion.facts.chunk_facts): the script of its prose ('' when none
        # dominates), whether it is only headings (0/1) and its word shingles (sorted uint32,
        # little-endian). NULL until computed: the chunks of an index written before this are
        # filled in by Store.backfill_chunk_facts when the store opens (meta key
        # chunk_facts_backfill says it is still to do); a search reads a NULL row's facts
        # from its text meanwhile.
        "0008_chunk_facts",
        """
        ALTER TABLE chunks ADD COLUMN script TEXT;
        ALTER TABLE chunks ADD COLUMN heading_only INTEGER;
        ALTER TABLE chunks ADD COLUMN shingles BLOB;
        INSERT INTO meta(key, value) VALUES ('chunk_facts_backfill', 'pending')
            ON CONFLICT(key) DO NOTHING;
        """,
    ),
)

#: The meta key that says chunks written before ``0008_chunk_facts`` may still lack their
#: facts (:meth:`Store.backfill_chunk_facts` removes it when none does).
BACKFILL_META = "chunk_facts_backfill"
#: Chunks whose facts one backfill transaction writes.
BACKFILL_BATCH = 1000

#: The table that records which migrations a store has applied.
MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
)
