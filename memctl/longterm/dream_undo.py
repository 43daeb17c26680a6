"""`dream --undo RUN`: put back every change of one dream run, byte for byte.

The run's audit records are reverted step by step, last step first: what a step added is
dropped, updated entries get their old lines back, and each removed entry is re-inserted
after the neighbour it had (its anchor). The L6 lines the run appended are dropped and the
reference offset rewound if nothing read past it since. An undo is itself an audit record,
so a run cannot be undone twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.core.errors import NotFound, UsageError
from memctl.longterm.dream_plan import OPS
from memctl.longterm.dream_refs import read_offset
from memctl.longterm.entries import Row, new_id
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import JsonlEntryStore, open_store


@dataclass
class UndoReport:
    run: str
    of: str
    undone: int
    conflicts: list[str]

    def to_dict(self) -> dict:
        return {"run": self.run, "undid": self.of, "changes": self.undone, "conflicts": self.conflicts}


def undo(settings: Settings, run_id: str, now: datetime, wait: float) -> UndoReport:
    """Put back every change of a dream run: L5 rows in their old places, its L6 lines dropped."""
    layout = settings.layout
    store = open_store(layout)
    conflicts: list[str] = []
    undo_id = "u-" + new_id("")
    with writing(layout, wait, whole=True):
        log = store.log_records()
        records = _records_of(log, run_id, store.log_name)
        start = next((r for r in log if r.get("run") == run_id and r.get("op") == "start"), {})
        rows = list(store.active.snapshot().rows)
        steps: dict[int, list[dict]] = defaultdict(list)
        for record in records:
            steps[int(record.get("step", 0))].append(record)
        for number in sorted(steps, reverse=True):
            rows = _undo_step(store, rows, steps[number], conflicts)
        then = [{"do": "drop-l6-run", "run": run_id}]
        offsets = start.get("refs_offset")
        if offsets and read_offset(layout) == offsets[1]:
            then.append({"do": "offset", "value": offsets[0]})
        then.append({"do": "log", "record": {"run": undo_id, "at": iso(now), "op": "undo", "of": run_id,
                                             "changes": len(records), "conflicts": conflicts}})
        # L5 first, then the rest from the journal: a cut-off undo is finished by the next writer
        with journaled_rewrite(layout, store, "undo", undo_id, rows, then):
            store.active.rewrite(rows)
    return UndoReport(undo_id, run_id, len(records) - len(conflicts), conflicts)


def _records_of(log: list[dict], run_id: str, log_name: str) -> list[dict]:
    """The change records of a run that can still be undone."""
    if not any(r.get("run") == run_id for r in log):
        raise NotFound(f"no run {run_id} in {log_name}; `memctl status` lists the recent runs")
    if any(r.get("op") == "undo" and r.get("of") == run_id for r in log):
        raise UsageError(f"run {run_id} was already undone")
    return [r for r in log if r.get("run") == run_id and r.get("op") in OPS + ("refs",)]


def _undo_step(store: JsonlEntryStore, rows: list[Row], records: list[dict], conflicts: list[str]) -> list[Row]:
    """Revert one locked step: drop what it added, revert updates, re-insert what it removed
    after the same neighbour it had (anchors may be other entries of the step)."""
    before = [b for r in records for b in r.get("before") or [] if isinstance(b, dict)]
    after = [a for r in records for a in r.get("after") or [] if isinstance(a, dict)]
    before_ids = {b["id"] for b in before}
    added = {a["id"] for a in after if a["id"] not in before_ids}
    updated = {a["id"] for a in after if a["id"] in before_ids}
    old_by_id = {b["id"]: b for b in before}
    out = []
    for row in rows:
        entry_id = row.entry.id if row.entry is not None else None
        if entry_id in added:
            continue
        out.append(store.row_from_record(old_by_id[entry_id]) if entry_id in updated else row)
    anchors: dict[str, str | None] = {}
    for record in records:
        anchors.update(record.get("anchors") or {})
    present = {r.entry.id for r in out if r.entry is not None}
    # each removed entry follows its old neighbour (one follower per anchor within a step)
    follower: dict[str | None, dict] = {}
    for old in before:
        if old["id"] in updated:
            continue
        if old["id"] in present:
            conflicts.append(f"{old['id']} is already back in L5")
            continue
        follower[anchors.get(old["id"])] = old
    placed: set[str] = set()
    result: list[Row] = []

    def emit_chain(anchor: str | None) -> None:
        while anchor in follower:
            old = follower.pop(anchor)
            result.append(store.row_from_record(old))
            placed.add(old["id"])
            anchor = old["id"]

    emit_chain(None)
    for row in out:
        result.append(row)
        if row.entry is not None:
            emit_chain(row.entry.id)
    for anchor, old in list(follower.items()):  # its neighbour is gone: put it back at the end
        if old["id"] not in placed:
            conflicts.append(f"{old['id']}: its neighbour {anchor} is gone; put back at the end")
            result.append(store.row_from_record(old))
            emit_chain(old["id"])
    return result
