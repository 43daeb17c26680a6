"""What the remembers of one server transaction read once and share (issue #30).

`memctl serve` writes a batch of remembers in one transaction (memctl.serve.batcher). Each
remember asks the same questions of L5 and L6: the rows of its type that could be a near
duplicate, the entries forgotten or purged for good, L5's count. Asked per remember, a batch
of 32 read L5's rows of one type 32 times. Here they are read once per transaction and kept
up to date with the transaction's own appends; any other change (a rewrite, a replace, a
removal, a cut back) drops them, and the next question reads again.

Kept rows stay true: a type's rows are read under that type's lock (`lock_types`), which
every other writer of the type waits for until this transaction ends, so no row of the type
appears or changes but this transaction's own; the entries gone for good change only with L6,
whose every change drops them.

A long-lived writer (memctl serve's) also carries a type's listing from one committed
transaction to the next (`SharedReads.carried`): the next reads only the rows after the seq
it was read at, with L5's `rewrites` counter in the same statement. By the schema's contract
(memctl.longterm.pg_schema) every change to L5 other than an append bumps that counter in its
own transaction and seqs become visible in increasing order, so when the counter is what this
writer left it at, the carried rows and the new ones are L5's rows of the type; when another
writer rewrote anything, the listing is read whole again. Issue #30: a batch read every row of
its type, thousands, where a few were new.
"""

from __future__ import annotations

from memctl.longterm.entries import BAD_LINE, Entry
from memctl.longterm.policies import match_key
from memctl.longterm.store_base import Candidates

UNBOUNDED = 1 << 30  # the highest key length a bound names on the server


class Listing:
    """The rows of one type whose key length is within `low`..`high` (or unknown: NULL),
    as (seq, id, near_key, raw where near_key is NULL), in seq order.

    Each remember of a batch asks it for the keys within its own bounds; their seqs and keys
    are resolved once (`keyed`) and kept in step with the batch's appends, so that a question
    is a copy of two lists (or one filtering pass), not a parse of every row (issue #30: at a
    few thousand rows of a type this was a third of the writer's time)."""

    __slots__ = ("low", "high", "rows", "_seqs", "_keys", "_shortest", "_longest", "after", "rewrites")

    def __init__(self, low: int, high: int, rows: list[tuple]) -> None:
        self.low, self.high, self.rows = low, high, rows
        self._seqs: list[int] | None = None
        self._keys: list[str] = []
        self._shortest, self._longest = UNBOUNDED, 0
        self.after = 0  # L5's last_seq when read: every row of the type up to it is held
        self.rewrites: int | None = None  # L5's rewrites counter then, less this transaction's own

    def merge(self, rows: list[tuple], type_name: str) -> None:
        """The rows of the type after `after`, read since: those not held already (this
        writer's own, appended before) added in order."""
        held = set()
        for row in reversed(self.rows):
            if row[0] <= self.after:
                break
            held.add(row[0])
        for row in rows:
            if row[0] not in held:
                self.add(row, type_name)

    def covers(self, low: int, high: int) -> bool:
        return _covers(self.low, self.high, low, high)

    def keyed(self, type_name: str) -> tuple[list[int], list[str], int, int]:
        """The seqs and match keys of the rows that are entries of this type, in order, and
        the shortest and longest key's length."""
        if self._seqs is None:
            self._seqs, self._keys = [row[0] for row in self.rows], [row[2] for row in self.rows]
            if None in self._keys:  # rows whose key the columns do not hold: each resolved
                self._seqs, self._keys = [], []
                for row in self.rows:
                    self._add_key(row, type_name)
            lengths = list(map(len, self._keys))
            self._shortest, self._longest = min(lengths, default=UNBOUNDED), max(lengths, default=0)
        return self._seqs, self._keys, self._shortest, self._longest

    def add(self, row: tuple, type_name: str) -> None:
        """A row appended by this transaction (its seq past every row held, unless renumbered)."""
        if self.rows and self.rows[-1][0] > row[0]:
            self.rows.append(row)
            self.rows.sort(key=_seq)
            self._seqs = None
            return
        self.rows.append(row)
        if self._seqs is not None:
            self._add_key(row, type_name)

    def _add_key(self, row: tuple, type_name: str) -> None:
        seq, _, near_key, raw = row
        if near_key is None:  # an older row, or one the columns cannot hold exactly: as written
            entry = _entry(raw)
            if entry is None or entry.type != type_name:
                return
            near_key = match_key(entry.text)
        self._seqs.append(seq)
        self._keys.append(near_key)
        if self._shortest <= len(near_key) <= self._longest:
            return
        self._shortest = min(self._shortest, len(near_key))
        self._longest = max(self._longest, len(near_key))

    def drop(self, seq: int) -> None:
        self.rows[:] = [row for row in self.rows if row[0] != seq]
        self._seqs = None

    def renumber(self, seqs: dict[int, int]) -> None:
        """Provisional seqs become the server's: they are past every other, so at the end."""
        index = len(self.rows) - 1
        while index >= 0 and self.rows[index][0] in seqs:
            self.rows[index] = (seqs[self.rows[index][0]], *self.rows[index][1:])
            index -= 1
        index = len(self._seqs or ()) - 1
        while index >= 0 and self._seqs[index] in seqs:
            self._seqs[index] = seqs[self._seqs[index]]
            index -= 1


def _covers(held_low: int, held_high: int, low: int, high: int) -> bool:
    return held_low <= low and min(high, UNBOUNDED) <= held_high


class SharedReads:
    """One transaction's kept reads (memctl.longterm.pg_conn.Server.reads)."""

    def __init__(self, carried: dict[str, Listing] | None = None) -> None:
        self.planned: dict[str, tuple[int, int]] = {}  # type -> the key lengths a batch's texts reach
        self.listings: dict[str, Listing] = {}
        self.gone: list | None = None  # gone_for_good's entries
        self.count: int | None = None  # L5's rows
        self.carried: dict[str, Listing] = carried or {}  # the listings the last committed transaction left
        self.own_rewrites = 0  # the bumps of L5's rewrites counter this transaction made

    def to_carry(self) -> dict[str, Listing]:
        """The listings to carry once this transaction committed: each with the rewrites
        counter its transaction left L5 at (one carried in and not read stays as it was: its
        counters tell whether it still holds)."""
        carried = dict(self.carried)
        for type_name, listing in self.listings.items():
            if listing.rewrites is not None:
                listing.rewrites += self.own_rewrites
                carried[type_name] = listing
        return carried

    def listing_read(self, type_name: str, low: int, high: int) -> tuple[int, int, int]:
        """(low, high, after) to read a type's listing with: after a carried listing's seq when
        it covers these bounds (0: every row), the bounds widened to the carried one's."""
        carried = self.carried.get(type_name)
        if carried is None:
            return low, high, 0
        if carried.covers(low, high):
            return carried.low, carried.high, carried.after
        return min(low, carried.low), max(high, carried.high), 0

    def read_listing(self, type_name: str, low: int, high: int, after: int, found: list[tuple]) -> Listing | None:
        """The listing of rows (last_seq, rewrites, then a listing row or NULLs) read with
        `listing_read`'s bounds; None when a carried one turned out stale (read it whole)."""
        if not found:  # no counters row (the schema makes both): nothing to carry
            listing = Listing(low, high, [])
            self.listings[type_name] = listing
            return listing
        last_seq, rewrites = found[0][0], found[0][1]
        rows = [tuple(row[2:]) for row in found if row[2] is not None]
        if after:
            listing = self.carried.pop(type_name)
            if listing.rewrites != rewrites:
                return None
            listing.merge(rows, type_name)
        else:
            listing = Listing(low, high, rows)
        listing.after, listing.rewrites = last_seq, rewrites - self.own_rewrites
        self.listings[type_name] = listing
        return listing

    def plan(self, type_name: str, low: int, high: int) -> None:
        """A batch will ask for candidates of this type within these key lengths."""
        known = self.planned.get(type_name)
        high = min(high, UNBOUNDED)
        self.planned[type_name] = (low, high) if known is None else (min(known[0], low), max(known[1], high))

    def bounds_to_read(self, type_name: str, low: int, high: int) -> tuple[int, int] | None:
        """The bounds to read a listing with (the batch's, when they cover these), or None:
        this question is asked alone."""
        planned = self.planned.get(type_name)
        if planned is None or not _covers(*planned, low, high):
            return None
        return planned

    def listing(self, type_name: str, low: int, high: int) -> Listing | None:
        found = self.listings.get(type_name)
        return found if found is not None and found.covers(low, high) else None

    def appended_active(self, listed: list[tuple[str, tuple, int]], counted: bool = True) -> None:
        """Rows this transaction appended to L5: (type, listing row, key length or -1)."""
        if self.count is not None and counted:
            self.count += len(listed)
        gone_ids = {entry.id for entry in self.gone or ()}
        for type_name, row, length in listed:
            if row[1] in gone_ids:  # an id gone for good is active again: it no longer is
                self.gone = None
            held = self.listings.get(type_name)
            if held is not None and (length < 0 or held.low <= length <= held.high):
                held.add(row, type_name)

    def replaced(self, old_seq: int, new: tuple[str, tuple, int]) -> None:
        """A row of L5 replaced by `new` (in its place: the same seq; at the end: a new one);
        an id active before and after, so L5's count and the entries gone for good hold."""
        for listing in self.listings.values():
            listing.drop(old_seq)
        self.appended_active([new], counted=False)

    def renumbered(self, seqs: dict[int, int]) -> None:
        """A batch's pending rows sent: their provisional seqs become the server's."""
        for listing in self.listings.values():
            listing.renumber(seqs)

    def changed(self) -> None:
        """A change other than an append to L5: what was kept is read again when asked."""
        self.listings.clear()
        self.carried.clear()
        self.gone = None
        self.count = None


def _seq(row: tuple) -> int:
    return row[0]


def kept_candidates(listing: Listing, type_name: str, low: int, high: int, loader) -> Candidates:
    """`candidates` answered from a kept listing: the keys within this text's bounds, and each
    row read only when asked for (`loader(seq)`: its load)."""
    all_seqs, all_keys, shortest, longest = listing.keyed(type_name)
    if low <= shortest and longest <= high:  # every key within the bounds (texts of like length)
        keys, seqs = list(all_keys), list(all_seqs)
    else:
        within = [index for index, key in enumerate(all_keys) if low <= len(key) <= high]
        keys, seqs = [all_keys[index] for index in within], [all_seqs[index] for index in within]
    return Candidates(None, lambda index: loader(seqs[index])(), keys)


def _entry(raw) -> Entry | None:
    import json

    try:
        return Entry.from_dict(json.loads(bytes(raw)))
    except BAD_LINE:
        return None
