"""`forget`, `restore` and `forget --purge` (design.md §8).

A soft forget moves entries from L5 to L6 with reason `forgotten`: L6 gets the copy first,
then L5 is replaced, so a crash leaves a duplicate, never a loss. `restore` puts the last L6
copy back in L5 (L6 stays append-only). A purge erases the text: the entries leave L5 and
every L6 line about them is dropped, the audit log keeps only id, hash and reason, the
derived search index is deleted (it is rebuilt from the purged layers), and the strings are
scrubbed from L4 by `memctl.l4.purge`. Planning is pure; applying takes the writer lock.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.longterm.entries import Entry, content_hash, new_id
from memctl.core.errors import NotFound, UsageError
from memctl.core.fsutil import WriterLock, atomic_write_bytes
from memctl.longterm.policies import merge_key
from memctl.longterm.store import open_store

FORGOTTEN = "forgotten"
PURGED = "purged"
PURGE_MARK = "[PURGED]"
MIN_L4_NEEDLE = 4  # a shorter string would scrub ordinary words out of every session


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
    with WriterLock(layout.lock, wait_seconds=lock_wait):
        snapshot = store.active.snapshot()
        current = snapshot.by_id()
        wanted = {e.id for e in plan.entries}
        moving = [current[i].entry for i in wanted if i in current]
        moving.sort(key=lambda e: [x.id for x in plan.entries].index(e.id))
        gone = [replace(e, left_at=stamp, reason=FORGOTTEN, note=plan.reason, run=run) for e in moving]
        if gone:
            store.archive.append(gone)
            ids = {e.id for e in gone}
            store.active.rewrite([r for r in snapshot.rows if r.entry is None or r.entry.id not in ids])
            store.append_log([{"run": run, "at": stamp, "op": "forget", "ids": [e.id],
                              "before": e.to_dict(), "after": None, "reason": plan.reason or FORGOTTEN}
                             for e in moving])
    return ForgetResult(run, [e.id for e in moving], sorted(wanted - {e.id for e in moving}))


def restore(settings: Settings, entry_id: str, now: datetime, lock_wait: float) -> Entry:
    """Put a forgotten (or archived, superseded, merged) entry back in L5."""
    layout = settings.layout
    store = open_store(layout)
    with WriterLock(layout.lock, wait_seconds=lock_wait):
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
        snapshot = store.active.snapshot()
        types = settings.types
        if entry.type in types and types[entry.type].get("policy") == "merge":
            clash = next((e for e in snapshot.entries if merge_key(e) == merge_key(entry)), None)
            if clash is not None:
                raise UsageError(
                    f"{clash.id} is the active {entry.type} for topic {entry.topic!r}; "
                    f"forget it first, then restore {entry_id}"
                )
        store.active.append([entry])
        store.append_log([{"run": "r-" + new_id(""), "at": iso(now), "op": "restore", "ids": [entry_id],
                           "before": None, "after": entry.to_dict(), "reason": f"restored from {last.reason}"}])
    return entry


# --- purge


@dataclass
class PurgeResult:
    run: str
    ids: list[str]
    hashes: dict[str, str]
    files: list[str]  # files that were rewritten
    l4: list[str]  # what the L4 purge did, or why it could not


def purge(settings: Settings, ids: list[str], strings: list[str], reason: str, now: datetime,
          lock_wait: float) -> PurgeResult:
    """Erase entries (and any string given) from every file memctl keeps. Irreversible."""
    layout = settings.layout
    store = open_store(layout)
    run = "p-" + new_id("")
    stamp = iso(now)
    with WriterLock(layout.lock, wait_seconds=lock_wait):
        l5 = store.active.snapshot()
        l6 = store.archive.snapshot()
        targets = {i for i in ids}
        known = {r.entry.id for r in l5.rows + l6.rows if r.entry is not None}
        unknown = sorted(targets - known)
        if unknown:
            raise NotFound(f"no entry {', '.join(unknown)} in L5 or L6; nothing was purged")
        texts = [r.entry.text for r in l5.rows + l6.rows if r.entry is not None and r.entry.id in targets]
        needles = _needles(texts + list(strings))
        # other lines holding the text (an older superseded version, a consolidation) go too
        for row in l5.rows + l6.rows:
            if row.entry is not None and _contains(row.raw, needles):
                targets.add(row.entry.id)
        hashes = {}
        for row in l5.rows + l6.rows:
            if row.entry is not None and row.entry.id in targets:
                hashes.setdefault(row.entry.id, content_hash(row.entry.text))
        files = []
        keep5 = [r for r in l5.rows if (r.entry is None and not _contains(r.raw, needles))
                 or (r.entry is not None and r.entry.id not in targets)]
        if len(keep5) != len(l5.rows):
            store.active.rewrite(keep5)
            files.append(store.active.location)
        keep6 = [r for r in l6.rows if (r.entry is None and not _contains(r.raw, needles))
                 or (r.entry is not None and r.entry.id not in targets)]
        # the audit keeps only id, hash and reason
        tombstones = [{"id": i, "text": "", "type": "purged", "left_at": stamp, "reason": PURGED, "note": reason,
                       "run": run, "sha256": h} for i, h in sorted(hashes.items())]
        store.archive.rewrite(keep6 + [store.row_from_record(t) for t in tombstones])
        files.append(store.archive.location)
        text_needles = [n.decode("utf-8", "surrogateescape") for n in needles]
        if store.scrub_log(targets, needles, lambda record: _scrub(record, targets, text_needles)):
            files.append(store.log_location)
        store.append_log([{"run": run, "at": stamp, "op": "purge", "ids": [i], "before": {"id": i, "sha256": h},
                           "after": None, "reason": reason or PURGED} for i, h in sorted(hashes.items())])
        l4 = _purge_l4(layout, needles)
        files += _drop_index(layout)
        files += _scrub_other_files(layout, needles)
    return PurgeResult(run, sorted(hashes), hashes, files, l4)


def files_a_purge_would_scrub(settings: Settings, ids: list[str], strings: list[str]) -> list[str]:
    """The files (and archived sessions) `purge` of these entries and strings would rewrite."""
    from memctl.l4.purge_preview import files_holding

    store = open_store(settings.layout)
    wanted = set(ids)
    texts = [e.text for part in (store.active, store.archive) for e in part.iter() if e.id in wanted]
    needles = [n for n in _needles(texts + strings) if len(n) >= MIN_L4_NEEDLE]
    return files_holding(settings.layout, needles)


def _needles(texts: list[str]) -> list[bytes]:
    found = {t.strip() for t in texts if t and t.strip()}
    # JSON files hold the text escaped; match both spellings
    out = set()
    for text in found:
        out.add(text.encode("utf-8", "surrogateescape"))
        out.add(json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape"))
        out.add(json.dumps(text)[1:-1].encode("ascii"))
    return sorted(out, key=len, reverse=True)


def _contains(data: bytes, needles: list[bytes]) -> bool:
    return any(n in data for n in needles)


def _scrub(value: Any, targets: set[str], needles: list[str]) -> Any:
    if isinstance(value, dict):
        if value.get("id") in targets and "text" in value:
            return {"id": value["id"], "sha256": content_hash(str(value.get("text", "")))}
        return {k: _scrub(v, targets, needles) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, targets, needles) for v in value]
    if isinstance(value, str):
        for needle in needles:
            value = value.replace(needle, PURGE_MARK)
        return value
    return value


def _drop_index(layout) -> list[str]:
    """The index is derived: deleting it is the only way to be sure no page still holds the text."""
    dropped = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(str(layout.index) + suffix)
        if path.exists():
            path.unlink()
            dropped.append(str(path))
    return dropped


def _purge_l4(layout, needles: list[bytes]) -> list[str]:
    """History, archived sessions (zips rebuilt, verified, renamed; manifest rebuilt), loose
    sessions: memctl.l4.purge, the L4 module's own purge."""
    from memctl.l4.purge import MARK, purge_l4

    return purge_l4(layout, [n for n in needles if len(n) >= MIN_L4_NEEDLE], MARK)


_SKIP_SUFFIXES = (".zip", ".sqlite", ".sqlite-wal", ".sqlite-shm", ".tmp")


def _scrub_other_files(layout, needles: list[bytes]) -> list[str]:
    """Every other file under the root that still holds a needle (L1, L2, L3, task state,
    logs in .memctl/): replaced atomically, permissions kept. L4 was done by the L4 module."""
    done = []
    wanted = [n for n in needles if len(n) >= MIN_L4_NEEDLE]
    for folder, dirs, names in os.walk(layout.root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in names:
            path = Path(folder) / name
            if name.endswith(_SKIP_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            new = data
            for needle in wanted:
                new = new.replace(needle, PURGE_MARK.encode())
            if new != data:
                atomic_write_bytes(path, new, mode=path.stat().st_mode & 0o777)
                done.append(str(path))
    return done
