"""`memctl verify --repair`: put aside what a killed run or a full disk left, and say so.

Like restic's and borg's repair, it is explicit and reported, and nothing is dropped: under
the writer lock it settles what every writer settles (torn last lines to `.memctl/torn/`,
cut-off purges, dream steps, undos and imports finished or rolled back — a purge waiting on
a damaged zip is retried —, stale temp files of the entry store removed), then moves every
line of L5, L6, the dream log, the import journal and the L4 manifest that does not parse
(or, in L5/L6, is not an entry) to `.memctl/torn/`, sweeps the temp files killed runs left
in the root, `.memctl/`, `working/` and `L4_raw_sessions/`, and reports duplicate ids in L5,
which it does not resolve: which text is right is the user's call.

`.memctl/refs.log` is left as it is: its readers skip a bad line, and rewriting it would
move the offset the dream reads from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from memctl.core.config import Layout
from memctl.core.fsutil import TMP_SUFFIX, atomic_write_bytes, sweep_stale_temp_files
from memctl.core.jsonl import keep_aside, torn_dir
from memctl.longterm import journal
from memctl.longterm.recovery import writing
from memctl.longterm.store import duplicate_ids, open_store
from memctl.recall.importer import imports_journal

INDEX_TEMP_PREFIX = ".index.sqlite."


@dataclass
class RepairReport:
    actions: list[str] = field(default_factory=list)  # what was done
    problems: list[str] = field(default_factory=list)  # what was found and left for the user


def repair(layout: Layout, lock_wait: float = 0.0) -> RepairReport:
    report = RepairReport()
    with writing(layout, lock_wait, retry_pending=True, whole=True) as settled:
        report.actions += settled
        for path, is_entry_store in _jsonl_files(layout):
            report.actions += quarantine_bad_lines(layout, path, is_entry_store)
        report.actions += sweep_temp_files(layout)
        report.problems += _duplicates(layout)
        report.problems += _pending_purges(layout)
    return report


def _jsonl_files(layout: Layout) -> list[tuple[Path, bool]]:
    return [(layout.long_term, True), (layout.cold_archive, True), (layout.dream_log, False),
            (imports_journal(layout), False), (layout.manifest, False)]


def quarantine_bad_lines(layout: Layout, path: Path, is_entry_store: bool) -> list[str]:
    """Move the lines of one JSON Lines file that do not parse to `.memctl/torn/`; the good
    lines stay, byte for byte, in their order."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    kept, bad = [], []
    for number, raw in enumerate(data.splitlines(keepends=True), start=1):
        if not raw.strip():
            continue
        (kept if _line_is_good(raw, is_entry_store) else bad).append((number, raw))
    if not bad:
        return []
    aside = keep_aside(torn_dir(layout.state_dir), path, bad[0][0], b"".join(
        f"# line {number}\n".encode() + (raw if raw.endswith(b"\n") else raw + b"\n") for number, raw in bad))
    atomic_write_bytes(path, b"".join(raw for _, raw in kept), mode=path.stat().st_mode & 0o777)
    lines = ", ".join(str(number) for number, _ in bad[:10]) + (" ..." if len(bad) > 10 else "")
    return [f"{path}: {len(bad)} unparseable lines ({lines}) moved to {aside}"]


def _line_is_good(raw: bytes, is_entry_store: bool) -> bool:
    if not raw.endswith(b"\n"):
        return False
    try:
        value = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    return not is_entry_store or (bool(value.get("id")) and isinstance(value.get("text"), str))


def sweep_temp_files(layout: Layout) -> list[str]:
    """Temp files of killed runs (the writer lock is held: no writer is running); an index
    rebuild's temp file only when its process is gone (searches rebuild without that lock)."""
    removed = []
    for folder in (layout.root, layout.working_dir, layout.l4_dir):
        removed += sweep_stale_temp_files(folder)
    removed += _sweep_state_dir(layout.state_dir)
    return [f"{path}: temp file of a killed run removed" for path in removed]


def _sweep_state_dir(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    removed = []
    for entry in os.scandir(folder):
        name = entry.name
        if not (name.startswith(".") and name.endswith(TMP_SUFFIX)) or not entry.is_file(follow_symlinks=False):
            continue
        if name.startswith(INDEX_TEMP_PREFIX) and _alive(name[len(INDEX_TEMP_PREFIX):-len(TMP_SUFFIX)]):
            continue
        os.unlink(entry.path)
        removed.append(Path(entry.path))
    return removed


def _alive(pid_text: str) -> bool:
    if not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _duplicates(layout: Layout) -> list[str]:
    twice = duplicate_ids(open_store(layout).active.snapshot().rows)
    return [f"{layout.long_term}: id {i} is on more than one line; give one of them a new id "
            "(no command acts on it until then)" for i in sorted(twice)]


def _pending_purges(layout: Layout) -> list[str]:
    return [f"purge {record.get('run')} is pending: {line}; repair or remove that file, then rerun "
            "`memctl verify --repair`" for _, record in journal.pending(layout, "purge")
            for line in record.get("pending", [])]
