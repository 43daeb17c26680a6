"""`forget`, `restore` and `forget --purge` (design.md §8).

A soft forget moves entries from L5 to L6 with reason `forgotten`: L6 gets the copy first,
then L5 is replaced, so a crash leaves a duplicate, never a loss. `restore` puts the last L6
copy back in L5 (L6 stays append-only). A purge erases the text: the entries leave L5 and
every L6 line about them is dropped, the audit log keeps only id, hash and reason, the
derived search index is deleted (it is rebuilt from the purged layers), and the strings are
scrubbed from L4 by `memctl.l4.purge`. Planning is pure; applying takes the writer lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.longterm.entries import Entry, content_hash, new_id
from memctl.core.errors import NotFound, UsageError, WriteFailed
from memctl.longterm import journal, purge_steps
from memctl.longterm.policies import merge_key
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import open_store, refuse_duplicates

FORGOTTEN = "forgotten"
PURGED = purge_steps.PURGED
PURGE_MARK = purge_steps.PURGE_MARK
MIN_L4_NEEDLE = purge_steps.MIN_L4_NEEDLE


@dataclass
class ForgetPlan:
    entries: list[Entry]  # active entries that would leave L5
    missing: list[str] = field(default_factory=list)  # ids asked for that are not active
    reason: str = ""

    def to_dict(self) -> dict:
        return {
            "forget": [{"id": e.id, "type": e.type, "topic": e.topic, "text": e.text} for e in self.entries],
            "missing": self.missing,
            "reason": self.reason,
        }


@dataclass
class ForgetResult:
    run: str
    forgotten: list[str]
    skipped: list[str]  # changed or gone between plan and apply


def plan_forget(entries: list[Entry], ids: list[str], match: str | None, reason: str = "") -> ForgetPlan:
    """Pure: which active entries `forget ID…` or `forget --match QUERY` names."""
    if ids and match:
        raise UsageError("give entry ids or --match QUERY, not both")
    if not ids and not match:
        raise UsageError("nothing to forget: give entry ids or --match QUERY")
    by_id = {e.id: e for e in entries}
    if ids:
        return ForgetPlan([by_id[i] for i in dict.fromkeys(ids) if i in by_id],
                          [i for i in dict.fromkeys(ids) if i not in by_id], reason)
    return ForgetPlan(matching(entries, match or ""), [], reason)


def matching(entries: list[Entry], query: str) -> list[Entry]:
    """Entries whose text or topic contains the query, case-insensitively (deliberately literal:
    this chooses what to delete)."""
    needle = query.casefold().strip()
    if not needle:
        raise UsageError("--match needs a non-empty query")
    return [e for e in entries if needle in e.text.casefold() or needle in e.topic.casefold()]


def apply_forget(settings: Settings, plan: ForgetPlan, now: datetime, lock_wait: float) -> ForgetResult:
    layout = settings.layout
    store = open_store(layout)
    run = "f-" + new_id("")
    stamp = iso(now)
    with writing(layout, lock_wait):
        store.lock_types(e.type for e in plan.entries)
        snapshot = store.active.snapshot()
        current = snapshot.by_id()
        wanted = {e.id for e in plan.entries}
        refuse_duplicates(snapshot.rows, wanted, "L5")
        moving = [current[i].entry for i in wanted if i in current]
        moving.sort(key=lambda e: [x.id for x in plan.entries].index(e.id))
        gone = [replace(e, left_at=stamp, reason=FORGOTTEN, note=plan.reason, run=run) for e in moving]
        if gone:
            ids = {e.id for e in gone}
            kept = [r for r in snapshot.rows if r.entry is None or r.entry.id not in ids]
            with journaled_rewrite(layout, store, "forget", run, kept):
                store.archive.append(gone)
                store.append_log([{"run": run, "at": stamp, "op": "forget", "ids": [e.id],
                                  "before": e.to_dict(), "after": None, "reason": plan.reason or FORGOTTEN}
                                 for e in moving])
                store.active.rewrite(kept)
    return ForgetResult(run, [e.id for e in moving], sorted(wanted - {e.id for e in moving}))


def restore(settings: Settings, entry_id: str, now: datetime, lock_wait: float) -> Entry:
    """Put a forgotten (or archived, superseded, merged) entry back in L5."""
    layout = settings.layout
    store = open_store(layout)
    with writing(layout, lock_wait):
        gone = store.departed()
        if entry_id not in gone:
            snapshot = store.active.snapshot()
            if entry_id in snapshot.by_id():
                raise UsageError(f"{entry_id} is already active in L5; nothing to restore")
            raise NotFound(f"no entry {entry_id} in L6 (archive.jsonl); check the id with `memctl search --layers L6`")
        last = gone[entry_id]
        if last.reason == PURGED or not last.text:
            raise UsageError(f"{entry_id} was purged; its text no longer exists anywhere, so it cannot be restored")
        entry = replace(last, left_at="", reason="", run="", note="", extra=dict(last.extra))
        store.lock_types([entry.type])
        snapshot = store.active.snapshot()
        types = settings.types
        if entry.type in types and types[entry.type].get("policy") == "merge":
            clash = next((e for e in snapshot.entries if merge_key(e) == merge_key(entry)), None)
            if clash is not None:
                raise UsageError(
                    f"{clash.id} is the active {entry.type} for topic {entry.topic!r}; "
                    f"forget it first, then restore {entry_id}"
                )
        log_length = store.log_length()
        store.append_log([{"run": "r-" + new_id(""), "at": iso(now), "op": "restore", "ids": [entry_id],
                           "before": None, "after": entry.to_dict(), "reason": f"restored from {last.reason}"}])
        try:
            store.active.append([entry])
        except WriteFailed:
            store.cut_log_back(log_length)  # nothing was restored: the log must not say so
            raise
    return entry


# --- purge


@dataclass
class PurgeResult:
    run: str
    ids: list[str]
    hashes: dict[str, str]
    files: list[str]  # files that were rewritten
    l4: list[str]  # what the L4 purge did, or why it could not
    pending: list[str] = field(default_factory=list)  # files still holding the text (path: why)
    settled: list[str] = field(default_factory=list)  # cut-off operations finished first


def purge(settings: Settings, ids: list[str], strings: list[str], reason: str, now: datetime,
          lock_wait: float) -> PurgeResult:
    """Erase entries (and any string given) from every file memctl keeps. Irreversible.
    A purge cut off earlier (or waiting on a damaged zip) is finished first."""
    layout = settings.layout
    store = open_store(layout)
    run = "p-" + new_id("")
    with writing(layout, lock_wait, retry_pending=True, whole=True) as settled:
        plan = _plan_purge(store, ids, strings)
        if plan is None:
            return PurgeResult(run, [], {}, [], [], _still_pending(layout), settled)
        hashes, needles = plan
        record = purge_steps.journal_record(run, iso(now), reason, hashes, needles)
        path = journal.begin(layout, "purge", run, record)
        outcome = purge_steps.run(layout, {**record, "kind": "purge"}, path, resumed=False)
    return PurgeResult(run, sorted(hashes), hashes, outcome.files, outcome.l4, outcome.pending, settled)


def _plan_purge(store, ids: list[str], strings: list[str]) -> tuple[dict[str, str], list[bytes]] | None:
    """The ids to erase with their content hashes, and the strings; None: nothing left to do
    (every id is already a tombstone and no string was given)."""
    rows = store.active.snapshot().rows + store.archive.snapshot().rows
    targets = set(ids)
    unknown = sorted(targets - {r.entry.id for r in rows if r.entry is not None})
    if unknown:
        raise NotFound(f"no entry {', '.join(unknown)} in L5 or L6; nothing was purged")
    live = [r for r in rows if r.entry is not None and not purge_steps.is_tombstone(r)]
    if not strings and not any(r.entry.id in targets for r in live):
        return None
    needles = purge_steps.needles_of([r.entry.text for r in live if r.entry.id in targets] + list(strings))
    # other lines holding the text (an older superseded version, a consolidation) go too
    targets |= {r.entry.id for r in live if any(n in r.raw for n in needles)}
    hashes: dict[str, str] = {}
    for row in live:
        if row.entry.id in targets:
            hashes.setdefault(row.entry.id, content_hash(row.entry.text))
    return hashes, needles


def files_a_purge_would_scrub(settings: Settings, ids: list[str], strings: list[str]) -> list[str]:
    """The files (and archived sessions) `purge` of these entries and strings would rewrite."""
    from memctl.l4.purge_preview import files_holding

    store = open_store(settings.layout)
    wanted = set(ids)
    texts = [e.text for part in (store.active, store.archive) for e in part.iter() if e.id in wanted]
    needles = [n for n in purge_steps.needles_of(texts + strings) if len(n) >= MIN_L4_NEEDLE]
    return files_holding(settings.layout, needles)


def _still_pending(layout) -> list[str]:
    return [line for _, record in journal.pending(layout, "purge") for line in record.get("pending", [])]
