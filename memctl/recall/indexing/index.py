"""The derived search index: `.memctl/index.sqlite` (SQLite FTS5, ranked with bm25()).

Documents are cut from the layers (L2 sections, L3 files, L4 history lines and compressed
sessions loose or zipped, L5 and L6 entries: memctl.recall.indexing.documents), redacted, and tokenized
by `memctl.recall.indexing.text`; FTS5 stores the pre-tokenized text and only splits it on spaces, so
Chinese works (memctl.recall.indexing.writer).

Refresh is incremental (memctl.recall.indexing.refresh, over memctl.recall.indexing.sources). Everything here can
be thrown away: a missing, corrupt or outdated index is rebuilt into a temp file and renamed
into place.

Session context: items that share a session (import's `session` field, history lines of one
session) are also concatenated into one session document, so ranking can favour an item whose
session as a whole matches the query.

This module keeps the public API the rest of memctl imports: `SearchIndex`, `IndexOptions`,
`RefreshReport`, `scan_sources`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.errors import WriteFailed
from memctl.core.fsutil import (FILE_MODE, ensure_private_dir, open_nofollow, refuse_symlink, set_mode,
                                 sweep_stale_temp_files, try_lock)
from memctl.recall.indexing.documents import IndexOptions
from memctl.recall.indexing.refresh import Refresh, RefreshReport
from memctl.recall.indexing.sources import file_signature, scan_sources
from memctl.recall.indexing.store import FTS_TOKENIZE, SCHEMA_VERSION, SQLiteStore
from memctl.recall.indexing.text import Tokenizer

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Callable, Iterator

__all__ = ["FTS_TOKENIZE", "IndexOptions", "RefreshReport", "SearchIndex", "refresh_after_write", "scan_sources"]


class SearchIndex:
    """Open, refresh and rebuild the index of one memory root."""

    def __init__(self, layout: Layout, options: IndexOptions | None = None,
                 tokenizer_factory: Callable[[Path], Tokenizer] = Tokenizer.for_root):
        self.layout = layout
        self.options = options or IndexOptions()
        self.tokenizer_factory = tokenizer_factory
        self._tokenizer: Tokenizer | None = None

    @property
    def path(self) -> Path:
        return self.layout.index

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = self.tokenizer_factory(self.layout.custom_dict)
            self._tokenizer.collect_words = True
        return self._tokenizer

    @property
    def on_server(self) -> bool:
        """The index is the memory's schema on the server (memctl.recall.indexing.pg_index)."""
        return self.options.backend == "postgres"

    def exists(self) -> bool:
        return self.on_server or self.path.exists()

    def open_store(self):
        """The index's store, checked: SQLiteStore, or PostgresIndexStore on the server."""
        if self.on_server:
            from memctl.recall.indexing import pg_index

            return pg_index.open_store(self)
        return SQLiteStore.open(self.path)

    def config_signature(self) -> str:
        return self._config_signature()

    def _config_signature(self) -> str:
        return f"{SCHEMA_VERSION}|{file_signature(self.layout.custom_dict)}|{self.options.redact_enabled}|" \
               f"{'|'.join(self.options.extra_patterns)}|{self.options.include_l6}"

    @contextlib.contextmanager
    def _index_lock(self, wait: bool) -> Iterator[bool]:
        """The index's own lock: one refresher at a time; searches never wait for a refresher."""
        ensure_private_dir(self.path.parent)
        fd = open_nofollow(self.path.parent / "index.lock", os.O_RDWR | os.O_CREAT)
        try:
            yield try_lock(fd, wait)
        finally:
            os.close(fd)

    def is_usable(self) -> bool:
        if self.on_server:
            from memctl.recall.indexing import pg_index

            return pg_index.is_usable(self)
        if not self.path.exists():
            return False
        try:
            store = SQLiteStore.at(self.path, timeout=2.0)
            try:
                return store.meta("config") == self._config_signature()
            finally:
                store.close()
        except sqlite3.DatabaseError:
            return False

    def ensure_fresh(self, wait: bool = False,
                     progress: Callable[[int, int, str], None] | None = None) -> RefreshReport:
        """Refresh before a search. If another process is refreshing, use the index as it is.
        `progress` hears a build, when there is no usable index to refresh."""
        if self.on_server:
            from memctl.recall.indexing import pg_index

            return pg_index.ensure_fresh(self, wait)
        report = RefreshReport()
        usable = self.is_usable()
        with self._index_lock(wait=wait or not usable) as got:
            if not got:
                return report
            if not self.is_usable():
                return self._rebuild_locked(progress)
            try:
                return self._refresh_locked()
            except sqlite3.DatabaseError:
                return self._rebuild_locked(progress)

    def rebuild(self, progress: Callable[[int, int, str], None] | None = None) -> RefreshReport:
        """`progress(sources done, sources, the next one)` hears a file index's rebuild."""
        if self.on_server:
            from memctl.recall.indexing import pg_index

            return pg_index.rebuild(self)
        with self._index_lock(wait=True):
            try:
                return self._rebuild_locked(progress)
            except sqlite3.OperationalError as exc:
                if "full" not in str(exc):
                    raise
                raise WriteFailed(f"no space left on {self.path.parent}: the index was not rebuilt "
                                  "(the old one, if any, is unchanged)") from None

    def _rebuild_locked(self, progress: Callable[[int, int, str], None] | None = None) -> RefreshReport:
        import time

        started = time.monotonic()
        ensure_private_dir(self.path.parent)
        leftovers = (self.path.with_name(self.path.name + "-journal"), self.path.with_name(self.path.name + "-wal"))
        refuse_symlink(self.path, *leftovers)  # planted links are refused, not silently replaced
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        sweep_stale_temp_files(self.layout.state_dir, time.time(), (self.path.name,))  # killed rebuilds'
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            store = SQLiteStore.create(tmp)
            try:
                with store.transaction():  # one commit, not one per row: ~4x faster inserts
                    report = self._new_pass(store, progress).update(rebuilt=True)
                    store.set_meta("config", self._config_signature())
                faults.checkpoint("index-build")  # a kill test: the temp file is left, swept by the next build
                store.optimize()
            finally:
                store.close()
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        set_mode(tmp, FILE_MODE)
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        os.replace(tmp, self.path)
        report.rebuilt = True
        report.seconds = time.monotonic() - started
        return report

    def _refresh_locked(self) -> RefreshReport:
        import time

        started = time.monotonic()
        store = SQLiteStore.at(self.path)
        try:
            report = self._new_pass(store).refresh() or RefreshReport()
        finally:
            store.close()
        report.seconds = time.monotonic() - started
        return report

    def _new_pass(self, store: SQLiteStore, progress: Callable[[int, int, str], None] | None = None) -> Refresh:
        return Refresh(store, self.layout, self.options, lambda: self.tokenizer, progress)


def refresh_after_write(settings, progress: Callable[[int, int, str], None] | None = None) -> list[str]:
    """After a command wrote to the layers (archive, import, learn): index what it wrote now, so
    the next search is as fast as any other instead of paying for it. A memory with no index
    yet gets it built here, so that no search builds one after a write (issue #31: the first
    search after a 150,000-line import was 60x the second); `progress` hears that build.
    Never raises: the write itself succeeded, so what goes wrong here comes back as warning
    lines, and the next search refreshes (or builds) again."""
    index = SearchIndex(settings.layout, IndexOptions.from_settings(settings))
    try:
        report = index.ensure_fresh(wait=True, progress=progress)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the next search refreshes again
        return [f"the search index was not refreshed ({exc or 'unknown error'}); the next search will refresh it"]
    return [f"index: {error}" for error in report.errors]
