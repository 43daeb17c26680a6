"""The server tables of the entry store (component "longterm" of a memory's schema, issue #14).

Step i creates version i+1 (`memctl.core.pg.migrate`); a step is never edited once released,
a change is a new step. `memctl init` applies them (with the other components' steps, see
`memctl.ops.server`); every other command only checks the version.

The contract with the search index on the server (component "recall", which reads these
tables to index L5 and L6):
- `entries`: one row per line of L5 (`part = 'active'`) or L6 (`'archive'`); `raw` is the line
  exactly as the file backend writes it (newline included; bytea, since a line may hold bytes
  PostgreSQL text refuses), the file order is `ORDER BY seq`; the other columns are lookups
  (`id` is '' for a line that is not an entry). `merge_key` is set for active entries of a
  merge-policy type and unique among them.
- `entry_parts`: in the same transaction as any change to a part, an append raises
  `last_seq` and anything else (a line replaced or deleted) bumps `rewrites`. A writer locks
  both rows before it allocates a seq, so seqs of a part become visible in increasing order:
  "every row with seq > the last one I indexed" misses nothing.
- `dream_log`: one row per line of `dream_log.jsonl`, `raw` as the file holds it.
- `refs` (version 2): one row per reference a search or compose recorded, from any machine;
  `refs_cursor.seq` the last one a dream folded (`.memctl/refs.log` and `refs.offset` on
  files); `tasks`: one row per open task, `record` the JSON a `working/<id>.json` holds
  (`memctl.longterm.pg_shared`).
- `near_key`, `key_length` (version 3): the entry's `policies.match_key` and its length, so
  the near-duplicate check reads only the keys of the rows within `policies.reachable_lengths`
  of the new text (an exact bound), not every row of the type, and parses none. NULL (a row
  written before version 3, a line that is not an entry, an id, type or key the lookup
  columns cannot hold exactly): the row is read and parsed. A memctl whose match_key differs
  must add a step that sets both NULL again.
- `hosts`, `purge_orders`, `purge_applied` (version 4, `memctl.longterm.purge_orders`): the
  machines known to the memory (`host:/root/`, as their index sources are keyed), one order
  per purge (its run, time, reason, the ids' content hashes and the scrubbed strings, base64
  as the local purge journal holds them, until every known machine has applied it: then
  NULL), and which machine applied which order.
"""

from __future__ import annotations

COMPONENT = "longterm"

STEPS = [
    """
    CREATE TABLE {schema}.entries (
        seq bigserial PRIMARY KEY,
        part text NOT NULL CHECK (part IN ('active', 'archive')),
        id text NOT NULL,
        type text,
        topic text,
        reason text,
        fingerprint text,
        merge_key text,
        raw bytea NOT NULL
    );
    CREATE INDEX entries_part_id ON {schema}.entries (part, id);
    CREATE INDEX entries_part_type ON {schema}.entries (part, type);
    CREATE INDEX entries_fingerprint ON {schema}.entries (fingerprint) WHERE part = 'archive';
    CREATE INDEX entries_reason ON {schema}.entries (part, reason);
    CREATE UNIQUE INDEX entries_active_merge_key ON {schema}.entries (merge_key)
        WHERE part = 'active' AND merge_key IS NOT NULL;
    CREATE TABLE {schema}.entry_parts (
        part text PRIMARY KEY,
        last_seq bigint NOT NULL DEFAULT 0,
        rewrites bigint NOT NULL DEFAULT 0
    );
    INSERT INTO {schema}.entry_parts (part) VALUES ('active'), ('archive');
    CREATE TABLE {schema}.dream_log (
        seq bigserial PRIMARY KEY,
        raw bytea NOT NULL
    );
    """,
    """
    CREATE TABLE {schema}.refs (
        seq bigserial PRIMARY KEY,
        at text NOT NULL,
        id text NOT NULL
    );
    CREATE TABLE {schema}.refs_cursor (
        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
        seq bigint NOT NULL DEFAULT 0
    );
    INSERT INTO {schema}.refs_cursor DEFAULT VALUES;
    CREATE TABLE {schema}.tasks (
        id text PRIMARY KEY,
        record text NOT NULL
    );
    """,
    """
    ALTER TABLE {schema}.entries ADD COLUMN near_key text, ADD COLUMN key_length integer;
    CREATE INDEX entries_part_type_key_length ON {schema}.entries (part, type, key_length);
    """,
    """
    CREATE TABLE {schema}.hosts (
        key text PRIMARY KEY,
        since timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {schema}.purge_orders (
        seq bigserial PRIMARY KEY,
        run text UNIQUE NOT NULL,
        at text NOT NULL,
        origin text NOT NULL,
        reason text NOT NULL,
        hashes jsonb NOT NULL,
        needles text[]
    );
    CREATE TABLE {schema}.purge_applied (
        run text NOT NULL REFERENCES {schema}.purge_orders (run) ON DELETE CASCADE,
        host text NOT NULL,
        at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run, host)
    );
    """,
]
