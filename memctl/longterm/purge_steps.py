"""The steps of `forget --purge`, run from its journal so that a cut-off purge can finish.

`memctl.longterm.forget.purge` decides what to erase and writes the journal (0600, under
`.memctl/journal/`: the ids, their content hashes and the strings, which a rerun needs and
which go with the journal once the purge is done). `run` then takes every step, each one
idempotent, so the same journal can be run again after a kill at any point, by the rerun or
by any later writer (`memctl.longterm.recovery`): L5 and L6 lose the lines (a tombstone with
id and hash is written once and never rewritten), the dream log is scrubbed, L4 is scrubbed
by `memctl.l4.purge`, the index is dropped, every other file is scrubbed. A zip that cannot
be read is reported and leaves the journal pending; the rest is scrubbed all the same.
On a team memory another machine's purge reaches this one as an order
(`memctl.longterm.purge_orders`): its journal is marked `order` and runs only the steps of
this machine's files (L4, the index, every other file).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes
from memctl.longterm import journal
from memctl.longterm.entries import PURGED, Row, content_hash
from memctl.longterm.store import JsonlEntryStore, open_store

PURGE_MARK = "[PURGED]"
MIN_L4_NEEDLE = 4  # a shorter string would scrub ordinary words out of every session


@dataclass
class PurgeOutcome:
    files: list[str] = field(default_factory=list)  # files that were rewritten
    l4: list[str] = field(default_factory=list)  # what the L4 purge did
    pending: list[str] = field(default_factory=list)  # files that could not be scrubbed (path: why)


def needles_of(texts: list[str]) -> list[bytes]:
    found = {t.strip() for t in texts if t and t.strip()}
    # JSON files hold the text escaped; match both spellings
    out = set()
    for text in found:
        out.add(text.encode("utf-8", "surrogateescape"))
        out.add(json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "surrogateescape"))
        out.add(json.dumps(text)[1:-1].encode("ascii"))
    return sorted(out, key=len, reverse=True)


def journal_record(run: str, stamp: str, reason: str, hashes: dict[str, str], needles: list[bytes]) -> dict:
    return {"run": run, "at": stamp, "reason": reason, "ids": sorted(hashes), "hashes": hashes,
            "needles": [base64.b64encode(n).decode("ascii") for n in needles]}


def is_tombstone(row: Row) -> bool:
    return row.entry is not None and row.entry.reason == PURGED and not row.entry.text


def run(layout: Layout, record: dict, path: Path, resumed: bool = True) -> PurgeOutcome:
    """Every step of the purge the journal at `path` describes (writer lock held)."""
    needles = [base64.b64decode(n) for n in record.get("needles", [])]
    targets = set(record.get("ids", []))
    hashes = dict(record.get("hashes", {}))
    outcome = PurgeOutcome()
    faults.checkpoint("purge-journal")
    if not record.get("order"):  # a purge order of a team memory: its rows went with the purge that made it
        store = open_store(layout)
        _purge_entries(store, targets, hashes, needles, record, outcome)
        _purge_log(store, targets, hashes, needles, record, outcome)
    outcome.l4 = _purge_l4(layout, needles, outcome.pending, resumed)
    faults.checkpoint("purge-l4")
    outcome.files += _drop_index(layout)
    faults.checkpoint("purge-index")
    outcome.files += _scrub_other_files(layout, needles)
    faults.checkpoint("purge-other-files")
    if outcome.pending:
        journal.update(path, {**record, "pending": outcome.pending, "attempts": int(record.get("attempts", 0)) + 1})
    else:
        journal.end(path)
    return outcome


def _purge_entries(store: JsonlEntryStore, targets: set[str], hashes: dict[str, str], needles: list[bytes],
                   record: dict, outcome: PurgeOutcome) -> None:
    l5 = store.active.snapshot()
    keep5 = [r for r in l5.rows if not _goes(r, targets, needles)]
    if len(keep5) != len(l5.rows):
        store.active.rewrite(keep5)
        outcome.files.append(store.active.location)
    faults.checkpoint("purge-l5")
    l6 = store.archive.snapshot()
    keep6 = [r for r in l6.rows if is_tombstone(r) or not _goes(r, targets, needles)]
    buried = {r.entry.id for r in keep6 if is_tombstone(r)}
    # the audit keeps only id, hash and reason; a tombstone already written stays as it is
    tombstones = [{"id": i, "text": "", "type": "purged", "left_at": record.get("at", ""), "reason": PURGED,
                   "note": record.get("reason", ""), "run": record.get("run", ""), "sha256": h}
                  for i, h in sorted(hashes.items()) if i not in buried]
    if tombstones or len(keep6) != len(l6.rows):
        store.archive.rewrite(keep6 + [store.row_from_record(t) for t in tombstones])
        outcome.files.append(store.archive.location)
    faults.checkpoint("purge-l6")


def _goes(row: Row, targets: set[str], needles: list[bytes]) -> bool:
    if row.entry is not None and row.entry.id in targets:
        return True
    return _contains(row.raw, needles)


def _purge_log(store: JsonlEntryStore, targets: set[str], hashes: dict[str, str], needles: list[bytes],
               record: dict, outcome: PurgeOutcome) -> None:
    text_needles = [n.decode("utf-8", "surrogateescape") for n in needles]
    if store.scrub_log(targets, needles, lambda r: _scrub(r, targets, text_needles)):
        outcome.files.append(store.log_location)
    faults.checkpoint("purge-log")
    run_id = record.get("run", "")
    if not any(r.get("run") == run_id and r.get("op") == "purge" for r in store.log_records()):
        store.append_log([{"run": run_id, "at": record.get("at", ""), "op": "purge", "ids": [i],
                           "before": {"id": i, "sha256": h}, "after": None, "reason": record.get("reason") or PURGED}
                          for i, h in sorted(hashes.items())])
    faults.checkpoint("purge-audit")


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


def _drop_index(layout: Layout) -> list[str]:
    """The index and the write lookups are derived: deleting them is the only way to be sure no
    page still holds the text (the next search and the next write rebuild them)."""
    from memctl.longterm.lookups import FILE_NAME as LOOKUPS

    dropped = []
    for base in (layout.index, layout.state_dir / LOOKUPS):
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = Path(str(base) + suffix)
            if path.exists():
                path.unlink()
                dropped.append(str(path))
    return dropped


def _purge_l4(layout: Layout, needles: list[bytes], pending: list[str], resumed: bool) -> list[str]:
    """History, archived sessions (zips rebuilt, verified, renamed; manifest rebuilt), loose
    sessions: memctl.l4.purge, the L4 module's own purge. A resumed purge rebuilds the manifest
    whatever it finds, in case the cut-off run renamed a zip and died before doing so. Then the
    raw logs not archived yet and their kept copies (memctl.l4.purge_raw): searched where they
    lie, they are memory too."""
    from memctl.l4.manifest import monthly_zips
    from memctl.l4.purge import MARK, purge_l4, rebuild_manifest
    from memctl.l4.purge_raw import purge_raw_logs

    wanted = [n for n in needles if len(n) >= MIN_L4_NEEDLE]
    done = purge_l4(layout, wanted, MARK, pending)
    if resumed and not pending and monthly_zips(layout):
        rebuild_manifest(layout)
    return done + purge_raw_logs(layout, _raw_dir(layout), wanted, MARK, pending)


def _raw_dir(layout: Layout) -> Path:
    """GenericAgent's raw-log folder as this root's settings name it (a resumed purge has only the root)."""
    from memctl.core.config import load_settings

    return load_settings(layout.root).raw_dir()


_SKIP_SUFFIXES = (".zip", ".sqlite", ".sqlite-wal", ".sqlite-shm", ".tmp")


def _scrub_other_files(layout: Layout, needles: list[bytes]) -> list[str]:
    """Every other file under the root that still holds a needle (L1, L2, L3, task state,
    logs and torn lines in .memctl/): replaced atomically, permissions kept. L4 was done by
    the L4 module."""
    from memctl.l4.kept import kept_dir

    done = []
    wanted = [n for n in needles if len(n) >= MIN_L4_NEEDLE]
    # the journal goes when the purge is done; raw logs and their kept links are swapped by L4's step
    skip = {journal.journal_dir(layout), kept_dir(layout), _raw_dir(layout)}
    for folder, dirs, names in os.walk(layout.root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d)) and Path(folder, d) not in skip]
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
