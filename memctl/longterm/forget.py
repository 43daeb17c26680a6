"""`forget`, `restore` and `forget --purge` (design.md §8).

A soft forget moves entries from L5 to L6 with reason `forgotten`: L6 gets the copy first,
then L5 is replaced, so a crash leaves a duplicate, never a loss. `restore` puts the last L6
copy back in L5 (L6 stays append-only). A purge erases the text: the entries leave L5 and
every L6 line about them is dropped, the audit log keeps only id, hash and reason, the
derived search index and the write lookups are deleted (rebuilt from the purged layers), and the strings are
scrubbed from L4 by `memctl.l4.purge`; on a team memory an order takes the purge to every
other machine's files (`memctl.longterm.purge_orders`). Planning is pure; applying takes the writer lock.
"""

from __future__ import annotations

from memctl.core.clock import iso
from memctl.longterm.entries import PURGED, Entry, content_hash, new_id
from memctl.core.errors import NotFound, UsageError, WriteFailed
from memctl.core.fsutil import synced_after_unlock
from memctl.longterm import journal
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import open_store

TYPE_CHECKING = False  # annotations only: a `forget ID` process need not import them
if TYPE_CHECKING:
    from datetime import datetime

    from memctl.core.config import Settings

FORGOTTEN = "forgotten"


class ForgetPlan:
    """Plain classes here, not dataclasses: a `forget ID` process need not load `dataclasses`
    (see `entries.Entry`)."""

    __slots__ = ("entries", "missing", "reason")

    def __init__(self, entries: list[Entry], missing: list[str] | None = None, reason: str = "") -> None:
        self.entries = entries  # active entries that would leave L5
        self.missing = [] if missing is None else missing  # ids asked for that are not active
        self.reason = reason

    def to_dict(self) -> dict:
        return {
            "forget": [{"id": e.id, "type": e.type, "topic": e.topic, "text": e.text} for e in self.entries],
            "missing": self.missing,
            "reason": self.reason,
        }


class ForgetResult:
    __slots__ = ("run", "forgotten", "skipped")

    def __init__(self, run: str, forgotten: list[str], skipped: list[str]) -> None:
        self.run, self.forgotten = run, forgotten
        self.skipped = skipped  # changed or gone between plan and apply


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
    with writing(layout, lock_wait):
        return _forget_locked(layout, store, plan, now)


def forget_ids(settings: Settings, ids: list[str], reason: str, now: datetime,
               lock_wait: float) -> tuple[ForgetPlan, ForgetResult]:
    """`forget ID…`: planned and applied in one lock hold, from the store's lookups (no read
    of the whole of L5)."""
    if not ids:
        raise UsageError("nothing to forget: give entry ids or --match QUERY")
    layout = settings.layout
    store = open_store(layout)
    with writing(layout, lock_wait):
        rows = {i: store.active.row(i) for i in dict.fromkeys(ids)}
        plan = ForgetPlan([r.entry for r in rows.values() if r is not None],
                          [i for i, r in rows.items() if r is None], reason)
        return plan, _forget_locked(layout, store, plan, now)


def _forget_locked(layout, store, plan: ForgetPlan, now: datetime) -> ForgetResult:
    run = "f-" + new_id("")
    stamp = iso(now)
    store.lock_types(e.type for e in plan.entries)  # a remember of the same fact waits for this forget
    order = [e.id for e in plan.entries]
    rows = {i: store.active.row(i) for i in order}  # a duplicate id is refused here
    moving = [rows[i].entry for i in order if rows[i] is not None]
    gone = [e.replace(left_at=stamp, reason=FORGOTTEN, note=plan.reason, run=run) for e in moving]
    if gone:
        ids = [e.id for e in gone]
        with journaled_rewrite(layout, store, "forget", run, l5_lacks=ids):
            store.archive.append(gone)
            store.append_log([{"run": run, "at": stamp, "op": "forget", "ids": [e.id],
                              "before": e.to_dict(), "after": None, "reason": plan.reason or FORGOTTEN}
                             for e in moving])
            store.active.remove(ids)
    return ForgetResult(run, [e.id for e in moving], sorted(set(order) - {e.id for e in moving}))


def restore(settings: Settings, entry_id: str, now: datetime, lock_wait: float) -> Entry:
    """Put a forgotten (or archived, superseded, merged) entry back in L5."""
    layout = settings.layout
    store = open_store(layout)
    with writing(layout, lock_wait):
        last = store.departed_entry(entry_id)
        if last is None:
            if store.active.holds(entry_id):
                raise UsageError(f"{entry_id} is already active in L5; nothing to restore")
            raise NotFound(f"no entry {entry_id} in L6 (archive.jsonl); check the id with `memctl search --layers L6`")
        if last.reason == PURGED or not last.text:
            raise UsageError(f"{entry_id} was purged; its text no longer exists anywhere, so it cannot be restored")
        entry = last.replace(left_at="", reason="", run="", note="", extra=dict(last.extra))
        store.lock_types([entry.type])
        types = settings.types
        if entry.type in types and types[entry.type].get("policy") == "merge":
            clash = store.active.current(entry.type, entry.topic)
            if clash is not None:
                raise UsageError(
                    f"{clash.entry.id} is the active {entry.type} for topic {entry.topic!r}; "
                    f"forget it first, then restore {entry_id}"
                )
        log_length = store.log_length()
        store.append_log([{"run": "r-" + new_id(""), "at": iso(now), "op": "restore", "ids": [entry_id],
                           "before": None, "after": entry.to_dict(), "reason": f"restored from {last.reason}"}])
        try:
            with synced_after_unlock():  # group commit: fsynced once the lock is released, before the exit
                store.active.append([entry])
        except WriteFailed:
            store.cut_log_back(log_length)  # nothing was restored: the log must not say so
            raise
    return entry


# --- purge


class PurgeResult:
    __slots__ = ("run", "ids", "hashes", "files", "l4", "pending", "settled", "needles")

    def __init__(self, run: str, ids: list[str], hashes: dict[str, str], files: list[str], l4: list[str],
                 pending: list[str] | None = None, settled: list[str] | None = None,
                 needles: list[bytes] | None = None) -> None:
        self.run, self.ids, self.hashes = run, ids, hashes
        self.needles = [] if needles is None else needles  # the strings scrubbed (never printed)
        self.files = files  # files that were rewritten
        self.l4 = l4  # what the L4 purge did, or why it could not
        self.pending = [] if pending is None else pending  # files still holding the text (path: why)
        self.settled = [] if settled is None else settled  # cut-off operations finished first


def purge(settings: Settings, ids: list[str], strings: list[str], reason: str, now: datetime,
          lock_wait: float) -> PurgeResult:
    """Erase entries (and any string given) from every file memctl keeps. Irreversible.
    A purge cut off earlier (or waiting on a damaged zip) is finished first."""
    from memctl.longterm import purge_steps

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
        if store.on_server:  # the other machines' own files: an order, in the rows' transaction
            _order_purge_everywhere(store, layout, record)
    return PurgeResult(run, sorted(hashes), hashes, outcome.files, outcome.l4, outcome.pending, settled, needles)


def _order_purge_everywhere(store, layout, record: dict) -> None:
    from memctl.core.pg import machine_key
    from memctl.longterm import purge_orders

    purge_orders.record(store.server, store.server.schema, record, machine_key(layout.root))


def _plan_purge(store, ids: list[str], strings: list[str]) -> tuple[dict[str, str], list[bytes]] | None:
    """The ids to erase with their content hashes, and the strings; None: nothing left to do
    (every id is already a tombstone and no string was given)."""
    from memctl.longterm import purge_steps

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
    from memctl.longterm import purge_steps

    store = open_store(settings.layout)
    wanted = set(ids)
    texts = [e.text for part in (store.active, store.archive) for e in part.iter() if e.id in wanted]
    needles = [n for n in purge_steps.needles_of(texts + strings) if len(n) >= purge_steps.MIN_L4_NEEDLE]
    return files_holding(settings.layout, needles, settings.raw_dir())


def _still_pending(layout) -> list[str]:
    return [line for _, record in journal.pending(layout, "purge") for line in record.get("pending", [])]
