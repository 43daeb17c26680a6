"""SearchIndex's steps when the index is on the server (`[store] backend = "postgres"`):
open, check, refresh and rebuild this machine's part of the memory's shared index
(memctl.recall.indexing.pg_store). Imported only for that backend: a file memory's search never
loads psycopg."""

from __future__ import annotations

import time

from memctl.core import pg
from memctl.longterm.pg_store import translated
from memctl.recall.indexing.pg_store import PostgresIndexStore, RefreshBusy
from memctl.recall.indexing.refresh import Refresh, RefreshReport


def open_store(index) -> PostgresIndexStore:
    """The searcher's store (memctl.recall.indexing.index.SearchIndex.open_store); the index's tables
    are brought to this memctl's version first (they are derived)."""
    return _connect(index, create=True)


def _connect(index, create: bool = False) -> PostgresIndexStore:
    return PostgresIndexStore.connect(pg.dsn_from_env(), index.options.memory, index.layout.root, migrate=create)


def is_usable(index) -> bool:
    store = _connect(index, create=True)
    try:
        return store.meta("config") == index.config_signature()
    finally:
        store.close()


def ensure_fresh(index, wait: bool) -> RefreshReport:
    """Refresh this machine's part; a build of it when it was never made (or with other
    settings). Another refresher at work: the index is used as it is, unless `wait`."""
    store = _connect(index, create=True)
    try:
        return refresh_on(index, store, wait)
    finally:
        store.close()


def refresh_on(index, store: PostgresIndexStore, wait: bool = False) -> RefreshReport:
    """`ensure_fresh` over a store the caller keeps open (memctl serve's refresher)."""
    if store.read_only:  # a replica or a read-only role: the index is searched as the writers left it
        return RefreshReport()
    try:
        with translated(store.where):  # the server gone mid-refresh: one line naming it, exit 2
            # the refresh's first look, the meta with it (the purge orders and the config read it)
            state = store.refresh_state(index.options.include_l6)
            pending = _apply_purge_orders(index, store)
            if pending is not None:  # what the look saw may have changed
                state = None
            usable = store.meta("config") == index.config_signature()
            store.wait_for_lock = wait or not usable
            if not usable:
                return _noted(_rebuild(index, store), pending or [])
            refresh = Refresh(store, index.layout, index.options, lambda: index.tokenizer, server_state=state)
            return _noted(_timed(refresh.refresh), pending or [])
    except RefreshBusy:
        return RefreshReport()


def rebuild(index) -> RefreshReport:
    store = _connect(index, create=True)
    try:
        with translated(store.where):
            pending = _apply_purge_orders(index, store)
            return _noted(_rebuild(index, store), pending or [])
    finally:
        store.close()


def _apply_purge_orders(index, store: PostgresIndexStore) -> list[str] | None:
    """Purges made on other machines, applied to this machine's files before any of them is
    uploaded (memctl.longterm.purge_orders): the ones it could not finish, or None when none
    waited (no statement: the meta the refresh reads first says so)."""
    from memctl.longterm import purge_orders

    if not purge_orders.behind(store.meta, store.prefix):
        return None
    return purge_orders.apply_pending(index.layout, store.db, store.schema, store.prefix)[1]


def _noted(report: RefreshReport, pending: list[str]) -> RefreshReport:
    report.errors[:0] = pending  # a purge order this machine could not finish: said with the refresh's errors
    return report


def _rebuild(index, store: PostgresIndexStore) -> RefreshReport:
    """This machine's files and the server's rows indexed again, in one transaction; the other
    machines' items stay as they are."""
    def build() -> RefreshReport:
        with store.transaction():
            store.mark_all_changed()
            report = Refresh(store, index.layout, index.options, lambda: index.tokenizer).update(rebuilt=True)
            store.set_meta("config", index.config_signature())
        return report

    return _timed(build)


def _timed(action) -> RefreshReport:
    started = time.monotonic()
    report = action() or RefreshReport()
    report.seconds = time.monotonic() - started
    return report


def shared_session_text(options, root, name: str) -> bytes | None:
    """The compressed text of session `name` as another machine archived it (the server keeps
    each zipped or loose session's text beside its index rows), or None."""
    return _on_server(options, root, lambda store: store.session_text(name.removesuffix(".txt")))


def shared_history_line(options, root, ref: str) -> str | None:
    """The history line `L4:session#hN` as the machine that indexed it has it, or None."""
    return _on_server(options, root, lambda store: store.item_text_by_ref(ref))


def _on_server(options, root, read):
    if options.backend != "postgres":
        return None
    store = PostgresIndexStore.connect(pg.dsn_from_env(), options.memory, root, migrate=True)
    try:
        return read(store)
    finally:
        store.close()
