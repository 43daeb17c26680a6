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
import fcntl
import math
import os
import time
from dataclasses import replace
from datetime import datetime
from typing import Iterator

from memctl.core.clock import iso
from memctl.core.config import Layout, Settings
from memctl.core.errors import LockBusy, MemctlError
from memctl.core.fsutil import FILE_MODE, WriterLock, ensure_private_dir
from memctl.longterm.dream_plan import OPS, Change, Plan
from memctl.longterm.dream_refs import fold, write_offset
from memctl.longterm.entries import Row, Snapshot
from memctl.longterm.store import open_store

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
    ensure_private_dir(layout.state_dir)
    fd = os.open(layout.state_dir / "dream.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockBusy("another memctl dream is running on this memory; retry later") from None
        yield
    finally:
        os.close(fd)


def apply_steps(layout: Layout, plan_: Plan, planned: Snapshot, run_id: str, now: datetime,
           wait: float, first_step: int = 0) -> tuple[list[Change], int, Snapshot, list[float]]:
    """Apply the plan in locked steps; a change applies only if its entries are unchanged."""
    expected = {row.entry.id: row.raw for row in planned.rows if row.entry is not None}
    refs_first = [c for c in plan_.changes if c.op == "refs"]
    others = [c for c in plan_.changes if c.op != "refs"]
    batches = [refs_first] if refs_first else []
    # every step costs a pass over L5 whatever its size: at most MAX_STEPS of them
    size = max(STEP_CHANGES, math.ceil(len(others) / MAX_STEPS))
    batches += [others[i:i + size] for i in range(0, len(others), size)]
    store = open_store(layout)
    applied: list[Change] = []
    skipped = 0
    snapshot = planned
    stamp = iso(now)
    held: list[float] = []
    for number, batch in enumerate(batches):
        with WriterLock(layout.lock, wait_seconds=wait, poll=STEP_POLL):
            locked_at = time.monotonic()
            snapshot = store.active.snapshot(previous=snapshot)
            rows = snapshot.rows
            position = {row.entry.id: k for k, row in enumerate(rows) if row.entry is not None}
            good, records = [], []
            for change in batch:
                if change.op == "refs":
                    # additive: fold into whatever the entry is now
                    live = [rows[position[e.id]].entry for e in change.before if e.id in position]
                    change = Change("refs", live, [fold(e, plan_.refs) for e in live], change.reason)
                    if not live:
                        continue
                elif any(e.id not in position or rows[position[e.id]].raw != expected.get(e.id)
                         for e in change.before):
                    skipped += 1
                    continue
                good.append(change)
            if not good:
                continue
            removed_ids = {e.id for c in good for e in c.removed}
            anchors = _anchors(rows, removed_ids)
            new_rows: list[Row] = []
            replacements = {e.id: e for c in good for e in c.after if e.id in position}
            for row in rows:
                entry_id = row.entry.id if row.entry is not None else None
                if entry_id in removed_ids:
                    continue
                if entry_id in replacements:
                    row = store.row_for(replacements[entry_id])
                new_rows.append(row)
            new_rows += [store.row_for(e) for c in good for e in c.added]
            to_l6 = [replace(e, left_at=stamp, reason=REASONS[c.op], note=c.reason, run=run_id, extra=dict(e.extra))
                     for c in good for e in c.removed]
            for c in good:
                records.append({"run": run_id, "at": stamp, "op": c.op, "step": first_step + len(held),
                                "ids": [e.id for e in c.before] + [e.id for e in c.added],
                                "before": [store.record_of(rows[position[e.id]]) for e in c.before],
                                "after": [e.to_dict() for e in c.after], "reason": c.reason,
                                "anchors": {e.id: anchors.get(e.id) for e in c.removed}})
            # order: L6 copy and audit first, L5 last — a crash leaves duplicates, never a loss
            store.archive.append(to_l6)
            store.append_log(records)
            snapshot = store.active.rewrite(new_rows)
            if batch is refs_first and plan_.refs.offset_after != plan_.refs.offset_before:
                write_offset(layout, plan_.refs.offset_after)
            held.append(time.monotonic() - locked_at)
        applied.extend(good)
        for c in good:
            for e in c.after:
                expected[e.id] = store.stored_form(e)
    return applied, skipped, snapshot, held


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
