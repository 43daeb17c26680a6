"""What every writer does first, under the writer lock: settle what a killed run left.

`writing(layout, wait)` takes the writer lock and then, before the caller writes anything:
moves torn last lines of L5, L6 and the dream log to `.memctl/torn/`; finishes or rolls back
every operation whose journal is still there (`memctl.longterm.journal`): a dream step is
rolled forward when L5 already holds what it wrote, else its L6 and log appends are cut off;
an undo likewise; an import is closed (its one append is whole or absent); a purge is run to
its end (`memctl.longterm.purge_steps`); and sweeps the temp files of its own files that a
killed run left, older than its own start.
"""

from __future__ import annotations

import contextlib
import time

from memctl.core.config import Layout
from memctl.core.errors import WriteFailed
from memctl.core.fsutil import WriterLock, lock_wait, sweep_stale_temp_files
from memctl.core.jsonl import torn_dir
from memctl.longterm import journal
from memctl.longterm.entries import Row, rows_bytes
from memctl.longterm.store import JsonlEntryStore, bytes_digest, open_store

TYPE_CHECKING = False  # typing costs ~3 ms of every write process
if TYPE_CHECKING:
    from typing import Iterator

ROOT_FILES = ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")
REWRITE_KINDS = ("dream", "undo", "forget", "supersede")
STATE_FILES = ("refs.offset", "config.json")


@contextlib.contextmanager
def writing(layout: Layout, wait: float = 0.0, poll: float = 0.05, retry_pending: bool = False,
            whole: bool = False) -> Iterator[list[str]]:
    """The writer lock, with what a killed run left settled first; yields what was settled.

    On a server memory this is one transaction instead: entry writers share the memory's
    lock (rows and per-type locks keep them apart), a whole-memory writer (`whole`: dream,
    undo, purge, repair) holds it alone and also takes this machine's writer lock, for the
    local files it changes (the reference offset, L4)."""
    started = time.time()
    wait = lock_wait(wait)
    store = open_store(layout)
    if store.on_server:
        with store.transaction(wait, whole):
            if not whole:
                yield []
                return
            with WriterLock(layout.lock, wait_seconds=wait, poll=poll):
                yield settle(layout, started, retry_pending)
        return
    with WriterLock(layout.lock, wait_seconds=wait, poll=poll):
        yield settle(layout, started, retry_pending)


def settle(layout: Layout, started: float | None = None, retry_pending: bool = False) -> list[str]:
    """Torn tails aside, unfinished operations finished or rolled back, stale temp files gone
    (writer lock held). `retry_pending`: also retry purges waiting on a damaged file."""
    store = open_store(layout)
    notes = store.settle()
    for path, record in journal.pending(layout):
        notes += _finish(layout, store, path, record, retry_pending)
    notes += sweep_own_temp_files(layout, started if started is not None else time.time())
    return notes


def sweep_own_temp_files(layout: Layout, before: float) -> list[str]:
    removed = sweep_stale_temp_files(layout.root, before, ROOT_FILES)
    removed += sweep_stale_temp_files(layout.state_dir, before, STATE_FILES)
    for folder in (journal.journal_dir(layout), torn_dir(layout.state_dir)):
        removed += sweep_stale_temp_files(folder, before)
    return [f"{path}: temp file of a killed run removed" for path in removed]


def _finish(layout: Layout, store: JsonlEntryStore, path, record: dict, retry_pending: bool) -> list[str]:
    kind = record.get("kind")
    if kind == "purge":
        from memctl.longterm import purge_steps  # only when a purge was cut off: not on every write's path

        if record.get("pending") and not retry_pending:
            return []
        outcome = purge_steps.run(layout, record, path)
        state = "still pending" if outcome.pending else "completed"
        return [f"purge {record.get('run')}: {state}"]
    if kind in REWRITE_KINDS:
        return [_finish_rewrite(layout, store, path, record)]
    if kind == "import":
        journal.end(path)
        return [f"import {record.get('name')}: closed"]
    return []


@contextlib.contextmanager
def journaled_rewrite(layout: Layout, store: JsonlEntryStore, kind: str, name: str, new_rows: list[Row] | None = None,
                      then: list[dict] | None = None, l5_has: list[str] = (), l5_lacks: list[str] = (),
                      l5_after: str = "") -> Iterator[None]:
    """Around a change that appends to L6 and the log and then rewrites L5: its intent is
    journaled first, the `then` steps run after it, and the journal goes last. A full disk
    before L5 was rewritten cuts the appends back (nothing was written); after, the journal
    stays for the next writer to finish. Whether L5 was rewritten is told by its digest when
    the new L5 is given as `new_rows` or its sha256 as `l5_after` (a dream step, the latter
    when staged), else by the ids it must hold (`l5_has`) and must no longer hold
    (`l5_lacks`) once rewritten (a supersede, a forget: one atomic write of L5 each, so
    either all of it is there or none). On a server memory the whole change is the one
    transaction the caller's `writing` opened: nothing to journal."""
    if store.on_server:
        yield
        finish_steps(layout, store, list(then or []))
        return
    record = {"l6_length": store.archive.length(), "log_length": store.log_length(), "then": list(then or [])}
    if l5_after or new_rows is not None:
        record["l5_after"] = l5_after or bytes_digest(rows_bytes(new_rows))
    else:
        record.update(l5_has=list(l5_has), l5_lacks=list(l5_lacks))
    path = journal.begin(layout, kind, name, record)
    try:
        yield
        finish_steps(layout, store, record["then"])
    except WriteFailed:
        if not _l5_rewritten(store, record):
            _roll_back(store, path, record)
        raise
    journal.end(path)


def _l5_rewritten(store: JsonlEntryStore, record: dict) -> bool:
    if "l5_after" in record:
        return store.active.digest() == record.get("l5_after")
    has, lacks = record.get("l5_has") or [], record.get("l5_lacks") or []
    if not has and not lacks:
        return False
    return all(store.active.holds(i) for i in has) and not any(store.active.holds(i) for i in lacks)


def _roll_back(store: JsonlEntryStore, path, record: dict) -> None:
    store.archive.cut_back(int(record.get("l6_length", 0)))
    store.cut_log_back(int(record.get("log_length", 0)))
    journal.end(path)


def _finish_rewrite(layout: Layout, store: JsonlEntryStore, path, record: dict) -> str:
    """A dream step or an undo: forward when L5 is what it wrote, else its appends cut off."""
    name = f"{record.get('kind')} {record.get('name')}"
    if _l5_rewritten(store, record):
        finish_steps(layout, store, record.get("then") or [])
        journal.end(path)
        return f"{name}: completed"
    _roll_back(store, path, record)
    return f"{name}: rolled back"


def finish_steps(layout: Layout, store: JsonlEntryStore, steps: list[dict]) -> None:
    """The idempotent steps after an L5 rewrite, as its journal lists them."""
    for step in steps:
        _redo(layout, store, step)


def _redo(layout: Layout, store: JsonlEntryStore, step: dict) -> None:
    what = step.get("do")
    if what == "offset":
        from memctl.longterm.dream_refs import write_offset

        write_offset(layout, int(step["value"]))
    elif what == "drop-l6-run":
        l6 = store.archive.snapshot()
        kept = [r for r in l6.rows if r.entry is None or r.entry.run != step["run"]]
        if len(kept) != len(l6.rows):
            store.archive.rewrite(kept)
    elif what == "log" and not any(r.get("run") == step["record"].get("run") for r in store.log_records()):
        store.append_log([step["record"]])
