"""Applying a dream plan: the guard rail, the dream lock and the short locked steps.

`check_guard` refuses a plan that would remove more of L5 than `[dream] max_remove_share`.
`apply_steps` applies a plan in at most a few steps under the writer lock: each step re-reads
L5, applies only the changes whose entries are still byte-for-byte what was planned, then
writes the L6 copies and the audit records before L5 (a crash leaves duplicates, never a
loss). Each audit record keeps the before lines and the anchor of every removed entry,
which is what `memctl.longterm.dream_undo` puts back.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import replace
from datetime import datetime
from typing import Iterator

from memctl.core.clock import iso
from memctl.core.config import Layout, Settings
from memctl.core.errors import LockBusy, MemctlError
from memctl.core.fsutil import open_lock_file, try_lock
from memctl.longterm.dream_plan import OPS, Change, Plan
from memctl.longterm.dream_refs import Refs, fold
from memctl.longterm.entries import Row, Snapshot
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import JsonlEntryStore, duplicate_ids, open_store

STEP_CHANGES = 1000  # changes applied per locked step (at least): keeps each lock hold short
MAX_STEPS = 6
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
        yield
    finally:
        os.close(fd)


def apply_steps(layout: Layout, plan_: Plan, planned: Snapshot, run_id: str, now: datetime,
                wait: float, first_step: int = 0) -> tuple[list[Change], int, Snapshot, list[float]]:
    """Apply the plan in locked steps; a change applies only if its entries are unchanged.
    Returns the changes applied, how many were skipped, L5 as last written, and how long
    each step held the writer lock."""
    store = open_store(layout)
    expected = {row.entry.id: row.raw for row in planned.rows if row.entry is not None}
    applied: list[Change] = []
    skipped = 0
    snapshot = planned
    held: list[float] = []
    for batch in _batches(plan_):
        with writing(layout, wait, STEP_POLL, whole=True):
            locked_at = time.monotonic()
            snapshot = store.active.snapshot(previous=snapshot)
            position = {row.entry.id: k for k, row in enumerate(snapshot.rows) if row.entry is not None}
            good, stale = _still_planned(batch, snapshot.rows, position, expected, plan_.refs,
                                         duplicate_ids(snapshot.rows))
            skipped += stale
            if not good:
                continue
            offset = None
            if batch[0].op == "refs" and plan_.refs.offset_after != plan_.refs.offset_before:
                offset = plan_.refs.offset_after
            step = Step(layout, store, run_id, first_step + len(held), offset)
            snapshot = step.write(snapshot.rows, position, good, iso(now))
            held.append(time.monotonic() - locked_at)
        applied.extend(good)
        expected.update((e.id, store.stored_form(e)) for c in good for e in c.after)
    return applied, skipped, snapshot, held


def _batches(plan_: Plan) -> list[list[Change]]:
    """The reference folds first, then the other changes in at most MAX_STEPS batches
    (every step costs a pass over L5 whatever its size)."""
    refs_first = [c for c in plan_.changes if c.op == "refs"]
    others = [c for c in plan_.changes if c.op != "refs"]
    size = max(STEP_CHANGES, math.ceil(len(others) / MAX_STEPS))
    return ([refs_first] if refs_first else []) + [others[i:i + size] for i in range(0, len(others), size)]


def _still_planned(batch: list[Change], rows: list[Row], position: dict[str, int], expected: dict[str, bytes],
                   refs: Refs, twice: set[str]) -> tuple[list[Change], int]:
    """The changes of a batch that still apply to L5 as it is now, and how many do not. A
    change about an id that is on two lines of L5 never applies: it would drop one text."""
    good, skipped = [], 0
    for change in batch:
        if any(e.id in twice for e in change.before):
            skipped += 1
        elif change.op == "refs":
            # additive: fold into whatever the entry is now
            live = [rows[position[e.id]].entry for e in change.before if e.id in position]
            if live:
                good.append(Change("refs", live, [fold(e, refs) for e in live], change.reason))
        elif any(e.id not in position or rows[position[e.id]].raw != expected.get(e.id) for e in change.before):
            skipped += 1
        else:
            good.append(change)
    return good, skipped


class Step:
    """One locked step, journaled: its intent (what L5 will hash to, where L6 and the log end
    now, the reference offset to write) goes to `.memctl/journal/` first and is deleted last,
    so a step cut off anywhere is finished or rolled back by the next writer
    (`memctl.longterm.recovery`): the new counts and the offset land together or not at all."""

    def __init__(self, layout: Layout, store: JsonlEntryStore, run_id: str, number: int, offset: int | None):
        self.layout, self.store, self.run_id, self.number, self.offset = layout, store, run_id, number, offset

    def write(self, rows: list[Row], position: dict[str, int], good: list[Change], stamp: str) -> Snapshot:
        """The L6 copies and the audit records first, L5 last — a crash leaves duplicates,
        never a loss — then the offset."""
        new_rows, to_l6, records = _step_contents(self.store, rows, position, good, self.run_id, stamp, self.number)
        then = [] if self.offset is None else [{"do": "offset", "value": self.offset}]
        with journaled_rewrite(self.layout, self.store, "dream", f"{self.run_id}-{self.number}", new_rows, then):
            self.store.archive.append(to_l6)
            self.store.append_log(records)
            snapshot = self.store.active.rewrite(new_rows)
        return snapshot


def _step_contents(store: JsonlEntryStore, rows: list[Row], position: dict[str, int], good: list[Change],
                   run_id: str, stamp: str, step: int) -> tuple[list[Row], list, list[dict]]:
    """What one step writes: L5's new rows, the L6 copies, the audit records."""
    removed_ids = {e.id for c in good for e in c.removed}
    anchors = _anchors(rows, removed_ids)
    replacements = {e.id: e for c in good for e in c.after if e.id in position}
    new_rows: list[Row] = []
    for row in rows:
        entry_id = row.entry.id if row.entry is not None else None
        if entry_id in removed_ids:
            continue
        new_rows.append(store.row_for(replacements[entry_id]) if entry_id in replacements else row)
    new_rows += [store.row_for(e) for c in good for e in c.added]
    to_l6 = [replace(e, left_at=stamp, reason=REASONS[c.op], note=c.reason, run=run_id, extra=dict(e.extra))
             for c in good for e in c.removed]
    records = [{"run": run_id, "at": stamp, "op": c.op, "step": step,
                "ids": [e.id for e in c.before] + [e.id for e in c.added],
                "before": [store.record_of(rows[position[e.id]]) for e in c.before],
                "after": [e.to_dict() for e in c.after], "reason": c.reason,
                "anchors": {e.id: anchors.get(e.id) for e in c.removed}} for c in good]
    return new_rows, to_l6, records


def _anchors(rows: list[Row], removed: set[str]) -> dict[str, str | None]:
    """For each removed id, the id of the parsed row before it (None: first)."""
    anchors: dict[str, str | None] = {}
    previous = None
    for row in rows:
        if row.entry is None:
            continue
        if row.entry.id in removed:
            anchors[row.entry.id] = previous
        previous = row.entry.id
    return anchors
