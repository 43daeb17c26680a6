"""One refresh of the index: what changed since the last one, and reading only that.

Each source file is tracked by size and mtime; an append-only file (histories, JSON Lines)
whose old bytes are unchanged is read from where it stopped; a zip re-indexes only members
whose CRC changed. `SearchIndex` (memctl.recall.indexing.index) holds the lock and the transaction
around a `Refresh`.
"""

from __future__ import annotations

import os
from pathlib import Path

from memctl.core.config import Layout
from memctl.core.fsutil import NOFOLLOW
from memctl.recall.indexing.documents import history_docs, jsonl_docs, l2_docs, l3_docs, manifest_dates
from memctl.recall.indexing.prepare import SessionText
from memctl.recall.indexing.sources import FEW_SOURCES_KINDS, L3_MAX_BYTES, Source, file_signature, scan_sources
from memctl.recall.indexing.text import Tokenizer
from memctl.recall.indexing.vocab import VocabSegmenter

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Callable

    from memctl.recall.indexing.documents import IndexOptions
    from memctl.recall.indexing.store import SQLiteStore
    from memctl.recall.indexing.writer import IndexWriter

# json, zipfile and hashlib are imported where they are used: a search that finds the index
# fresh needs none of them, and every millisecond of import is paid by every query.

SMALL_REFRESH_BYTES = 4_000_000  # up to this much new text, no jieba (see _refresh_tokenizer)
TAIL_BYTES = 256


class RefreshReport:
    """What one refresh or rebuild did (printed by `index refresh` and `index rebuild`)."""

    __slots__ = ("rebuilt", "sources_changed", "docs_added", "docs_removed", "bytes_read", "seconds", "errors")

    def __init__(self, rebuilt: bool = False, sources_changed: int = 0, docs_added: int = 0, docs_removed: int = 0,
                 bytes_read: int = 0, seconds: float = 0.0, errors: list[str] | None = None):
        self.rebuilt, self.sources_changed, self.docs_added = rebuilt, sources_changed, docs_added
        self.docs_removed, self.bytes_read, self.seconds = docs_removed, bytes_read, seconds
        self.errors = errors if errors is not None else []

    def summary(self) -> str:
        return (f"{'rebuilt' if self.rebuilt else 'refreshed'}: +{self.docs_added} -{self.docs_removed} "
                f"item(s) from {self.sources_changed} changed source(s) in {self.seconds:.2f}s")


class Refresh:
    """One pass over one open index: its reads are shared by its steps (a new pass, new reads).
    It reads and writes the index through the store only (memctl.recall.indexing.store)."""

    def __init__(self, store: SQLiteStore, layout: Layout, options: IndexOptions,
                 full_tokenizer: Callable[[], Tokenizer], progress: Callable[[int, int, str], None] | None = None,
                 server_state: tuple[list[Source] | None, dict[str, tuple]] | None = None):
        self.store = store
        self.progress = progress  # (sources done, sources, the next one's key): a rebuild's progress line
        self.layout = layout
        self.options = options
        self.full_tokenizer = full_tokenizer  # jieba's, loaded on first use
        self._known_rows: dict[str, tuple] | None = None
        self._last_scan: list[Source] | None = None
        self._last_scan_signature = ""
        self._rows_read: list[Source] | None = None  # on a server: the rows' sources, read with the sources table
        self._server_state = server_state  # on a server: its state as the caller just read it (refresh_state)

    def refresh(self) -> RefreshReport | None:
        """Index what changed since the last pass, in one transaction; None when nothing did."""
        if not self._changed_sources():
            return None
        if self._last_scan is not None:
            l4_signature, current = self._last_scan_signature, self._last_scan
        else:
            l4_signature = file_signature(self.layout.l4_dir)  # before the scan: a later change shows next time
            current = self._scan()
        tokenizer = self._refresh_tokenizer(current)
        with self.store.transaction():
            if getattr(self.store, "on_server", False):
                current = self._read_again_under_lock(current)
            return self.update(rebuilt=False, tokenizer=tokenizer, current=(l4_signature, current))

    def _read_again_under_lock(self, current: list[Source]) -> list[Source]:
        """On a server, another machine may have indexed the shared rows between this refresh's
        first look and its lock (issue #30: two imports at once indexed the same seqs twice): what
        is indexed, and how far the rows go, are read again now that no other refresher runs."""
        fresh = {source.key: source for source in self._read_server_state() or []}
        return [fresh.get(source.key, source) if source.kind == "rows" else source for source in current]

    def _read_server_state(self) -> list[Source] | None:
        """On a server: its rows' sources and the sources table, read in one statement
        (memctl.recall.indexing.pg_store.PostgresIndexStore.refresh_state); None when the
        entries are not on the server."""
        state, self._server_state = self._server_state, None
        rows, known = state or self.store.refresh_state(self.options.include_l6)
        self._known_rows, self._rows_read = known, rows
        return rows

    def _scan(self) -> list[Source]:
        """The sources to index: the layers' files, and on a server holding the entries its L5
        and L6 rows instead of the files (memctl.recall.indexing.pg_store.PostgresIndexStore.row_sources)."""
        found = scan_sources(self.layout, self.options)
        rows, self._rows_read = self._rows_read, None
        if rows is None:
            rows = self.store.row_sources(self.options.include_l6)
        if rows is None:
            return found
        # where the files would be (after L2): the same order, so the same rowids, as on files
        return [s for s in found if s.kind == "l2"] + rows + [s for s in found if s.kind not in ("l2", "l5", "l6")]

    def _rows_changed(self) -> bool:
        if getattr(self.store, "on_server", False):
            rows = self._read_server_state()
        else:
            rows = self.store.row_sources(self.options.include_l6)
        if not rows:  # L5 and L6 are files here: the sources table is not read for them (1 ms at 100 MB)
            return False
        known = self._sources_table()
        return any(known.get(s.key, (None,) * 4)[2:4] != (s.size, s.mtime_ns) for s in rows)

    def _refresh_tokenizer(self, current: list[Source]) -> Tokenizer:
        """A few new megabytes are cut against the index's own vocabulary (built by jieba), so a
        refresh after one new session takes well under a second instead of loading jieba."""
        if self._pending_bytes(current) > SMALL_REFRESH_BYTES or not self.store.has_vocabulary():
            return self.full_tokenizer()
        return Tokenizer(VocabSegmenter(self.store), collect_words=True)

    def _pending_bytes(self, current: list[Source]) -> int:
        known = self._sources_table()
        pending = 0
        for source in current:
            old = known.get(source.key)
            if old is None or old[2] > source.size:
                pending += source.size
            elif source.kind == "rows":  # size and mtime_ns are row numbers: an entry is ~300 bytes
                pending += 300 * (source.size - old[2] if old[3] == source.mtime_ns else source.size)
            elif (old[2], old[3]) != (source.size, source.mtime_ns):
                pending += source.size - old[2] if source.kind in ("hist", "l5", "l6") else source.size
        return pending

    def _sources_table(self) -> dict[str, tuple]:
        """key -> (key, kind, size, mtime_ns, tail, state), read once per refresh (15,000 rows at
        1 GB: reading them three times was a fifth of a refresh)."""
        if self._known_rows is None:
            self._known_rows = self.store.tracked_sources()
        return self._known_rows

    def _changed_sources(self) -> bool:
        if self._rows_changed():
            return True
        if self.store.meta("l4_dir") == file_signature(self.layout.l4_dir):
            # Compressed sessions are only ever created, renamed or deleted, never changed in
            # place, and any of that changes the folder's mtime: no need to stat (or even load)
            # each of them. Monthly zips are few; they are checked one by one.
            if self._known_rows is not None:  # read with the server's state: no statement of its own
                few = [row[:4] for row in self._known_rows.values() if row[1] in FEW_SOURCES_KINDS]
            else:
                few = self.store.sources_of_kinds(FEW_SOURCES_KINDS)
            quick = [(key, (kind, size, mtime)) for key, kind, size, mtime in few]
            for key, (kind, size, mtime) in quick:
                try:
                    info = os.stat(self.layout.root / key, follow_symlinks=False)
                except OSError:
                    return True
                if (info.st_size, info.st_mtime_ns) != (size, mtime):
                    return True
            return self._l3_or_top_files_changed({key for key, v in quick if v[0] != "zip"})
        known = self._sources_table()
        self._last_scan_signature = file_signature(self.layout.l4_dir)
        current = self._scan()
        self._last_scan = current
        if len(current) != sum(1 for row in known.values() if row[1] != "member"):
            return True
        return any(known.get(s.key, (None,) * 4)[2:4] != (s.size, s.mtime_ns) for s in current)

    def _l3_or_top_files_changed(self, known_keys: set[str]) -> bool:
        found = scan_sources(self.layout, self.options, include_l4_sessions=False)
        if self._rows_read is not None:  # L5 and L6 are the server's rows: files of theirs are not indexed
            found = [s for s in found if s.kind not in ("l5", "l6")]
        return {s.key for s in found} != known_keys

    def update(self, rebuilt: bool, tokenizer: Tokenizer | None = None,
               current: tuple[str, list[Source]] | None = None) -> RefreshReport:
        """Index every source that changed since the last pass (all of them into a new index)
        and forget the ones that are gone."""
        self.store.upgrade_schema()  # an index built by an older memctl gets it at its next change
        report = RefreshReport(rebuilt=rebuilt)
        if current is None:
            l4_signature = file_signature(self.layout.l4_dir)  # before the scan: a later change shows next time
            sources = self._scan()
        else:
            l4_signature, sources = current
        writer = self.store.writer(tokenizer or self.full_tokenizer(), self.options)
        writer.expect(self._pending_bytes(sources))
        try:
            self._index_changes(writer, sources, report)
            writer.finish()
        finally:
            writer.close()
        count = int(self.store.meta("items", "0") or 0) + writer.added - writer.removed
        self.store.set_meta("items", str(count))
        self.store.set_meta("l4_dir", l4_signature)
        known_layers = set(filter(None, self.store.meta("layers").split(",")))
        self.store.set_meta("layers", ",".join(sorted(known_layers | writer.layers)))
        report.docs_added, report.docs_removed = writer.added, writer.removed
        return report

    def _index_changes(self, writer: IndexWriter, sources: list[Source], report: RefreshReport) -> None:
        """Every source that changed into the writer, the ones that are gone out of it."""
        import zipfile

        known = self._sources_table()
        current_keys = {s.key for s in sources}
        for key, row in known.items():
            if row[1] != "member" and key not in current_keys:
                self._forget_source(writer, key, row[1])
                report.sources_changed += 1
        dates = None
        for number, source in enumerate(sources):
            if self.progress:
                self.progress(number, len(sources), source.key)
            row = known.get(source.key)
            if row and (row[2], row[3]) == (source.size, source.mtime_ns):
                continue
            report.sources_changed += 1
            if source.kind == "hist" and dates is None:
                dates = manifest_dates(self.layout)
            try:
                report.bytes_read += self._index_source(writer, source, row, dates or {})
            except (OSError, zipfile.BadZipFile, UnicodeError) as exc:
                report.errors.append(f"{source.key}: {exc}")
        if self.progress:
            self.progress(len(sources), len(sources), "")

    def _forget_source(self, writer: IndexWriter, key: str, kind: str) -> None:
        if kind == "zip":
            for member_key in self.store.member_signatures(key):
                writer.remove_source(member_key)
                self.store.drop_source(member_key)
        writer.remove_source(key)
        self.store.drop_source(key)

    def _record(self, source: Source, tail: str, state: str) -> None:
        self.store.record_source(source.key, source.kind, source.size, source.mtime_ns, tail, state)

    def _index_source(self, writer: IndexWriter, source: Source, row, dates: dict[str, str]) -> int:
        if source.kind == "zip":
            return self._index_zip(writer, source)
        if source.kind in ("hist", "l5", "l6"):
            return self._index_appendable(writer, source, row, dates)
        if source.kind == "rows":
            return self._index_rows(writer, source, row)
        data = _read_file(source.path, self.options.max_member_bytes if source.kind == "raw" else -1)
        writer.remove_source(source.key)
        text = data.decode("utf-8", "replace")
        if source.kind == "l2":
            docs = l2_docs(text)
        elif source.kind == "loose":
            docs = SessionText(source.path.stem, text)
            writer.keep_session_text(source.key, source.path.stem, data)
        elif source.kind == "raw":  # its session's name is its file's until `archive` names it
            docs = SessionText(source.path.stem, text)
        else:
            docs = l3_docs(source.key, text) if len(data) <= L3_MAX_BYTES else []
        writer.add(source.key, docs)
        self._record(source, "", "")
        return len(data)

    def _index_appendable(self, writer: IndexWriter, source: Source, row, dates: dict[str, str]) -> int:
        """Read only what was appended when the bytes indexed before are still there."""
        import json

        old_size = row[2] if row else 0
        old_tail = row[4] if row else ""
        state = json.loads(row[5]) if row and row[5] else {}
        with open(source.path, "rb") as handle:
            start = 0
            if row and 0 < old_size <= source.size and _tail_hash(handle, old_size) == old_tail:
                start = old_size
            else:
                writer.remove_source(source.key)
                state = {}
            handle.seek(start)
            data = handle.read()
        end = start + len(data)
        cut = data.rfind(b"\n") + 1  # a partly written last line waits for the next refresh
        data, end = data[:cut], start + cut
        if source.kind == "hist":
            first_line = int(state.get("line", 1))
            docs, session = history_docs(data.decode("utf-8", "replace"), first_line, state.get("session", ""), dates)
            state = {"line": first_line + data.count(b"\n"), "session": session}
        else:
            docs = jsonl_docs(data, "L5" if source.kind == "l5" else "L6")
        writer.add(source.key, docs)
        with open(source.path, "rb") as handle:
            tail = _tail_hash(handle, end)
        recorded = Source(source.key, source.location, source.kind, end, source.mtime_ns if end == source.size else -1)
        self._record(recorded, tail, json.dumps(state))
        return len(data)

    def _index_rows(self, writer: IndexWriter, source: Source, row) -> int:
        """The entry rows of one part on the server added since the last pass (`size`: the last
        seq indexed), or all of them again when the part was rewritten (`mtime_ns`: rewrites)."""
        start = 0
        if row and row[3] == source.mtime_ns and row[2] <= source.size:
            start = row[2]
        else:
            writer.remove_source(source.key)
        data = self.store.entry_lines(source.location, start, source.size)
        writer.add(source.key, jsonl_docs(data, source.key.rpartition(":")[2]))
        self._record(source, "", "")
        return len(data)

    def _index_zip(self, writer: IndexWriter, source: Source) -> int:
        import zipfile

        read = 0
        known = self.store.member_signatures(source.key)
        with zipfile.ZipFile(source.path) as archive:
            members = {f"{source.key}!{info.filename}": info for info in archive.infolist()
                       if info.filename.endswith(".txt") and not info.is_dir()}
            for key in set(known) - set(members):
                writer.remove_source(key)
                self.store.drop_source(key)
            for key, info in members.items():
                signature = f"{info.CRC}:{info.file_size}"
                if known.get(key) == signature:
                    continue
                writer.remove_source(key)
                with archive.open(info) as member:  # bounded: a zip bomb inflates only this far
                    data = member.read(self.options.max_member_bytes)
                read += len(data)
                name = Path(info.filename).stem
                writer.add(key, SessionText(name, data.decode("utf-8", "replace")))
                writer.keep_session_text(key, name, data)
                self._record(Source(key, source.location, "member", info.file_size, 0), signature, "")
        self._record(source, "", "")
        return read


def _read_file(path: Path, limit: int = -1) -> bytes:
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def _tail_hash(handle, end: int) -> str:
    import hashlib

    start = max(0, end - TAIL_BYTES)
    handle.seek(start)
    return hashlib.sha1(handle.read(end - start)).hexdigest()
