"""Purge orders: a purge on a team memory reaches every machine's own files (issue #14).

A purge on a server memory erases the rows of every machine at once, but L1-L3, L4 (zips,
`all_histories.txt`, loose sessions) and `.memctl/` are each machine's own files. So the
purge also leaves an order on the server, in the transaction that purges the rows
(`record`): its run, time, reason, the ids' content hashes, and the strings it scrubbed,
base64 as the local purge journal holds them. Every other machine applies the orders it has
not applied (`apply_pending`) before it uploads anything to the shared index and before it
shows what its L4 holds: under its writer lock, from a local purge journal marked `order`
(`memctl.longterm.purge_steps`, the steps of a local purge but the rows'), so a kill at any
point is finished by the next run; then it marks the order applied on the server.

The machines known to a memory are the `hosts` rows, keyed `host:/root/` like their index
sources: a machine registers on `memctl init` and when it first applies orders, and a purge
registers every machine that ever indexed its files (the index's per-machine `config@` meta).
Once every known machine has applied an order its strings are deleted (run, time and hashes
stay for the audit); `retire` forgets a machine that is gone, so its orders stop waiting.

Whether orders wait costs a search nothing: the index's meta, which a refresh reads first
anyway, holds the last order's seq (`purge_orders`) and the last one each machine settled
(`purges_applied@host:/root/`); only when they differ is anything asked of the server.
"""

from __future__ import annotations

ORDERS_META = "purge_orders"  # index_meta: the seq of the last order
APPLIED_META = "purges_applied@"  # index_meta, + the machine's key: the last seq it settled
APPLY_WAIT = 30.0  # seconds a search waits for this machine's writer lock to apply an order


def record(conn, schema: str, journal_record: dict, machine: str) -> int:
    """In the purge's own transaction: the order, applied by the machine that purged; the
    machines known to the index registered. Returns the order's seq."""
    import json

    _register(conn, schema, machine)
    has_meta = _has_index_meta(conn, schema)
    if has_meta:  # every machine that ever indexed its files must apply the order too
        conn.execute(f"INSERT INTO {schema}.hosts (key) SELECT substr(key, length('config@') + 1) FROM "
                     f"{schema}.index_meta WHERE starts_with(key, 'config@') ON CONFLICT DO NOTHING")
    seq = int(conn.execute(
        f"INSERT INTO {schema}.purge_orders (run, at, origin, reason, hashes, needles) "
        "VALUES (%s, %s, %s, %s, %s::jsonb, %s) RETURNING seq",
        (journal_record["run"], journal_record.get("at", ""), machine, journal_record.get("reason", ""),
         json.dumps(journal_record.get("hashes", {}), sort_keys=True), list(journal_record.get("needles", [])))
    ).fetchone()[0])
    _mark_applied(conn, schema, journal_record["run"], machine)
    if has_meta:
        _set_meta(conn, schema, ORDERS_META, str(seq))
    _drop_spent_needles(conn, schema)
    return seq


def behind(meta, machine: str) -> bool:
    """From the index's meta (`meta(key, default)`): orders may wait for this machine."""
    last = meta(ORDERS_META, "")
    return bool(last) and meta(APPLIED_META + machine, "") != last


def apply_pending(layout, conn, schema: str, machine: str) -> tuple[list[str], list[str]]:
    """Every order this machine has not applied, applied to its files and marked on the
    server: (what was applied, what is still pending: a file here that cannot be read)."""
    _register(conn, schema, machine)
    orders = conn.execute(
        f"SELECT o.run, o.at, o.reason, o.needles FROM {schema}.purge_orders o WHERE o.needles IS NOT NULL "
        f"AND NOT EXISTS (SELECT 1 FROM {schema}.purge_applied a WHERE a.run = o.run AND a.host = %s) "
        "ORDER BY o.seq", (machine,)).fetchall()
    last = conn.execute(f"SELECT coalesce(max(seq), 0) FROM {schema}.purge_orders").fetchone()[0]
    applied, pending = [], []
    if orders:
        from memctl.core.fsutil import WriterLock

        with WriterLock(layout.lock, wait_seconds=APPLY_WAIT):
            for run, at, reason, needles in orders:
                outcome = _apply(layout, {"run": run, "at": at, "reason": reason, "needles": list(needles),
                                          "ids": [], "hashes": {}, "order": True})
                if outcome.pending:
                    pending += [f"purge {run} from another machine is pending here: {why}" for why in outcome.pending]
                    continue
                _mark_applied(conn, schema, run, machine)
                applied.append(f"purge {run} from another machine applied here ({len(outcome.files)} files, "
                             f"{len(outcome.l4)} L4 changes)")
    _drop_spent_needles(conn, schema)  # also when a run killed after its last mark left them
    if not pending and _has_index_meta(conn, schema):
        _set_meta(conn, schema, APPLIED_META + machine, str(last))
    return applied, pending


def _apply(layout, order: dict):
    """One order as a local purge of this machine's files, journaled: a kill finishes next run."""
    from memctl.core import faults
    from memctl.longterm import journal, purge_steps

    path = journal.begin(layout, "purge", order["run"], order)
    outcome = purge_steps.run(layout, {**order, "kind": "purge", "name": order["run"]}, path, resumed=True)
    faults.checkpoint("purge-order")
    return outcome


def settle_here(settings) -> list[str]:
    """Before a command that shows this machine's L4 or L1-L3 without a refresh (`show` of a
    session, `recent`, `compose`): the orders waiting for this machine, on a team memory;
    returns what is still pending here."""
    if settings.get("store", "backend") != "postgres":
        return []
    from memctl.core import pg
    from memctl.longterm.pg_conn import translated
    from memctl.longterm.store import open_store

    server = open_store(settings.layout, settings).server
    machine = pg.machine_key(settings.layout.root)
    with translated(server.where):
        if not _has_index_meta(server.conn, server.schema):
            return []
        meta = dict(server.conn.execute(f"SELECT key, value FROM {server.schema}.index_meta WHERE key = ANY(%s)",
                                        ([ORDERS_META, APPLIED_META + machine],)).fetchall())
        if not behind(lambda key, default: meta.get(key, default), machine):
            return []
        return apply_pending(settings.layout, server.conn, server.schema, machine)[1]


def waiting(conn, schema: str) -> list[tuple[str, str, list[str]]]:
    """(run, time, machines that have not applied it) of every order still holding its
    strings (`status`, `verify`)."""
    rows = conn.execute(
        f"SELECT o.run, o.at, array_agg(h.key ORDER BY h.key) FROM {schema}.purge_orders o CROSS JOIN {schema}.hosts h "
        f"WHERE o.needles IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {schema}.purge_applied a WHERE a.run = o.run "
        "AND a.host = h.key) GROUP BY o.seq, o.run, o.at ORDER BY o.seq").fetchall()
    return [(run, at, list(hosts)) for run, at, hosts in rows]


def machines(conn, schema: str) -> list[str]:
    return [key for (key,) in conn.execute(f"SELECT key FROM {schema}.hosts ORDER BY key").fetchall()]


def register(conn, schema: str, machine: str) -> None:
    """`memctl init`: this machine is one of the memory's (a purge anywhere waits for it)."""
    _register(conn, schema, machine)


def retire(conn, schema: str, machine: str) -> tuple[bool, int]:
    """A machine that is gone: no order waits for it any more. (was it known, orders whose
    strings were deleted now)."""
    known = conn.execute(f"DELETE FROM {schema}.hosts WHERE key = %s", (machine,)).rowcount > 0
    if known and _has_index_meta(conn, schema):  # else its next refresh would count it again
        conn.execute(f"DELETE FROM {schema}.index_meta WHERE key = %s", ("config@" + machine,))
    return known, _drop_spent_needles(conn, schema)


def _register(conn, schema: str, machine: str) -> None:
    conn.execute(f"INSERT INTO {schema}.hosts (key) VALUES (%s) ON CONFLICT DO NOTHING", (machine,))


def _mark_applied(conn, schema: str, run: str, machine: str) -> None:
    conn.execute(f"INSERT INTO {schema}.purge_applied (run, host) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                 (run, machine))


def _drop_spent_needles(conn, schema: str) -> int:
    """The strings of every order that every known machine has applied are deleted."""
    return conn.execute(
        f"UPDATE {schema}.purge_orders o SET needles = NULL WHERE needles IS NOT NULL AND NOT EXISTS "
        f"(SELECT 1 FROM {schema}.hosts h WHERE NOT EXISTS (SELECT 1 FROM {schema}.purge_applied a "
        "WHERE a.run = o.run AND a.host = h.key))").rowcount


def _has_index_meta(conn, schema: str) -> bool:
    return conn.execute("SELECT to_regclass(%s)", (f"{schema}.index_meta",)).fetchone()[0] is not None


def _set_meta(conn, schema: str, key: str, value: str) -> None:
    conn.execute(f"INSERT INTO {schema}.index_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                 (key, value))
