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
from typing import Iterator

from memctl.core.config import Layout
from memctl.core.errors import WriteFailed
from memctl.core.fsutil import WriterLock, sweep_stale_temp_files
from memctl.core.jsonl import torn_dir
from memctl.longterm import journal, purge_steps
from memctl.longterm.dream_refs import write_offset
from memctl.longterm.entries import Row, rows_bytes
from memctl.longterm.store import JsonlEntryStore, bytes_digest, open_store

ROOT_FILES = ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")
REWRITE_KINDS = ("dream", "undo", "forget", "supersede")
STATE_FILES = ("refs.offset",)


@contextlib.contextmanager
def writing(layout: Layout, wait: float = 0.0, poll: float = 0.05, retry_pending: bool = False,
            whole: bool = False) -> Iterator[list[str]]:
    """The writer lock, with what a killed run left settled first; yields what was settled.

    On a server memory this is one transaction instead: entry writers share the memory's
    lock (rows and per-type locks keep them apart), a whole-memory writer (`whole`: dream,
    undo, purge, repair) holds it alone and also takes this machine's writer lock, for the
    local files it changes (the reference offset, L4)."""
    started = time.time()
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
def journaled_rewrite(layout: Layout, store: JsonlEntryStore, kind: str, name: str, new_rows: list[Row],
                      then: list[dict] | None = None) -> Iterator[None]:
    """Around a change that appends to L6 and the log and then rewrites L5 as `new_rows`: its
    intent is journaled first, the `then` steps run after it, and the journal goes last. A full
    disk before L5 was rewritten cuts the appends back (nothing was written); after, the
    journal stays for the next writer to finish. On a server memory the whole change is the
    one transaction the caller's `writing` opened: nothing to journal."""
    if store.on_server:
        yield
        finish_steps(layout, store, list(then or []))
        return
    record = {"l5_after": bytes_digest(rows_bytes(new_rows)), "l6_length": store.archive.length(),
              "log_length": store.log_length(), "then": list(then or [])}
    path = journal.begin(layout, kind, name, record)
    try:
        yield
        finish_steps(layout, store, record["then"])
    except WriteFailed:
        if store.active.digest() != record["l5_after"]:
            _roll_back(store, path, record)
        raise
    journal.end(path)


def _roll_back(store: JsonlEntryStore, path, record: dict) -> None:
    store.archive.cut_back(int(record.get("l6_length", 0)))
    store.cut_log_back(int(record.get("log_length", 0)))
    journal.end(path)


def _finish_rewrite(layout: Layout, store: JsonlEntryStore, path, record: dict) -> str:
    """A dream step or an undo: forward when L5 is what it wrote, else its appends cut off."""
    name = f"{record.get('kind')} {record.get('name')}"
    if store.active.digest() == record.get("l5_after"):
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
        write_offset(layout, int(step["value"]))
    elif what == "drop-l6-run":
        l6 = store.archive.snapshot()
        kept = [r for r in l6.rows if r.entry is None or r.entry.run != step["run"]]
        if len(kept) != len(l6.rows):
            store.archive.rewrite(kept)
    elif what == "log" and not any(r.get("run") == step["record"].get("run") for r in store.log_records()):
        store.append_log([step["record"]])
