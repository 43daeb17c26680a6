"""The dream pass (design.md §7): consolidate, archive, forget and merge L5 entries.

The public entry the CLI, the tests and the bench use. `plan_now()` reads L5, the reference
log and the recent L4 history and hands them to the pure planner
(`memctl.longterm.dream_plan.plan`). `run()` plans under the dream lock, checks the guard
rail, then applies the plan in short locked steps (`memctl.longterm.dream_apply`); changes
that no longer apply (a `remember` touched their entries meanwhile) are re-planned from a
fresh read, at most MAX_REPLANS times. `undo()` (`memctl.longterm.dream_undo`) puts a run
back byte for byte from its lines in `dream_log.jsonl`.

Reference counts: `.memctl/refs.log` lines after the offset in `.memctl/refs.offset` are
folded into `refs`/`last_ref`; the whole log gives the counts inside the archive and forget
windows (`memctl.longterm.dream_refs`). Consolidation compares only near-duplicate candidates
found by blocking (`memctl.longterm.dream_similar`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from memctl.core.clock import iso
from memctl.core.config import Layout, Settings
from memctl.core.errors import UsageError
from memctl.longterm.dream_apply import STEP_POLL, GuardRail, apply_steps, check_guard, dream_lock
from memctl.longterm.dream_plan import OPS, Change, Plan, plan, plan_rows
from memctl.longterm.dream_refs import Refs, fold, load_refs, read_offset, write_offset
from memctl.longterm.dream_rows import view_of
from memctl.longterm.dream_similar import similar_groups
from memctl.longterm.dream_undo import UndoReport, undo
from memctl.longterm.entries import new_id
from memctl.longterm.recovery import writing
from memctl.longterm.store import open_store

__all__ = ["OPS", "Change", "DreamOptions", "DreamReport", "GuardRail", "Plan", "Refs", "UndoReport",
           "check_guard", "fold", "load_refs", "parse_only", "plan", "plan_now", "plan_rows", "read_offset",
           "recent_history", "run", "similar_groups", "undo", "write_offset"]

MAX_REPLANS = 2
DEFAULT_STEP_WAIT = 60.0
HISTORY_SESSIONS = 50  # "recent" L4 history: the last N session blocks


@dataclass
class DreamOptions:
    ops: tuple[str, ...] = OPS
    force: bool = False
    summarizer: str | None = None
    lock_wait: float = 0.0
    progress: Callable[[int, int, str], None] | None = None  # (changes applied, changes planned, step)


@dataclass
class DreamReport:
    run: str
    counts: dict[str, int]
    skipped: int
    replans: int
    steps: int
    l5_before: int
    l5_after: int
    longest_step: float = 0.0  # seconds the writer lock was held by the longest step

    def summary(self) -> str:
        ops = ", ".join(f"{op} {self.counts.get(op, 0)}" for op in OPS)
        extra = f"; {self.skipped} changes skipped (L5 changed underneath)" if self.skipped else ""
        return f"dream {self.run}: {ops}; L5 {self.l5_before} -> {self.l5_after}{extra}"

    def to_dict(self) -> dict:
        return {"run": self.run, "counts": self.counts, "skipped": self.skipped, "replans": self.replans,
                "steps": self.steps, "longest_step_s": round(self.longest_step, 3),
                "l5_before": self.l5_before, "l5_after": self.l5_after}


def parse_only(text: str | None) -> tuple[str, ...]:
    if not text:
        return OPS
    ops = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise UsageError(f"--only: unknown operation {', '.join(bad)}; choose from {', '.join(OPS)}")
    return ops


def recent_history(layout: Layout, sessions: int = HISTORY_SESSIONS) -> list[tuple[str, str]]:
    """(session, text) for the history lines of the last sessions in all_histories.txt."""
    path = layout.histories
    if not path.exists():
        return []
    try:
        from memctl.l4.history import iter_history_blocks
    except ImportError:
        return []
    blocks = list(iter_history_blocks(path))[-sessions:]
    out = []
    for name, lines in blocks:
        for text in lines:
            text = re.sub(r"^\s*(\[USER\]:|\[Agent\])\s*", "", text).strip()
            if len(text) >= 8:
                out.append((name, text))
    return out


def plan_now(settings: Settings, now: datetime, options: DreamOptions) -> Plan:
    layout = settings.layout
    snapshot = open_store(layout).active.snapshot(lean=True)
    history = recent_history(layout) if "consolidate" in options.ops else []
    return plan_rows(snapshot.rows, load_refs(layout), settings, now, options.ops, history, options.summarizer)


def run(settings: Settings, now: datetime, options: DreamOptions) -> DreamReport:
    layout = settings.layout
    store = open_store(layout)
    run_id = f"d-{now.strftime('%Y%m%dT%H%M%S')}-{new_id('')[:6]}"
    wait = max(options.lock_wait, DEFAULT_STEP_WAIT)
    with dream_lock(layout):
        with writing(layout, wait, STEP_POLL, whole=True):
            pass  # a cut-off step finished first: its folded references must not be read again
        snapshot = store.active.snapshot(lean=True)
        refs = load_refs(layout)
        history = recent_history(layout) if "consolidate" in options.ops else []
        first = plan_rows(snapshot.rows, refs, settings, now, options.ops, history, options.summarizer)
        check_guard(first, settings, options.force)
        l5_before = first.l5_count
        with writing(layout, wait, STEP_POLL, whole=True):
            store.append_log([{"run": run_id, "at": iso(now), "op": "start", "plan": first.counts(),
                               "refs_offset": [refs.offset_before, refs.offset_after]}])
        counts: Counter = Counter()
        steps, longest = 0, 0.0
        current_plan, replans, skipped = first, 0, 0
        while True:
            applied, skipped_now, snapshot, held = apply_steps(layout, current_plan, snapshot, run_id, now, wait, steps,
                                                               options.progress)
            steps += len(held)
            longest = max([longest] + held)
            for change in applied:
                counts[change.op] += len(change.after_ids) if change.op == "refs" else change.removed_count
            if current_plan is first and read_offset(layout) != refs.offset_after:
                with writing(layout, wait, STEP_POLL, whole=True):
                    write_offset(layout, refs.offset_after)
            if not skipped_now or replans >= MAX_REPLANS:
                skipped = skipped_now
                break
            replans += 1
            snapshot = store.active.snapshot(lean=True)
            current_plan = plan_rows(snapshot.rows, Refs(), settings, now, options.ops, history, options.summarizer)
            if current_plan.net_removed + sum(c.net_removed for c in applied) > \
                    float(settings.get("dream", "max_remove_share")) * l5_before and not options.force:
                break
        final = snapshot
        with writing(layout, wait, STEP_POLL, whole=True):
            store.append_log([{"run": run_id, "at": iso(now), "op": "end", "counts": dict(counts),
                               "skipped": skipped, "replans": replans}])
    return DreamReport(run_id, dict(counts), skipped, replans, steps, l5_before,
                       sum(1 for _, entry_id in view_of(final.rows).ids() if entry_id is not None), longest)
