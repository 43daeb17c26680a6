"""What a team memory shares beside its entries (issue #14): the reference log and task state.

On files these are `.memctl/refs.log` (with `.memctl/refs.offset`) and `working/<id>.json`,
one machine's own. On a server memory every machine's searches record their references in
`refs` and every machine's agents save their tasks in `tasks` (tables of the "longterm"
component, `memctl.longterm.pg_schema`), so a dream run anywhere folds every machine's
references, and a task saved on one machine is resumed on another.

The functions take a connection-like `conn` (its `execute`) and the schema: the search path
passes its index connection, so recording references costs no second connection.
"""

from __future__ import annotations

REFS_LOCK = "SHARE"  # taken while a dream reads: waits for references being inserted to commit


def server_of(layout):
    """The memory's server connection (`pg_conn.Server`) when `[store] backend = "postgres"`,
    else None (its references and tasks are files)."""
    from memctl.core.config import load_settings

    settings = load_settings(layout.root)
    if settings.get("store", "backend") != "postgres":
        return None
    from memctl.longterm.store import open_store

    return open_store(layout, settings).server


def record_refs(conn, schema: str, ids: list[str], when: str) -> None:
    """One row per referenced id (a search's or a compose's L5 hits)."""
    if ids:
        conn.execute(f"INSERT INTO {schema}.refs (at, id) SELECT %s, unnest(%s::text[])", (when, list(ids)))


def read_refs(conn, schema: str) -> list[tuple[int, str, str]]:
    """Every (seq, time, id) row in seq order. Inside the caller's transaction, the table is
    share-locked first: a seq is allocated before its row commits, so without the lock a row
    committed late below the last seq read would be skipped."""
    conn.execute(f"LOCK TABLE {schema}.refs IN {REFS_LOCK} MODE")
    return conn.execute(f"SELECT seq, at, id FROM {schema}.refs ORDER BY seq").fetchall()


def refs_cursor(conn, schema: str) -> int:
    return int(conn.execute(f"SELECT seq FROM {schema}.refs_cursor").fetchone()[0])


def set_refs_cursor(conn, schema: str, seq: int) -> None:
    conn.execute(f"UPDATE {schema}.refs_cursor SET seq = %s", (seq,))


def task_record(conn, schema: str, task_id: str) -> str | None:
    """The task's record (the JSON a task file holds), or None."""
    row = conn.execute(f"SELECT record FROM {schema}.tasks WHERE id = %s", (task_id,)).fetchone()
    return None if row is None else row[0]


def task_records(conn, schema: str) -> list[tuple[str, str]]:
    return [(i, r) for i, r in conn.execute(f"SELECT id, record FROM {schema}.tasks ORDER BY id").fetchall()]


def save_task(conn, schema: str, task_id: str, record: str) -> None:
    conn.execute(f"INSERT INTO {schema}.tasks (id, record) VALUES (%s, %s) "
                 "ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record", (task_id, record))


def drop_task(conn, schema: str, task_id: str) -> None:
    conn.execute(f"DELETE FROM {schema}.tasks WHERE id = %s", (task_id,))
