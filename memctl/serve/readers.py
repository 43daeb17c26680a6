"""The reads of `memctl serve`: a bounded pool of reader threads, and one refresher that keeps
the index up to date (issue #30).

Every read (search, get, compose, recent, a namespace check) runs on one of `[serve]
read_workers` threads, whatever the number of clients: on a server memory each reader holds
one connection to the index (kept open between searches) and at most one to the entries, so
100 agents share a handful of connections instead of opening one each. A client waits for a
reader no longer than `[serve] request_timeout`.

No search refreshes the index itself. The refresher does, on its own thread and connection:
every `[serve] refresh_seconds` (what the service wrote, and what was written beside it: a
`memctl` command, another machine), and at once when a search needs it: a search waits (at most
`REFRESH_WAIT` seconds) for a refresh covering every write acknowledged before it began, so a
client finds what it was told is written, and waits before it takes a reader (`Service.call`),
so the readers search while the refresh runs instead of idling in its wait. A load of writes alone pays one refresh a
`refresh_seconds`, not one per batch.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout

from memctl.core.errors import MemctlError
from memctl.recall.search import Searcher, record_references

REFRESH_WAIT = 10.0  # seconds a search waits for the refresh after a write, then searches as it is


class Refresher:
    """One thread that refreshes the index when told a write was acknowledged, or on a tick."""

    def __init__(self, settings, interval: float) -> None:
        self.settings = settings
        self.interval = interval
        self._cond = threading.Condition()
        self._asked = self._done = self._wanted = 0  # writes told, covered by a refresh, waited for
        self._stopping = False
        self._store = None  # on a server memory: the refresher's index connection, kept open
        self._thread = threading.Thread(target=self._run, name="memctl-serve-refresh", daemon=True)
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self._close_store()

    def written(self) -> None:
        """Writes are about to be acknowledged: the next search waits for a refresh covering
        them (none is run for them before a search, or the tick, asks)."""
        with self._cond:
            self._asked += 1

    def wait_fresh(self, timeout: float = REFRESH_WAIT) -> bool:
        """Wait for a refresh covering every write acknowledged so far; False past `timeout`."""
        with self._cond:
            target = self._asked
            if self._done >= target:
                return True
            self._wanted = max(self._wanted, target)
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= target or self._stopping, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted > self._done or self._stopping, self.interval)
                if self._stopping:
                    return
                target = self._asked
            self.refresh()
            with self._cond:
                self._done = max(self._done, target)
                self._cond.notify_all()

    def refresh(self) -> None:
        """The index brought up to date; a failure is logged (one line) and the index searched
        as it is until the next refresh succeeds."""
        import sqlite3

        from memctl.recall.indexing.index import IndexOptions, SearchIndex

        index = SearchIndex(self.settings.layout, IndexOptions.from_settings(self.settings))
        try:
            if index.on_server:
                _again_if_lost(lambda: self._refresh_on_server(index), self._store is not None, self._close_store)
            else:
                try:
                    index.ensure_fresh()
                except sqlite3.DatabaseError:  # a damaged index is derived: rebuilt, as a search does
                    index.rebuild()
        except (MemctlError, OSError) as exc:
            self.failures += 1
            self._close_store()
            logging.getLogger("memctl.serve").warning("index refresh failed: %s", str(exc).splitlines()[0][:300])

    def _refresh_on_server(self, index) -> None:
        from memctl.recall.indexing import pg_index

        if self._store is None:
            self._store = pg_index.open_store(index)
        pg_index.refresh_on(index, self._store)

    def _close_store(self) -> None:
        store, self._store = self._store, None
        _close_quietly(store)


class ReadPool:
    """`[serve] read_workers` threads; `run(work)` runs `work(reader)` on one of them, where
    `reader` is that thread's `Reader` (its kept index connection)."""

    def __init__(self, settings, workers: int) -> None:
        self.settings = settings
        self._local = threading.local()
        self._readers: list[Reader] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memctl-serve-read")

    def run(self, work, timeout: float):
        """`work(reader)`'s result, on this thread when it is a reader already; TimeoutError
        when no reader finished it within `timeout`."""
        reader = getattr(self._local, "reader", None)
        if reader is not None:
            return work(reader)
        future = self._pool.submit(self._on_reader, work)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError("no reader answered in time") from None

    def _on_reader(self, work):
        reader = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = Reader(self.settings)
            with self._lock:
                self._readers.append(reader)
        return work(reader)

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for reader in self._readers:
                reader.close()


class Reader:
    """One reader thread's state: on a server memory its index connection, kept between
    searches (closed and opened again after a failure); on files none (each search opens the
    index file, which a rebuild replaces)."""

    def __init__(self, settings) -> None:
        from memctl.recall.indexing.index import IndexOptions
        from memctl.recall.ranking.ranking import Ranking

        self.settings = settings
        self.options = IndexOptions.from_settings(settings)
        self.ranking = Ranking.for_root(settings.layout.root)
        self._store = None

    def search(self, request):
        """The hits of one request (its L5 hits recorded as references, as `search` does)."""
        return _again_if_lost(lambda: self._search(request), self._store is not None, self.close)

    def _search(self, request):
        searcher = KeptStoreSearcher(self.settings.layout, self.options, self.ranking, self._kept_store())
        try:
            hits = searcher.search(request)
            record_references(self.settings.layout, hits, searcher.store)
        except MemctlError:
            self.close()  # a connection that failed is not used again
            raise
        finally:
            searcher.close()
        return hits

    def _kept_store(self):
        if self.options.backend != "postgres":
            return None
        if self._store is None:
            from memctl.recall.indexing import pg_index
            from memctl.recall.indexing.index import SearchIndex

            self._store = pg_index.open_store(SearchIndex(self.settings.layout, self.options))
        return self._store

    def close(self) -> None:
        store, self._store = self._store, None
        _close_quietly(store)


def _close_quietly(store) -> None:
    if store is not None:
        try:
            store.close()
        except Exception:  # noqa: BLE001 — a connection already gone
            pass


def _again_if_lost(work, kept: bool, drop):
    """`work()`, and once more on a new connection when a kept one turned out lost (the server
    restarted since it was opened: only its first use tells)."""
    from memctl.core.pg import ServerUnavailable

    try:
        return work()
    except ServerUnavailable:
        if not kept:
            raise
        drop()
        return work()


class KeptStoreSearcher(Searcher):
    """A Searcher over the store a reader keeps (None: it opens its own, as on files), never
    refreshing (the refresher does), and leaving a kept store open when it closes."""

    def __init__(self, layout, options, ranking, store) -> None:
        self._kept = store
        super().__init__(layout, options, refresh=False, ranking=ranking)

    def _open(self):
        return self._kept if self._kept is not None else super()._open()

    def close(self) -> None:
        if self._kept is None:
            self.store.close()
        if self.semantic is not None:
            self.semantic.close()
