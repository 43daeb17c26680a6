"""The entry store on PostgreSQL (`[store] backend = "postgres"`, issue #14): L5, L6 and the
dream log as rows of the memory's schema (`memctl.longterm.pg_schema`).

`PostgresEntryStore` has the methods of `memctl.longterm.store.JsonlEntryStore`, so that
remember, forget, the dream pass, import and `task done` do not know which backend they
write to. What differs is underneath:

- A write is one server transaction (`transaction`, what `recovery.writing` opens on this
  backend): a change that appends to L6 and the log and rewrites L5 commits whole or not at
  all, so there is nothing to journal and nothing to settle; a killed process or a dropped
  connection leaves the rows as they were. Writers of one memory share its advisory lock;
  whole-memory writers (dream, undo, purge) take it alone (`memctl.core.pg.hold_memory_lock`).
  Writers of one type queue on a lock of that type (`lock_types`), so two remembers of the
  same fact cannot both add it.
- A rewrite is applied as the difference from what this process read: rows it read and
  dropped are deleted, a changed row takes the place of the one it replaces, new rows go at
  the end; rows other writers added meanwhile are untouched. Only when an entry must go
  between two kept rows (an undo) are the rows it read written again, in order.
- Each row keeps the exact line the file backend would write (`raw`), so `memctl export`
  gives back the same bytes.

The connection, its transactions and locks are `memctl.longterm.pg_conn`.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterable, Iterator

from memctl.core import pg
from memctl.core.errors import UsageError
from memctl.longterm.pg_conn import (BUMP_APPENDED, Server, pause_point, server_for, share_memory_lock,
                                     shared_lock_opening, translated)
from memctl.longterm.pg_log import ServerDreamLog
from memctl.longterm.pg_reads import Listing, kept_candidates
from memctl.longterm.pg_rewrite import rewrite_plan
from memctl.longterm.entries import BAD_LINE, Entry, Row, Snapshot, content_hash, entry_problem, rows_bytes
from memctl.longterm.policies import match_key, normalize_topic, reachable_lengths
from memctl.longterm.store_base import Candidates, EntryForms, LazyRow, bytes_digest

GONE_FOR_GOOD = ("forgotten", "purged")  # L6 reasons a remember must not silently undo
ENTRY_COLUMNS = "part, id, type, topic, reason, fingerprint, merge_key, near_key, key_length, raw"
INSERT_ENTRY = f"INSERT INTO {{s}}.entries ({ENTRY_COLUMNS}) VALUES ({', '.join(['%s'] * 10)})"
UPDATE_ENTRY = ("UPDATE {s}.entries SET (" + ENTRY_COLUMNS + ") = ROW(" + ", ".join(["%s"] * 10) + ") "
                "WHERE seq = %s")


INSERT_CHUNK = 1000  # rows per multi-row INSERT (10 parameters a row; the protocol allows 65,535)


def _multi_insert(count: int, schema: str) -> str:
    row = "(" + ", ".join(["%s"] * 10) + ")"
    return (f"INSERT INTO {schema}.entries ({ENTRY_COLUMNS}) VALUES " + ", ".join([row] * count) +
            " RETURNING seq")


def duplicate_error(entry_id: str) -> UsageError:
    return UsageError(f"{entry_id} is on more than one line of L5; nothing was changed "
                      "(give one of the lines a new id, then rerun)")


def _column(value: str) -> str:
    """A lookup column's text (raw keeps the exact bytes): PostgreSQL text holds no NUL and no
    lone surrogate."""
    return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _row(seq: int, raw: bytes, parse: bool = True) -> Row:
    entry = None
    if parse:
        try:
            entry = Entry.from_dict(json.loads(raw))
        except BAD_LINE:
            entry = None
    row = Row(raw, entry)
    row.seq = seq  # which server row it is: a rewrite changes only the rows it must
    return row


class ServerPart:
    """L5 or L6 as the rows of one part."""

    def __init__(self, server: Server, part: str, label: str, file_name: str, merge_types: frozenset[str]) -> None:
        self._server, self._part, self._label, self._file_name = server, part, label, file_name
        self._merge_types = merge_types

    @property
    def location(self) -> str:
        return f"{self._label} in {self._server.schema} at {self._server.where}"

    def _pairs(self) -> list[tuple[int, bytes]]:
        found = self._server.execute("SELECT seq, raw FROM {s}.entries WHERE part = %s ORDER BY seq",
                                     (self._part,)).fetchall()
        pairs = [(int(seq), bytes(raw)) for seq, raw in found]
        self._server.seen[self._part].update(seq for seq, _ in pairs)
        return pairs

    def snapshot(self, previous: Snapshot | None = None, lean: bool = False) -> Snapshot:
        """Every row (`lean` is for the files: a server part's rows are read whole)."""
        known = {} if previous is None else {r.raw: r.entry for r in previous.rows}
        rows = []
        for seq, raw in self._pairs():
            if raw in known:
                row = Row(raw, known[raw])
                row.seq = seq
            else:
                row = _row(seq, raw)
            rows.append(row)
        return Snapshot(Path(self._file_name), rows_bytes(rows), rows)

    def iter(self) -> Iterator[Entry]:
        for row in self.snapshot().rows:
            if row.entry is not None:
                yield row.entry

    def of_types(self, type_names: Iterable[str]) -> list[Entry]:
        wanted = set(type_names)
        return [entry for entry in self.iter() if entry.type in wanted]

    def bad_lines(self, quick: bool = False) -> list[tuple[str, int, str]]:
        """As the file backend says them: the exported file's name and line number. `quick`:
        none, without reading the part, when no row lacks an id (a line that is not an entry)."""
        if quick and self._server.execute("SELECT 1 FROM {s}.entries WHERE part = %s AND id = '' LIMIT 1",
                                          (self._part,)).fetchone() is None:
            return []
        found = []
        for number, (_, raw) in enumerate(self._pairs(), start=1):
            problem = entry_problem(raw)
            if problem:
                found.append((self._file_name, number, problem))
        return found

    def entries(self) -> list[Entry]:
        return list(self.iter())

    def ids(self) -> set[str]:
        return {e.id for e in self.iter()}

    def append(self, entries: Iterable[Entry]) -> int:
        rows = [_row(0, self._stored(e)) for e in entries]
        if rows and self._part == "active" and self._server.depth and self._server.reads.planned:
            self._server.defer_rows(self, rows)  # a batch's: sent with its next statement or commit
        elif len(rows) == 1:  # a remember: the row and the part's last_seq in one statement
            with self._server.change(keeps_reads=self._part == "active"):
                self._insert_one_and_bump(rows[0])
                pause_point("pg-append")
        elif rows:
            with self._server.change(keeps_reads=self._part == "active"):
                self._insert(rows, bump=True)
                pause_point("pg-append")
        if rows and self._part == "active":
            self._server.reads.appended_active([self._listed(row) for row in rows])
        return len(rows)

    def write_pending(self, rows: list[Row], then=None) -> None:
        """A batch's appends (Server.defer_rows) sent: the rows, then the part's last_seq (and
        what `then()` queues: the COMMIT)."""
        provisional = [row.seq for row in rows]
        with self._server.change(keeps_reads=True):
            self._insert(rows, bump=True, then=then)
            pause_point("pg-append")
        self._server.reads.renumbered(dict(zip(provisional, (row.seq for row in rows))))

    def _listed(self, row: Row) -> tuple[str, tuple, int]:
        """A new row as a kept listing holds it: (type, (seq, id, near_key, raw), key length)."""
        columns = self._columns(row)
        near_key, length = columns[7], columns[8]
        return columns[2] or "", (row.seq, columns[1], near_key, None if near_key is not None else row.raw), \
            -1 if length is None else length

    def _insert_one_and_bump(self, row: Row) -> None:
        """_insert([row]) then bump(appended) as one statement: last_seq becomes the highest seq
        of the entries, the new row's included (the part rows are locked: no other writer's)."""
        found = self._server.execute(
            f"WITH new AS ({INSERT_ENTRY} RETURNING seq), bumped AS (UPDATE {{s}}.entry_parts SET last_seq = "
            "GREATEST((SELECT coalesce(max(seq), 0) FROM {s}.entries), (SELECT max(seq) FROM new)) "
            "WHERE part = %s) SELECT seq FROM new", self._columns(row) + (self._part,)).fetchone()
        row.seq = int(found[0])
        self._server.seen[self._part].add(row.seq)

    def _stored(self, entry: Entry) -> bytes:
        return EntryForms().stored_form(entry)

    def _columns(self, row: Row) -> tuple:
        """The values of ENTRY_COLUMNS for a row."""
        entry = row.entry
        if entry is None:
            return (self._part, "", None, None, None, None, None, None, None, row.raw)
        merge_key = None
        if self._part == "active" and entry.type in self._merge_types:
            merge_key = _column(f"{entry.type}\x1f{normalize_topic(entry.topic)}")
        fingerprint = entry.extra.get("sha256") if isinstance(entry.extra.get("sha256"), str) else None
        key = match_key(entry.text)
        exact = all(_column(value) == value for value in (entry.id, entry.type, key))
        return (self._part, _column(entry.id), _column(entry.type), _column(entry.topic), _column(entry.reason),
                _column(fingerprint or content_hash(entry.text)), merge_key, key if exact else None,
                len(key) if exact else None, row.raw)

    def _insert(self, rows: list[Row], bump: bool = False, then=None) -> None:
        """New rows at the end, in order; each row learns its seq. The locks deferred, the rows
        (a multi-row INSERT per INSERT_CHUNK of them), (`bump`) the part's last_seq and what
        `then()` queues go on one pipeline: one round trip with the COMMIT (psycopg's
        executemany syncs its rows: it took two)."""
        if not rows:
            return
        server = self._server
        server.flush_pending()
        with translated(server.where):
            with server.conn.pipeline():
                server.send_locks_now()
                cursors = [server.conn.execute(_multi_insert(len(chunk), server.schema),
                                               [value for row in chunk for value in self._columns(row)])
                           for chunk in (rows[start:start + INSERT_CHUNK] for start in range(0, len(rows), INSERT_CHUNK))]
                if bump:
                    server.conn.execute(BUMP_APPENDED.replace("{s}", server.schema), (self._part,))
                if then is not None:
                    then()
            # one statement's rows take their seqs in the order of its VALUES, the statements in
            # turn (the part rows are locked: no other writer allocates meanwhile)
            seqs = sorted(int(seq) for cursor in cursors for (seq,) in cursor.fetchall())
        for row, seq in zip(rows, seqs):
            row.seq = seq
        self._server.seen[self._part].update(seqs)

    def rewrite(self, rows: list[Row]) -> Snapshot:
        """The part becomes these rows, changing only what differs from what was read."""
        seen = self._server.seen[self._part]
        with self._server.change():
            plan = rewrite_plan(rows, seen)
            if plan is None:
                self._rewrite_all(rows, seen)
            else:
                deletes, updates, appends = plan
                self._delete(deletes)
                for seq, row in updates:
                    self._server.execute(UPDATE_ENTRY, self._columns(row) + (seq,))
                    row.seq = seq
                self._insert(appends)
                self._server.bump(self._part, appended=bool(appends), rewritten=bool(deletes or updates))
            pause_point("pg-rewrite")
        return Snapshot(Path(self._file_name), rows_bytes(rows), list(rows))

    def _delete(self, seqs: list[int]) -> None:
        if seqs:
            self._server.execute("DELETE FROM {s}.entries WHERE part = %s AND seq = ANY(%s)", (self._part, seqs))
            self._server.seen[self._part].difference_update(seqs)

    def _rewrite_all(self, rows: list[Row], seen: set[int]) -> None:
        """Every row read goes, these come in order (an entry put back between two others)."""
        self._delete(sorted(seen))
        fresh = [Row(r.raw, r.entry) for r in rows]
        self._insert(fresh)
        for row, new in zip(rows, fresh):
            row.seq = new.seq
        self._server.bump(self._part, appended=True, rewritten=True)

    # --- the write path's queries (issue #13's names), as indexed statements

    def _rows_where(self, condition: str, params: tuple) -> list[Row]:
        found = self._server.prefetched.pop(self.rows_key(condition, params), None)
        if found is None:
            found = self._server.execute(*self.rows_query(condition, params)).fetchall()
        rows = [_row(int(seq), bytes(raw)) for seq, raw in found]
        self._server.seen[self._part].update(r.seq for r in rows)
        return [r for r in rows if r.entry is not None]

    def rows_key(self, condition: str, params: tuple) -> tuple:
        return "rows", self._part, condition, repr(params)

    def rows_query(self, condition: str, params: tuple) -> tuple[str, tuple]:
        return ("SELECT seq, raw FROM {s}.entries WHERE part = %s AND " + condition + " ORDER BY seq",
                (self._part,) + params)

    def count(self) -> int:
        """How many rows (entries and lines kept as they are): what L5's size is measured in."""
        kept = self._server.reads.count if self._part == "active" else None
        if kept is not None:
            return kept
        found = self._server.prefetched.pop(("count", self._part), None)
        if found is None:
            found = self._server.execute(*self.count_query()).fetchall()
        if self._part == "active" and self._server.depth:
            self._server.reads.count = int(found[0][0])
        return int(found[0][0])

    def count_query(self) -> tuple[str, tuple]:
        return "SELECT count(*) FROM {s}.entries WHERE part = %s", (self._part,)

    def size(self) -> int:
        """Bytes the exported file would have (`status`)."""
        return int(self._server.execute("SELECT coalesce(sum(length(raw)), 0) FROM {s}.entries WHERE part = %s",
                                        (self._part,)).fetchone()[0])

    def holds(self, entry_id: str) -> bool:
        return self._server.execute("SELECT 1 FROM {s}.entries WHERE part = %s AND id = %s LIMIT 1",
                                    (self._part, _column(entry_id))).fetchone() is not None

    def row(self, entry_id: str) -> Row | None:
        """L5: the one row of this id (UsageError when it is on more than one); L6: its last."""
        rows = [r for r in self._rows_where("id = %s", (_column(entry_id),)) if r.entry.id == entry_id]
        if self._part == "active" and len(rows) > 1:
            raise duplicate_error(entry_id)
        return rows[-1] if rows else None

    def current(self, type_name: str, topic: str) -> Row | None:
        """L5: the last active row with this merge key (type, normalized topic)."""
        key = normalize_topic(topic)
        rows = [r for r in self._rows_where("type = %s", (_column(type_name),))
                if r.entry.type == type_name and normalize_topic(r.entry.topic) == key]
        return self.row(rows[-1].entry.id) if rows else None

    def candidates(self, type_name: str, text: str, cutoff: float = 0.0) -> Candidates:
        """L5: the rows of this type whose text could score `cutoff` against `text` (the
        length bound of `policies.reachable_lengths`), in order, with their match keys."""
        low, high = reachable_lengths(text, cutoff)
        kept = self._kept_listing(type_name, low, high)
        if kept is not None:
            return kept_candidates(kept, type_name, low, high, self._loader)
        listed = self._server.prefetched.pop(self.candidates_key(type_name, text, cutoff), None)
        if listed is None:
            listed = self._server.execute(*self.candidates_query(type_name, text, cutoff)).fetchall()
        self._server.seen[self._part].update(int(seq) for seq, *_ in listed)
        found = []
        for seq, entry_id, near_key, raw in listed:
            if near_key is not None:  # its id, type and key as the columns hold them: nothing to parse
                row = LazyRow(entry_id, self._loader(int(seq)))
            else:  # an older row, or one the columns cannot hold exactly: as written
                row = _row(int(seq), bytes(raw))
                if row.entry is None or row.entry.type != type_name:
                    continue
                entry_id, near_key = row.entry.id, match_key(row.entry.text)
            if low <= len(near_key) <= high:
                found.append((entry_id, near_key, row))
        return Candidates(found, None)

    def _kept_listing(self, type_name: str, low: int, high: int) -> Listing | None:
        """The rows of a type a batch of remembers shares (memctl.longterm.pg_reads): kept,
        or read now with the batch's bounds; None when this question is asked alone."""
        reads = self._server.reads
        if self._part != "active" or not self._server.depth:
            return None
        kept = reads.listing(type_name, low, high)
        bounds = reads.bounds_to_read(type_name, low, high) if kept is None else None
        if bounds is not None:
            read = reads.listing_read(type_name, *bounds)
            query = self.listing_query(type_name, *read)
            found = self._server.prefetched.pop(query, None)
            if found is None:
                found = self._server.execute(*query).fetchall()
            kept = reads.read_listing(type_name, *read, found)
            if kept is None:  # the carried listing is stale: another writer changed L5
                read = (read[0], read[1], 0)
                kept = reads.read_listing(type_name, *read, self._server.execute(*self.listing_query(type_name, *read)).fetchall())
            self._server.seen[self._part].update(row[0] for row in kept.rows)
        return kept

    def listing_query(self, type_name: str, low: int, high: int, after: int = 0) -> tuple[str, tuple]:
        """L5's last_seq and rewrites counter, and the type's rows within the bounds after seq
        `after`, in one statement (one snapshot: memctl.longterm.pg_reads)."""
        return ("SELECT p.last_seq, p.rewrites, e.seq, e.id, e.near_key, CASE WHEN e.near_key IS NULL THEN e.raw END "
                "FROM {s}.entry_parts p LEFT JOIN {s}.entries e ON e.part = p.part AND e.type = %s "
                "AND (e.key_length IS NULL OR e.key_length BETWEEN %s AND %s) AND e.seq > %s "
                "WHERE p.part = %s ORDER BY e.seq", (_column(type_name), low, high, after, self._part))

    def candidates_key(self, type_name: str, text: str, cutoff: float) -> tuple:
        return ("candidates", *self.rows_key(*self.candidates_condition(type_name, text, cutoff)))

    def candidates_query(self, type_name: str, text: str, cutoff: float) -> tuple[str, tuple]:
        """seq, id, near_key and (only where near_key is NULL) raw of the rows within the bound."""
        condition, params = self.candidates_condition(type_name, text, cutoff)
        return ("SELECT seq, id, near_key, CASE WHEN near_key IS NULL THEN raw END FROM {s}.entries "
                "WHERE part = %s AND " + condition + " ORDER BY seq", (self._part,) + params)

    def _loader(self, seq: int):
        def load() -> Row:
            if seq in self._server.provisional:  # a batch's row not sent yet
                return self._server.provisional[seq]
            found = self._server.execute("SELECT raw FROM {s}.entries WHERE seq = %s", (seq,)).fetchone()
            return _row(seq, bytes(found[0]) if found else b"")
        return load

    def candidates_condition(self, type_name: str, text: str, cutoff: float) -> tuple[str, tuple]:
        """The bound on the server too (key_length: len(match_key) as written; NULL: read it)."""
        low, high = reachable_lengths(text, cutoff)
        return ("type = %s AND (key_length IS NULL OR key_length BETWEEN %s AND %s)",
                (_column(type_name), low, min(high, 1 << 30)))

    def replace(self, entry_id: str, new_row: Row, at_end: bool = False) -> None:
        """L5: this id's one row replaced by `new_row`, in its place or (`at_end`) as the last."""
        with self._server.change(keeps_reads=self._part == "active"):
            old = self._one_row(entry_id)
            if at_end:
                self._delete([old.seq])
                self._insert([new_row])
            else:
                self._server.execute(UPDATE_ENTRY, self._columns(new_row) + (old.seq,))
                new_row.seq = old.seq
            self._server.bump(self._part, appended=at_end, rewritten=True)
        if self._part == "active":
            self._server.reads.replaced(old.seq, self._listed(new_row))

    def remove(self, entry_ids: Iterable[str]) -> None:
        """L5: the rows of these ids deleted, in one transaction."""
        with self._server.change():
            self._delete([self._one_row(entry_id).seq for entry_id in dict.fromkeys(entry_ids)])
            self._server.bump(self._part, appended=False, rewritten=True)

    def _one_row(self, entry_id: str) -> Row:
        found = self.row(entry_id)
        if found is None:
            raise UsageError(f"no entry {entry_id} in {self._label}")
        return found

    def length(self) -> int:
        """The last seq now: a point to cut back to."""
        return int(self._server.execute("SELECT coalesce(max(seq), 0) FROM {s}.entries WHERE part = %s",
                                        (self._part,)).fetchone()[0])

    def cut_back(self, length: int) -> bool:
        with self._server.change():
            gone = self._server.execute("DELETE FROM {s}.entries WHERE part = %s AND seq > %s",
                                        (self._part, length)).rowcount
            if gone:
                self._server.bump(self._part, appended=False, rewritten=True)
        return bool(gone)

    def settle(self) -> int:
        return 0  # a transaction is whole or absent: no torn line

    def digest(self) -> str:
        return bytes_digest(b"".join(raw for _, raw in self._pairs()))


class PostgresEntryStore(ServerDreamLog, EntryForms):
    """L5 (`active`), L6 (`archive`) and the dream log as rows of one memory's schema."""

    on_server = True

    def __init__(self, server: Server, merge_types: frozenset[str]) -> None:
        self._server = server
        self.active = ServerPart(server, "active", "L5", "long_term.jsonl", merge_types)
        self.archive = ServerPart(server, "archive", "L6", "archive.jsonl", merge_types)

    @property
    def where(self) -> str:
        return f"{self._server.schema} at {self._server.where}"

    @property
    def server(self) -> Server:
        """The memory's connection, for what it shares beside the entries (`pg_shared`)."""
        return self._server

    @contextlib.contextmanager
    def transaction(self, wait: float, whole: bool) -> Iterator[None]:
        """One write: the memory's lock (alone for a whole-memory writer, shared otherwise)
        for the length of one transaction."""
        opening = None if whole else shared_lock_opening(self._server, wait)
        with self._server.transaction(opening):
            if whole:
                pg.hold_memory_lock(self._server.conn, self._server.schema, wait)
            elif opening is None or self._server.depth > 1:
                share_memory_lock(self._server, wait)
            yield
            pause_point("pg-commit")

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Reads that see one moment of the memory (an export of L5, L6 and the log together)."""
        with self._server.transaction():
            self._server.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield

    def lock_types(self, types: Iterable[str]) -> None:
        for name in sorted(set(types) - self._server.locked_types):  # one held is held to the end
            # sent with the next statement, which the server runs once the lock is granted
            self._server.defer_lock("SELECT pg_advisory_xact_lock(%s)", (pg.lock_key(self._server.schema, "type:" + name),))
            self._server.locked_types.add(name)
        self._server.current_types = set(types)

    def settle(self) -> list[str]:
        return []

    def gone_for_good(self, text: str, cutoff: float = 0.0) -> list[Entry]:
        """L6 entries whose last row says forgotten or purged and which are not active again
        (for each id its last such row; ids with a forgotten row by their first one, then the
        purged-only ids): every one of them, a superset of what could match `text`."""
        kept = self._server.reads.gone if self._server.depth else None
        if kept is None:
            kept = self._gone_for_good(text, cutoff)
            if self._server.depth:
                self._server.reads.gone = kept
        return list(kept)

    def _gone_for_good(self, text: str, cutoff: float) -> list[Entry]:
        gone = ("reason = ANY(%s)", (list(GONE_FOR_GOOD),))
        self._read_ahead(gone, text, cutoff)
        left = self.archive._rows_where(*gone)
        last: dict[str, Entry] = {}
        for reason in GONE_FOR_GOOD:
            for row in left:
                if row.entry.reason == reason:
                    last[row.entry.id] = row.entry
        if not last:
            return []
        ids = list(last)
        final = dict(self._server.execute(
            "SELECT DISTINCT ON (id) id, reason FROM {s}.entries WHERE part = 'archive' AND id = ANY(%s) "
            "ORDER BY id, seq DESC", (ids,)).fetchall())
        active = {i for (i,) in self._server.execute(
            "SELECT DISTINCT id FROM {s}.entries WHERE part = 'active' AND id = ANY(%s)", (ids,)).fetchall()}
        return [e for e in last.values() if e.id not in active and final.get(e.id) in GONE_FOR_GOOD]

    def _read_ahead(self, gone: tuple[str, tuple], text: str, cutoff: float) -> None:
        """A remember's reads under its type lock in one round trip instead of three: with the
        gone-for-good rows, L5's count and the near-duplicate candidates of the locked type
        (kept until the transaction changes something; a read not asked for is dropped). What
        the transaction keeps already (memctl.longterm.pg_reads) is not asked again."""
        if len(self._server.current_types) != 1 or self._server.prefetched:
            return  # not a remember's one type
        reads = self._server.reads
        ahead = [] if reads.count is not None else [(("count", "active"), self.active.count_query())]
        low, high = reachable_lengths(text, cutoff)
        for name in sorted(self._server.current_types - self.active._merge_types):
            bounds = reads.bounds_to_read(name, low, high)
            if reads.listing(name, low, high) is not None:
                continue
            if bounds is not None:
                query = self.active.listing_query(name, *reads.listing_read(name, *bounds))
                ahead.append((query, query))
            else:
                ahead.append((self.active.candidates_key(name, text, cutoff),
                              self.active.candidates_query(name, text, cutoff)))
        results = self._server.pipelined([self.archive.rows_query(*gone), *(query for _, query in ahead)])
        self._server.prefetched[self.archive.rows_key(*gone)] = results[0]
        for (key, _), rows in zip(ahead, results[1:]):
            self._server.prefetched[key] = rows

    def plan_batch(self, requests: Iterable[tuple[str, str]], cutoff: float) -> None:
        """A batch of remembers (type, text) in this transaction: each type's candidate rows are
        read once, within the key lengths every text of the batch reaches."""
        for type_name, text in requests:
            if type_name not in self.active._merge_types:
                self._server.reads.plan(type_name, *reachable_lengths(text, cutoff))

    # --- export and loading files

    def load_rows(self, active: list[Row], archive: list[Row], log_lines: list[bytes]) -> dict[str, int]:
        """Add what the server does not hold yet, in order, under the memory's lock alone: an
        L5 line whose id is active here with other bytes is refused (nothing is loaded)."""
        added = {}
        with self.transaction(0.0, whole=True):
            for part, rows in ((self.active, active), (self.archive, archive)):
                held = part.snapshot().rows
                have = {r.raw for r in held}
                if part is self.active:
                    _refuse_clashes(held, rows)
                fresh = [Row(r.raw, r.entry) for r in rows if r.raw not in have]
                if fresh:
                    with self._server.change():
                        part._insert(fresh)
                        self._server.bump(part._part, appended=True, rewritten=False)
                added[part._label] = len(fresh)
            have_log = {raw for _, raw in self.log_lines()}
            new_log = [line for line in log_lines if line not in have_log]
            self.append_log_lines(new_log)
            added["dream log"] = len(new_log)
        return added


def _refuse_clashes(held: list[Row], rows: list[Row]) -> None:
    mine = {r.entry.id: r.raw for r in held if r.entry is not None}
    for row in rows:
        if row.entry is not None and mine.get(row.entry.id, row.raw) != row.raw:
            raise UsageError(f"{row.entry.id} is active on the server with other contents; nothing was loaded "
                             "(export the server's memory, reconcile, then load again)")


def open_server_store(settings) -> PostgresEntryStore:
    """The store of a memory whose `[store] backend` is "postgres"."""
    schema = pg.schema_for(str(settings.get("store", "memory")))
    merge_types = frozenset(t for t, spec in settings.types.items() if spec.get("policy") == "merge")
    return PostgresEntryStore(server_for(pg.dsn_from_env(), schema), merge_types)
