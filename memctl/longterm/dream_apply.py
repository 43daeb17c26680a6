"""Applying a dream plan: the guard rail, the dream lock and the short locked steps.

`check_guard` refuses a plan that would remove more of L5 than `[dream] max_remove_share`.
`apply_steps` applies a plan in at most a few steps under the writer lock: each step re-reads
L5, applies only the changes whose entries are still byte-for-byte what was planned, then
writes the L6 copies and the audit records before L5 (a crash leaves duplicates, never a
loss). Each audit record keeps the before lines and the anchor of every removed entry,
which is what `memctl.longterm.dream_undo` puts back.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import math
import os
import time
from array import array
from datetime import datetime
from typing import Iterable, Iterator

from memctl.core.clock import iso
from memctl.core.config import Layout, Settings
from memctl.core.errors import LockBusy, MemctlError
from memctl.core.fsutil import open_lock_file, try_lock
from memctl.longterm.dream_plan import OPS, Change, Plan
from memctl.longterm.dream_refs import Refs, fold
from memctl.longterm.dream_rows import Rewrite, StagedLean, view_of
from memctl.longterm.dream_scratch import ScratchLines
from memctl.longterm.entries import Row, Snapshot, parse_rows
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import JsonlEntryStore, open_store

STEP_CHANGES = 1000  # changes applied per locked step (at least): keeps each lock hold short
MAX_STEPS = 6
STAGED_TRIES = 3  # a step planned again when L5 was rewritten under it, then done under the lock
STEP_POLL = 0.002  # flock is not fair: poll often, or a stream of remembers starves the dream
REASONS = {"consolidate": "consolidated", "archive": "archived", "forget": "forgotten", "merge": "merged"}


class GuardRail(MemctlError):
    """A run would remove more of L5 than the configured share."""


def check_guard(plan_: Plan, settings: Settings, force: bool) -> None:
    share = float(settings.get("dream", "max_remove_share"))
    removing = plan_.net_removed
    if plan_.l5_count == 0 or removing <= share * plan_.l5_count or force:
        return
    counts = plan_.counts()
    detail = ", ".join(f"{op} {counts[op]}" for op in OPS if counts.get(op))
    raise GuardRail(
        f"dream stopped, nothing changed: it would remove {removing} of {plan_.l5_count} L5 entries "
        f"({removing / plan_.l5_count:.0%}; {detail}), more than [dream] max_remove_share = {share:g}. "
        "Review with `memctl dream --dry-run`, then rerun with --force (or raise max_remove_share)."
    )


@contextlib.contextmanager
def dream_lock(layout: Layout) -> Iterator[None]:
    """Only one dream at a time (separate from the writer lock, which it takes in short steps)."""
    fd = open_lock_file(layout.state_dir / "dream.lock")
    try:
        if not try_lock(fd):
            raise LockBusy("another memctl dream is running on this memory; retry later")
        store = open_store(layout)
        if not store.on_server:
            store.active.remove_staged()  # a killed dream's: only a dream stages them
        yield
    finally:
        os.close(fd)


def apply_steps(layout: Layout, plan_: Plan, planned: Snapshot, run_id: str, now: datetime,
                wait: float, first_step: int = 0, progress=None) -> tuple[list[Change], int, Snapshot, list[float]]:
    """Apply the plan in locked steps; a change applies only if its entries are unchanged.
    Returns the changes applied, how many were skipped, L5 as last written, and how long
    each step held the writer lock. `progress(changes done, changes, step)` hears each step."""
    store = open_store(layout)
    run = _Run(layout, store, plan_, run_id, iso(now), wait, _planned_digests(plan_, view_of(planned.rows)))
    applied: list[Change] = []
    skipped = 0
    snapshot = planned
    held: list[float] = []
    done = 0
    for batch in _batches(plan_):
        number = first_step + len(held)
        if progress:
            progress(done, len(plan_.changes), f"step {number + 1}")
        outcome = None
        for _ in range(0 if store.on_server else STAGED_TRIES):  # a server step is one transaction
            outcome = run.staged_step(batch, snapshot, number)
            if outcome is not None:
                break
        if outcome is None:  # L5 kept changing under the staged steps: do this one under the lock
            outcome = run.locked_step(batch, snapshot, number)
        good, stale, snapshot, hold = outcome
        skipped += stale
        if hold is not None:
            held.append(hold)
        applied.extend(good)
        run.expected.update((e.id, line_digest(store.stored_form(e))) for c in good for e in c.after)
        done += len(batch)
    if progress:
        progress(done, len(plan_.changes), "")
    return applied, skipped, snapshot, held


class _Run:
    """One dream's steps. A step is planned and its new L5 written beside L5 outside the lock
    (`staged_step`); under the lock only what was appended meanwhile is added and the files
    put in place, so a lock hold costs a few fsyncs whatever the size of L5. When L5 was
    changed otherwise meanwhile (a supersede, a person's edit), the step is planned again."""

    def __init__(self, layout: Layout, store: JsonlEntryStore, plan_: Plan, run_id: str, stamp: str,
                 wait: float, expected: "Planned") -> None:
        self.layout, self.store, self.plan, self.run_id = layout, store, plan_, run_id
        self.stamp, self.wait, self.expected = stamp, wait, expected  # id -> digest of its planned line

    def _prepare(self, batch: list[Change], snapshot: Snapshot) -> tuple[list[Change], int, "_Located"]:
        view = view_of(snapshot.rows)
        located = _Located(view, {i for c in batch for i in c.before_ids + c.after_ids})
        good, stale = _still_planned(batch, view, located.position, self.expected, self.plan.refs, located.twice)
        return good, stale, located

    def _step(self, batch: list[Change], number: int) -> Step:
        offset = None
        if batch[0].op == "refs" and self.plan.refs.offset_after != self.plan.refs.offset_before:
            offset = self.plan.refs.offset_after
        return Step(self.layout, self.store, self.run_id, number, offset)

    def staged_step(self, batch: list[Change], snapshot: Snapshot, number: int):
        """(applied, stale, L5 now, lock hold), or None when L5 changed other than by appends."""
        snapshot = self.store.active.snapshot(previous=snapshot, lean=True)
        good, stale, located = self._prepare(batch, snapshot)
        if not good:
            return [], stale, snapshot, None
        contents = _Contents(self.store, located, good, self.run_id, self.stamp, number)
        added = {i for c in good for i in c.after_ids if i not in set(c.before_ids)}
        step = self._step(batch, number)
        prepared = self.store.active.prepare_rewrite(contents.rewrite)
        payloads = contents.encoded(prepared)
        try:
            staged = self.store.active.stage_lean_rewrite(contents.rewrite)
        except BaseException:
            _close(payloads)
            raise
        try:
            with writing(self.layout, self.wait, STEP_POLL, whole=True):
                locked_at = time.monotonic()
                tail = self.store.active.appended_since(snapshot)
                tail_rows = parse_rows(tail) if tail else []
                if tail is None or not _new_ids_only(tail_rows, located, added) or not staged.present():
                    return None
                written = step.commit(staged, tail, tail_rows, payloads, prepared)
                return good, stale, written, time.monotonic() - locked_at
        finally:
            staged.discard()
            _close(payloads)

    def locked_step(self, batch: list[Change], snapshot: Snapshot, number: int):
        with writing(self.layout, self.wait, STEP_POLL, whole=True):
            locked_at = time.monotonic()
            snapshot = self.store.active.snapshot(previous=snapshot, lean=True)
            good, stale, located = self._prepare(batch, snapshot)
            if not good:
                return [], stale, snapshot, None
            contents = _Contents(self.store, located, good, self.run_id, self.stamp, number)
            step = self._step(batch, number)
            if contents.rewrite is None:  # rows held as a list: a server's
                written = step.write(contents.new_rows, *contents.lists())
            else:
                prepared = self.store.active.prepare_rewrite(contents.rewrite)
                payloads = contents.encoded(prepared)
                try:
                    staged = self.store.active.stage_lean_rewrite(contents.rewrite)
                    try:
                        written = step.commit(staged, b"", [], payloads, prepared)
                    finally:
                        staged.discard()
                finally:
                    _close(payloads)
            return good, stale, written, time.monotonic() - locked_at


def _close(payloads: tuple[ScratchLines, ScratchLines]) -> None:
    for scratch in payloads:
        scratch.close()


class _Located:
    """Where the ids a step touches are in L5 now (their last line), which of them are on two
    lines, the id of the entry before each (its anchor for an undo), and a filter of every id
    in L5 (what an append made meanwhile must not repeat) — one pass over the ids, none of the
    rest held."""

    BITS = 1 << 24

    def __init__(self, view, wanted: set[str]) -> None:
        self.view = view
        self.position: dict[str, int] = {}
        self.twice: set[str] = set()
        self.anchor: dict[str, str | None] = {}
        self._bits = bytearray(self.BITS // 8)
        previous = None
        for position, entry_id in view.ids():
            if entry_id is None:
                continue
            bit = hash(entry_id) % self.BITS
            self._bits[bit >> 3] |= 1 << (bit & 7)
            if entry_id in wanted:
                if entry_id in self.position:
                    self.twice.add(entry_id)
                self.position[entry_id] = position
                self.anchor[entry_id] = previous
            previous = entry_id

    def holds_any(self, ids: list[str]) -> bool:
        """Whether L5 as located holds any of `ids` (the filter first, then the ids themselves)."""
        maybe = {i for i in ids if self._bits[(hash(i) % self.BITS) >> 3] & (1 << (hash(i) % self.BITS & 7))}
        return bool(maybe) and any(entry_id in maybe for _, entry_id in self.view.ids())


def _new_ids_only(rows: list[Row], located: _Located, added: set[str]) -> bool:
    """Whether the lines appended meanwhile are all entries the step does not know (a line
    that does not parse, or an id on two lines, is for the locked path to weigh)."""
    ids = [row.entry.id for row in rows if row.entry is not None]
    return len(ids) == len(rows) and len(set(ids)) == len(ids) and added.isdisjoint(ids) \
        and not located.holds_any(ids)


def _batches(plan_: Plan) -> list[list[Change]]:
    """The reference folds first, then the other changes in at most MAX_STEPS batches
    (every step costs a pass over L5 whatever its size)."""
    refs_first = [c for c in plan_.changes if c.op == "refs"]
    others = [c for c in plan_.changes if c.op != "refs"]
    size = max(STEP_CHANGES, math.ceil(len(others) / MAX_STEPS))
    return ([refs_first] if refs_first else []) + [others[i:i + size] for i in range(0, len(others), size)]


def _still_planned(batch: list[Change], view, position: dict[str, int], expected: "Planned",
                   refs: Refs, twice: set[str]) -> tuple[list[Change], int]:
    """The changes of a batch that still apply to L5 as it is now, and how many do not. A
    change about an id that is on two lines of L5 never applies: it would drop one text."""
    good, skipped = [], 0
    for change in batch:
        if any(i in twice for i in change.before_ids):
            skipped += 1
        elif change.op == "refs":
            # additive: fold into whatever the entry is now
            live = [view.entry_at(position[i]) for i in change.before_ids if i in position]
            if live:
                good.append(Change("refs", live, [fold(e, refs) for e in live], change.reason))
        elif any(i not in position or not expected.matches(i, view.raw_at(position[i]))
                 for i in change.before_ids):
            skipped += 1
        else:
            good.append(change)
    return good, skipped


def line_digest(raw: bytes) -> bytes:
    """What a change remembers of a line it was planned on: whether it is still that line."""
    return hashlib.blake2b(raw, digest_size=16).digest()


def _planned_digests(plan_: Plan, view) -> "Planned":
    """The digest of the line of each entry a change was planned on (the last line of its id)."""
    wanted = {i for c in plan_.changes for i in c.before_ids}
    positions, hashes = array("i"), array("q")
    for k, entry_id in view.ids():
        if entry_id in wanted:
            positions.append(k)
            hashes.append(id_key(entry_id))
    del wanted
    order = sorted(range(len(hashes)), key=hashes.__getitem__)  # stable: positions ascending within a hash
    planned = Planned()
    for n, k in enumerate(order):
        if _seen_later(view, order, n, hashes, positions):
            continue  # an id on two lines: its last line is the one planned on
        planned.hashes.append(hashes[k])
        planned.digests += line_digest(view.raw_at(positions[k]))
    return planned


def id_key(entry_id: str) -> int:
    """What `Planned` sorts an id by (its hash; a test makes every id alike)."""
    return hash(entry_id)


def _seen_later(view, order: list[int], n: int, hashes: array, positions: array) -> bool:
    """Whether the id at `order[n]` is on a later line (its hash's next places in `order`)."""
    k = order[n]
    for later in range(n + 1, len(order)):
        m = order[later]
        if hashes[m] != hashes[k]:
            return False
        if view.id_at(positions[m]) == view.id_at(positions[k]):
            return True
    return False


class Planned:
    """id -> the digest of the line a change was planned on, for every id a plan's changes
    read (a million-entry plan: ~200,000) — the ids' hashes in a sorted flat array and their
    digests beside it, 24 bytes an id instead of a dict's ~150. Ids whose hashes are alike
    are told apart by the digest itself: a line holds its id."""

    SIZE = 16

    def __init__(self) -> None:
        self.hashes = array("q")
        self.digests = bytearray()

    def _slots(self, entry_id: str) -> range:
        key = id_key(entry_id)
        first = bisect.bisect_left(self.hashes, key)
        return range(first, bisect.bisect_right(self.hashes, key, first))

    def matches(self, entry_id: str, raw: bytes) -> bool:
        """Whether `raw` is the line the change about `entry_id` was planned on."""
        digest = line_digest(raw)
        return any(self.digests[k * self.SIZE:(k + 1) * self.SIZE] == digest for k in self._slots(entry_id))

    def update(self, pairs: Iterable[tuple[str, bytes]]) -> None:
        """The lines a step wrote for planned ids (a reference fold) are what later steps
        expect of them; other ids are in no change of the plan. Where two planned ids hash
        alike the new digest joins theirs (a line holds its id: it matches only its own)."""
        added = []
        for entry_id, digest in pairs:
            slots = self._slots(entry_id)
            if len(slots) == 1:
                self.digests[slots[0] * self.SIZE:(slots[0] + 1) * self.SIZE] = digest
            elif slots:
                added.append((id_key(entry_id), digest))
        for key, digest in added:
            at = bisect.bisect_right(self.hashes, key)
            self.hashes.insert(at, key)
            self.digests[at * self.SIZE:at * self.SIZE] = digest


class Step:
    """One locked step, journaled: its intent (what L5 will hash to, where L6 and the log end
    now, the reference offset to write) goes to `.memctl/journal/` first and is deleted last,
    so a step cut off anywhere is finished or rolled back by the next writer
    (`memctl.longterm.recovery`): the new counts and the offset land together or not at all."""

    def __init__(self, layout: Layout, store: JsonlEntryStore, run_id: str, number: int, offset: int | None):
        self.layout, self.store, self.run_id, self.number, self.offset = layout, store, run_id, number, offset

    def write(self, new_rows: list[Row], to_l6: list, records: list[dict]) -> Snapshot:
        """The L6 copies and the audit records first, L5 last — a crash leaves duplicates,
        never a loss — then the offset (rows held as a list: a server's step)."""

        def appends() -> None:
            self.store.archive.append(to_l6)
            self.store.append_log(records)

        with self._journaled(appends, new_rows=new_rows):
            return self.store.active.rewrite(new_rows)

    def commit(self, staged: StagedLean, tail: bytes, tail_rows: list[Row],
               payloads: tuple[ScratchLines, ScratchLines], prepared=None) -> Snapshot:
        """The same writes, L5 being a staged rewrite plus what was appended since it was read,
        the L6 copies and the audit records appended from their scratch files a chunk at a time
        (one fsync each; a chunk cut off is cut back with the rest by the journal). With
        `prepared` (`lookups_rewrite.Prepared`) and the write lookups current with L5 before the
        step, they follow its rewrite and catch up with its L6 copies: the next write finds
        them current, and reads neither file whole (issue #31)."""
        follows = prepared is not None and self.store.active.lookups_follow()
        l6_at = self.store.archive.length() if follows and self.store.archive.lookups_follow() else None
        written = self._commit(staged, tail, tail_rows, payloads)
        if follows:
            self.store.active.follow_rewrite(prepared, written.rows)
        if l6_at is not None:
            self.store.archive.follow_appends(prepared, l6_at)
        return written

    def _commit(self, staged: StagedLean, tail: bytes, tail_rows: list[Row],
                payloads: tuple[ScratchLines, ScratchLines]) -> Snapshot:

        def appends() -> None:
            for scratch, append in ((payloads[0], self.store.archive.append_encoded),
                                    (payloads[1], self.store.append_log_encoded)):
                if scratch.size:
                    append(scratch.chunks())

        with self._journaled(appends, l5_after=staged.digest_with(tail)):
            return staged.commit(tail, tail_rows)

    @contextlib.contextmanager
    def _journaled(self, appends, new_rows: list[Row] | None = None, l5_after: str = "") -> Iterator[None]:
        """The journal around the L6 and log appends (`appends`) and then the L5 write (the body)."""
        then = [] if self.offset is None else [{"do": "offset", "value": self.offset}]
        with journaled_rewrite(self.layout, self.store, "dream", f"{self.run_id}-{self.number}", new_rows, then,
                               l5_after=l5_after):
            appends()
            yield


class _Contents:
    """What one step writes: L5's new rows (a lean `Rewrite`, or a list of rows), then the L6
    copies and the audit records, made one change at a time as they are encoded (a step of
    20,000 changes: their dicts and entries all at once would be hundreds of MB)."""

    def __init__(self, store: JsonlEntryStore, located: _Located, good: list[Change], run_id: str, stamp: str,
                 step: int) -> None:
        self.store, self.located, self.good = store, located, good
        self.run_id, self.stamp, self.step = run_id, stamp, step
        view, position = located.view, located.position
        removed = {position[i] for c in good for i in c.before_ids if i not in set(c.after_ids)}
        replaced = {position[e.id]: e for c in good for e in c.after if e.id in position}
        added = [e for c in good for e in c.added]
        if view.lean:
            self.rewrite = Rewrite(view, removed, {k: store.stored_form(e) for k, e in replaced.items()},
                                   [(e.id, store.stored_form(e)) for e in added])
            self.new_rows = None
        else:
            self.rewrite = None
            self.new_rows = [store.row_for(replaced[k]) if k in replaced else row
                             for k, row in enumerate(view.rows) if k not in removed]
            self.new_rows += [store.row_for(e) for e in added]

    def per_change(self) -> Iterator[tuple[list, dict]]:
        """(the L6 copies, the audit record) of each change, in order."""
        view, position, anchor = self.located.view, self.located.position, self.located.anchor
        for c in self.good:
            before, after = c.before, c.after
            kept = set(c.after_ids)
            removed = [e for e in before if e.id not in kept]
            added = [e for e in after if e.id not in set(c.before_ids)]
            copies = [e.replace(left_at=self.stamp, reason=REASONS[c.op], note=c.reason, run=self.run_id,
                                extra=dict(e.extra)) for e in removed]
            record = {"run": self.run_id, "at": self.stamp, "op": c.op, "step": self.step,
                      "ids": [e.id for e in before] + [e.id for e in added],
                      "before": [self.store.record_of(view.row_at(position[e.id])) for e in before],
                      "after": [e.to_dict() for e in after], "reason": c.reason,
                      "anchors": {e.id: anchor.get(e.id) for e in removed}}
            yield copies, record

    def lists(self) -> tuple[list, list[dict]]:
        to_l6: list = []
        records: list[dict] = []
        for copies, record in self.per_change():
            to_l6 += copies
            records.append(record)
        return to_l6, records

    def encoded(self, prepared=None) -> tuple[ScratchLines, ScratchLines]:
        """The L6 copies and the audit records as lines, encoded a change at a time (thousands
        of entries encode in tenths of a second: a staged step does it before the lock) into
        scratch files, so that a step holds none of them (tens of MB at a million entries);
        the L6 lines also read for the write lookups (`prepared`), before the lock."""
        to_l6, log = ScratchLines(), ScratchLines()
        try:
            for copies, record in self.per_change():
                lines = self.store.archive.encode(copies)
                to_l6.write(lines)
                if prepared is not None:
                    prepared.add_l6(lines)
                log.write(self.store.encode_log([record]))
        except BaseException:
            to_l6.close()
            log.close()
            raise
        return to_l6, log
