"""The write lookups: `.memctl/lookups.sqlite`, derived from L5 and L6 so that a write never
reads either file whole under the lock.

What they hold: for L5, one row per entry line (id, type, normalized topic, the text's
`match_key` — what the near-duplicate check compares — and its length) and where the line is (byte offset, length); for L6, one row per id: where its
last line is and whether it says forgotten or purged, and its last forgotten-or-purged line
with that line's text and fingerprint (`sha256`). Each file's row in `state` records what the
lookups were derived from: inode, size, mtime_ns and the sha256 of its last 4 KiB.

Before each use (writer lock held) the state is checked against the file with one `stat`
and one 4 KiB read: the same file, unchanged, is used as is; the same file grown, its old last
4 KiB intact (an append — memctl's own, or another program's), is caught up by parsing only the
new lines; anything else (a rewrite by the dream or a purge, a person's edit, a truncation,
a lookup update that failed) rebuilds that file's rows from the file. memctl's own rewrites of
one line (`replace`, `remove`: a splice by byte offset) update the rows and the state in the
same transaction, after the file write. A failed update leaves the previous state in place,
which no longer matches the file: the next writer catches up or rebuilds. Nothing here is the
truth: deleting `.memctl/` loses nothing, and every answer is checked against the line it
points to (`Stale` when it does not match, and the caller falls back to a scan).

`MEMCTL_LOOKUPS=0` turns them off (every query scans the file: the reference answers, which
the tests compare with these).
"""

from __future__ import annotations

import os

from memctl.core import faults, jsoncodec, sqlite
from memctl.core.digest import sha256_hex
from memctl.core.errors import UnsafePath
from memctl.core.fsutil import holds_writer_lock, refuse_symlink
from memctl.core.jsonl import split_torn
from memctl.core.paths import join
from memctl.longterm.entries import BAD_LINE, Entry
from memctl.longterm.policies import CLASSES, candidate_windows, class_signature, key_classes, match_key, normalize_topic

TYPE_CHECKING = False  # pathlib stays off the write path (a str layout); annotations are never evaluated
if TYPE_CHECKING:
    from pathlib import Path

FILE_NAME = "lookups.sqlite"
SCHEMA_VERSION = 5
TAIL = 4096
GONE = ("forgotten", "purged")
_SCHEMA = """
CREATE TABLE state(file TEXT PRIMARY KEY, ino INTEGER, size INTEGER, mtime_ns INTEGER, tail TEXT,
                   lines INTEGER, bad INTEGER);
CREATE TABLE l5(seq INTEGER PRIMARY KEY, id TEXT NOT NULL, type TEXT NOT NULL, mkey TEXT NOT NULL,
                klen INTEGER NOT NULL, key TEXT NOT NULL, {class_columns});
CREATE INDEX l5_id ON l5(id);
CREATE INDEX l5_key ON l5(type, mkey);
CREATE INDEX l5_cand ON {candidates_index};
CREATE TABLE l5_at(seq INTEGER PRIMARY KEY, off INTEGER NOT NULL, len INTEGER NOT NULL);
CREATE TABLE l6(id TEXT PRIMARY KEY, off INTEGER NOT NULL, len INTEGER NOT NULL, gone INTEGER NOT NULL,
                gone_off INTEGER, gone_len INTEGER, gone_purged INTEGER, first_forgotten INTEGER,
                first_purged INTEGER, sha TEXT, klen INTEGER, text TEXT);
CREATE INDEX l6_gone ON l6(gone, klen);
CREATE INDEX l6_sha ON l6(gone, sha);
"""
_CLASS_NAMES = [f"c{i}" for i in range(CLASSES)]  # policies.key_classes of the key
# `sig`: class_signature of those counts; the digits' count (c1) right after the length, so
# that the candidates' query seeks a range of it within each length (see `candidate_windows`)
_CANDIDATES_INDEX = f"l5(type, klen, c1, sig, seq, {', '.join(n for n in _CLASS_NAMES if n != 'c1')}, key)"
_SCHEMA = _SCHEMA.format(class_columns=", ".join(f"{name} INTEGER NOT NULL DEFAULT 0" for name in [*_CLASS_NAMES, "sig"]),
                         candidates_index=_CANDIDATES_INDEX)
_L5_INSERT = f"INSERT INTO l5 VALUES ({', '.join('?' * (7 + CLASSES))})"
_L5_UPDATE = f"UPDATE l5 SET type=?, mkey=?, klen=?, key=?, {', '.join(n + '=?' for n in _CLASS_NAMES)}, sig=? WHERE seq=?"
# a row is a candidate only if its class counts allow the cutoff (policies.key_classes; the
# slack of 1e-6 keeps every row rapidfuzz's float rounding could let through)
_CLASS_BOUND = f"200.0 * ({' + '.join(f'min({n}, ?)' for n in _CLASS_NAMES)}) >= ? * (? + klen)"


# two seeks, one per index, not the gone rows' scan an OR makes (~35-80 ms at 76k forgotten
# ids); a UNION drops an id both find, as the OR did; each line's offset is its own, so the
# order is total
_GONE_COLUMNS = "id, gone_off, gone_len, first_forgotten, first_purged"
_GONE_FOR_GOOD = (f"SELECT id, gone_off, gone_len FROM (SELECT {_GONE_COLUMNS} FROM l6 WHERE gone=1 AND sha=? UNION "
                  f"SELECT {_GONE_COLUMNS} FROM l6 WHERE gone=1 AND klen BETWEEN ? AND ? AND text != '') AS g "
                  "WHERE NOT EXISTS (SELECT 1 FROM l5 WHERE l5.id = g.id) "
                  "ORDER BY first_forgotten IS NULL, coalesce(first_forgotten, first_purged)")


class Stale(Exception):
    """A lookup pointed at a line that is not what it said: use the scan, rebuild next time."""


def enabled() -> bool:
    return os.environ.get("MEMCTL_LOOKUPS", "1") != "0"


class Lookups:
    """The lookups of one memory; `view(which)` is usable only under the writer lock."""

    def __init__(self, state_dir: Path, lock_path: Path, files: dict[str, Path]) -> None:
        self._path = join(state_dir, FILE_NAME)
        self._lock = lock_path
        self._files = files  # "l5" / "l6" -> path
        self._db: sqlite.Connection | None = None
        self._checked: dict[str, tuple] = {}
        self._ro_state: dict[str, tuple] | None = None
        self.broken = False

    # --- opening and checking

    def view(self, which: str) -> "Lookups | None":
        """Self, current with that file, or None (off, not under the lock, or failing)."""
        if self.broken or not enabled() or not holds_writer_lock(self._lock):
            return None
        try:
            self._ensure_current(which)
        except (sqlite.Error, OSError, Stale, UnsafePath):  # a planted link: never used, the scan answers
            self.broken = True
            return None
        return self

    def _connect(self) -> sqlite.Connection:
        if self._db is None:
            _refuse_links(self._path)
            db = sqlite.connect(self._path, isolation_level=None, timeout=10)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version in (2, 3, 4):
                _migrate(db)
            elif version != SCHEMA_VERSION:
                _create(db)
            self._db = db
        return self._db

    def follows(self, which: str) -> bool:
        """`view` without the rebuild: whether the lookups are current with that file now (caught
        up when it only grew) — what a dream's step asks before it keeps them in step with its
        rewrite of L5 (`lookups_rewrite`), where a rebuild would hold the lock for seconds."""
        if self.broken or not enabled() or not holds_writer_lock(self._lock):
            return False
        try:
            return self._ensure_current(which, rebuild=False)
        except (sqlite.Error, OSError, Stale, UnsafePath):
            self.broken = True
            return False

    def _ensure_current(self, which: str, rebuild: bool = True) -> bool:
        path = self._files[which]
        stat = _stat(path)
        if self._checked.get(which) == stat:
            return True
        db = self._connect()
        row = db.execute("SELECT ino, size, mtime_ns, tail FROM state WHERE file=?", (which,)).fetchone()
        if row is not None and row[0] == stat[0]:
            ino, size, mtime_ns, tail = row
            # mtime -1: recorded with a torn tail after `size`, since cut off by the writer's settle
            if size == stat[1] and mtime_ns in (stat[2], -1) and tail == _tail_digest(path, size):
                self._checked[which] = stat
                return True
            if stat[1] > size and tail == _tail_digest(path, size):
                self._catch_up(which, path, size)
                return True
        if rebuild:
            self._rebuild(which, path)
        return rebuild

    def clean(self, which: str) -> bool:
        """Read-only, without the lock: whether the lookups are current with the file and saw
        no line that is not an entry (then `bad_lines` need not read the file)."""
        if not enabled() or not os.path.exists(self._path):
            return False
        row = self._read_only_state().get(which)
        path = self._files[which]
        stat = _stat(path)
        return row is not None and tuple(row[:3]) == stat and row[4] == 0 and row[3] == _tail_digest(path, stat[1])

    def _read_only_state(self) -> dict[str, tuple]:
        """Every file's state row, read once (one read-only connection for L5 and L6)."""
        if self._ro_state is None:
            try:
                _refuse_links(self._path)
                db = sqlite.connect(f"file:{self._path}?mode=ro", uri=True, timeout=1)
                try:
                    rows = db.execute("SELECT file, ino, size, mtime_ns, tail, bad FROM state").fetchall()
                finally:
                    db.close()
            except (sqlite.Error, UnsafePath):
                return {}
            self._ro_state = {row[0]: row[1:] for row in rows}
        return self._ro_state

    # --- building

    def _rebuild(self, which: str, path: Path) -> None:
        faults.derived_write("lookups-rebuild")
        data = _read(path)
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(f"DELETE FROM {which}")
            if which == "l5":
                db.execute("DELETE FROM l5_at")
            db.execute("DELETE FROM state WHERE file=?", (which,))
            db.execute("INSERT INTO state VALUES (?, 0, 0, 0, ?, 0, 0)", (which, _digest(b"")))
            self._add_lines(db, which, data, 0)
            self._record(db, which, path)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _catch_up(self, which: str, path: Path, size: int) -> None:
        faults.derived_write("lookups-catch-up")
        with open(path, "rb") as handle:
            handle.seek(size)
            data = handle.read()
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            consumed = self._add_lines(db, which, data, size)
            self._record(db, which, path, size + consumed)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _add_lines(self, db: sqlite.Connection, which: str, data: bytes, base: int) -> int:
        """Rows for the complete lines of `data` (found at offset `base`); bytes consumed."""
        whole = split_torn(data)[0]
        spans, entries = _parse_lines(whole, base)
        bad = sum(1 for e in entries if e is None)
        if which == "l5":
            next_seq = (db.execute("SELECT max(seq) FROM l5").fetchone()[0] or 0) + 1
            rows, at = [], []
            for (off, length), entry in zip(spans, entries):
                if entry is not None:
                    rows.append((next_seq, entry.id, *_l5_fields(entry)))
                    at.append((next_seq, off, length))
                    next_seq += 1
            db.executemany(_L5_INSERT, rows)
            db.executemany("INSERT INTO l5_at VALUES (?, ?, ?)", at)
        else:
            _add_l6(db, spans, entries)
        db.execute("UPDATE state SET lines = lines + ?, bad = bad + ? WHERE file=?", (len(spans), bad, which))
        return len(whole)

    def _record(self, db: sqlite.Connection, which: str, path: Path, size: int | None = None) -> None:
        stat = _stat(path)
        size = stat[1] if size is None else size
        mtime = stat[2] if size == stat[1] else -1  # a torn tail left: the next check catches up
        db.execute("UPDATE state SET ino=?, size=?, mtime_ns=?, tail=? WHERE file=?",
                   (stat[0], size, mtime, _tail_digest(path, size), which))
        self._checked[which] = (stat[0], size, mtime)

    # --- L5 queries

    def count(self, which: str) -> int:
        return self._connect().execute("SELECT lines FROM state WHERE file=?", (which,)).fetchone()[0]

    def spans(self, which: str, entry_id: str) -> list[tuple[int, int, int]]:
        """(seq, offset, length) of the lines this answers for an id: in L5 each line holding it,
        in file order; in L6 its last line."""
        if which == "l6":
            found = self._connect().execute("SELECT 0, off, len FROM l6 WHERE id=?", (entry_id,)).fetchone()
            return [tuple(found)] if found else []
        return self._connect().execute(
            "SELECT l5.seq, off, len FROM l5 JOIN l5_at USING (seq) WHERE id=? ORDER BY l5.seq", (entry_id,)).fetchall()

    def current(self, type_name: str, topic: str) -> str | None:
        found = self._connect().execute("SELECT id FROM l5 WHERE type=? AND mkey=? ORDER BY seq DESC LIMIT 1",
                                        (type_name, normalize_topic(topic))).fetchone()
        return found[0] if found else None

    def candidates(self, type_name: str, low: int, high: int, bound: tuple | None = None) -> list[str]:
        """The match keys of the L5 rows of a type with a key length in [low, high] — and, with
        `bound` = (key_classes of the query key, cutoff, its length), class counts that allow
        the cutoff — in file order: from one covering index (type, klen, digits' count, class
        signature, seq, the other counts, key), keys alone (the ids and offsets of tens of
        thousands of rows, joined, cost 3-4x more; `candidate_line` finds the one the caller
        picks)."""
        sql, params = _candidate_query("key", type_name, low, high, bound)
        return [key for (key,) in self._connect().execute(sql, params)]

    def candidate_line(self, type_name: str, low: int, high: int, index: int,
                       bound: tuple | None = None) -> tuple[str, int, int]:
        """(id, offset, length) of the `index`-th row `candidates` returned for the same
        arguments (the writer lock held since: nothing moved)."""
        sql, params = _candidate_query("seq", type_name, low, high, bound)
        return self._connect().execute(
            f"SELECT id, off, len FROM l5 JOIN l5_at USING (seq) WHERE seq = ({sql} LIMIT 1 OFFSET ?)",
            (*params, index)).fetchone()

    def holds(self, which: str, entry_id: str) -> bool:
        return self._connect().execute(f"SELECT 1 FROM {which} WHERE id=? LIMIT 1", (entry_id,)).fetchone() is not None

    # --- L6 queries

    def gone_for_good(self, fingerprint: str, low: int, high: int) -> list[tuple[str, int, int]]:
        """(id, offset, length) of the last forgotten-or-purged line of each id whose last L6
        line says so and which is not in L5: fingerprint matches and near-duplicate lengths."""
        return self._connect().execute(_GONE_FOR_GOOD, (fingerprint, low, high)).fetchall()

    # --- L5 changes made by memctl (the file is written; these follow it)

    def spliced(self, path: Path, removed: list[tuple[int, int, int]], added: tuple | None = None) -> None:
        """After a rewrite of L5 that dropped the lines `removed` ((seq, offset, length)) and
        wrote `added` = (entry, offset, length, in_place) — in place of the single removed line,
        or at the end — the rows and the state follow, in one transaction."""
        db = self._connect()
        faults.derived_write("lookups-splice")
        removed = sorted(removed)
        in_place = added is not None and added[3]
        db.execute("BEGIN IMMEDIATE")
        try:
            shift = 0
            for index, (seq, _, length) in enumerate(removed):
                if in_place:
                    shift += added[2] - length
                    db.execute("UPDATE l5_at SET len=? WHERE seq=?", (added[2], seq))
                    db.execute(_L5_UPDATE, (*_l5_fields(added[0]), seq))
                else:
                    shift -= length
                    db.execute("DELETE FROM l5 WHERE seq=?", (seq,))
                    db.execute("DELETE FROM l5_at WHERE seq=?", (seq,))
                upto = removed[index + 1][0] if index + 1 < len(removed) else 1 << 62
                if shift:
                    db.execute("UPDATE l5_at SET off = off + ? WHERE seq > ? AND seq < ?", (shift, seq, upto))
            lines = 0 if in_place else -len(removed)
            if added is not None and not in_place:
                entry, off, length, _ = added
                seq = (db.execute("SELECT max(seq) FROM l5").fetchone()[0] or 0) + 1
                db.execute(_L5_INSERT, (seq, entry.id, *_l5_fields(entry)))
                db.execute("INSERT INTO l5_at VALUES (?, ?, ?)", (seq, off, length))
                lines += 1
            db.execute("UPDATE state SET lines = lines + ? WHERE file='l5'", (lines,))
            self._record(db, "l5", path)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._checked.pop("l5", None)
            raise

    def follow(self, path: Path, removed: list[tuple[int, int, int]], added: tuple | None) -> None:
        """`spliced`, where a failure costs nothing but a rebuild by the next writer: the file
        is written, and the state left behind no longer matches it."""
        try:
            self.spliced(path, removed, added)
        except (sqlite.Error, OSError):
            self.broken = True

    def drop(self, which: str) -> None:
        """Forget what was derived from that file (a lookup did not match it): rebuilt next time."""
        self.broken = True
        self._checked.pop(which, None)
        try:
            self._connect().execute("DELETE FROM state WHERE file=?", (which,))
        except sqlite.Error:
            pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _create(db: sqlite.Connection) -> None:
    """The tables, from nothing (a file of another version is emptied first)."""
    db.execute("BEGIN IMMEDIATE")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        db.execute(f"DROP TABLE {name}")
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    db.execute("COMMIT")


def _migrate(db: sqlite.Connection) -> None:
    """Versions 2 and 3 lacked the class counts (and 2 the covering index), 4 their signature
    and L6's fingerprint index: they are added in place, from the stored keys (1.3 s of CPU at
    45k L5 and 255k L6 entries, against 16 s for a rebuild of both files from L5 and L6)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        present = {row[1] for row in db.execute("PRAGMA table_info(l5)")}
        for name in [*_CLASS_NAMES, "sig"]:
            if name not in present:
                db.execute(f"ALTER TABLE l5 ADD COLUMN {name} INTEGER NOT NULL DEFAULT 0")
        rows = [(*_class_fields(key), seq) for seq, key in db.execute("SELECT seq, key FROM l5").fetchall()]
        db.executemany(f"UPDATE l5 SET {', '.join(n + '=?' for n in _CLASS_NAMES)}, sig=? WHERE seq=?", rows)
        db.execute("DROP INDEX IF EXISTS l5_len")
        db.execute("DROP INDEX IF EXISTS l5_cand")
        db.execute(f"CREATE INDEX l5_cand ON {_CANDIDATES_INDEX}")
        db.execute("CREATE INDEX IF NOT EXISTS l6_sha ON l6(gone, sha)")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _candidate_query(column: str, type_name: str, low: int, high: int, bound: tuple | None) -> tuple[str, tuple]:
    """The SELECT of `column` over the candidates, in file order. With a bound, SQLite seeks
    each key length's range of digit counts and tests the class signature in the index before
    the class bound (`policies.candidate_windows`: conditions the bound implies, so the rows
    are the ones the bound alone keeps: at the bench's 300k memory, 2,126 index entries read
    and 258 rows tested, instead of 7,970 tested)."""
    if bound is None:
        return f"SELECT {column} FROM l5 WHERE type=? AND klen BETWEEN ? AND ? ORDER BY seq", (type_name, low, high)
    classes, cutoff, length = bound
    cutoff -= 1e-6
    windows = candidate_windows(classes, length, cutoff, low, high)
    if not windows:
        return f"SELECT {column} FROM l5 WHERE 0", ()
    lengths = "klen = w.shortest" if all(w[0] == w[1] for w in windows) else "klen BETWEEN w.shortest AND w.longest"
    values = ", ".join(["(?, ?, ?, ?, ?)"] * len(windows))
    return (f"WITH w(shortest, longest, fewest, most, ruled_out) AS (VALUES {values}) SELECT {column} FROM w "
            f"CROSS JOIN l5 ON type=? AND {lengths} AND c1 BETWEEN w.fewest AND w.most "
            f"WHERE (sig & w.ruled_out) = 0 AND {_CLASS_BOUND} ORDER BY seq",
            (*[value for window in windows for value in window], type_name, *classes, cutoff, length))


def _l5_fields(entry: Entry) -> tuple:
    key = match_key(entry.text)
    return (entry.type, normalize_topic(entry.topic), len(key), key, *_class_fields(key))


def _class_fields(key: str) -> tuple[int, ...]:
    classes = key_classes(key)
    return (*classes, class_signature(classes))


def _add_l6(db: sqlite.Connection, spans, entries) -> None:
    """Fold L6 lines into the per-id rows, in file order."""
    ids = list({e.id for e in entries if e is not None})
    known: dict[str, list] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for row in db.execute(f"SELECT * FROM l6 WHERE id IN ({marks})", chunk):
            known[row[0]] = list(row)
    for (off, length), entry in zip(spans, entries):
        if entry is None:
            continue
        row = known.setdefault(entry.id, [entry.id, 0, 0, 0, None, None, None, None, None, None, None, None])
        row[1], row[2], row[3] = off, length, int(entry.reason in GONE)
        if entry.reason in GONE:
            purged = entry.reason == "purged"
            if purged or not row[6]:  # a purged line wins over a forgotten one
                row[4], row[5], row[6] = off, length, int(purged)
                sha = entry.extra.get("sha256")
                row[9] = sha if isinstance(sha, str) else None
                row[10], row[11] = len(match_key(entry.text)), entry.text
            if purged and row[8] is None:
                row[8] = off
            if not purged and row[7] is None:
                row[7] = off
    db.executemany("INSERT OR REPLACE INTO l6 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", list(known.values()))


def _parse_lines(data: bytes, base: int) -> tuple[list[tuple[int, int]], list[Entry | None]]:
    """(offset, length) of each non-blank line, and its entry (None: not an entry)."""
    spans, raws = [], []
    off = base
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            spans.append((off, len(raw)))
            raws.append(raw)
        off += len(raw)
    return spans, _entries_of(raws)


def _entries_of(raws: list[bytes]) -> list[Entry | None]:
    """Each line's entry; all lines in one json call when every one parses (twice as fast)."""
    try:
        dicts = jsoncodec.loads(b"[" + b",".join(raws) + b"]")
    except (ValueError, RecursionError):
        return [entry_of(raw) for raw in raws]
    out = []
    for data in dicts:
        try:
            out.append(Entry.from_dict(data))
        except BAD_LINE:
            out.append(None)
    return out


def entry_of(raw: bytes) -> Entry | None:
    try:
        return Entry.from_dict(jsoncodec.loads(raw))
    except BAD_LINE:
        return None


def _refuse_links(path: Path) -> None:
    """The lookups file, its WAL and shared-memory files, and `.memctl` itself: SQLite creates the
    last two beside the file even on a read-only open, so a symlinked `.memctl` would get them
    written outside the root."""
    refuse_symlink(os.path.dirname(path), path, f"{path}-wal", f"{path}-shm")


def _stat(path: Path) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


def _tail_digest(path: Path, size: int) -> str:
    """sha256 of the `TAIL` bytes before `size` (what an append leaves as it was)."""
    if size <= 0:
        return _digest(b"")
    start = max(0, size - TAIL)
    with open(path, "rb") as handle:
        handle.seek(start)
        return _digest(handle.read(size - start))


def _digest(data: bytes) -> str:
    return sha256_hex(data)


def read_line(path: Path, off: int, length: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(off)
        return handle.read(length)
