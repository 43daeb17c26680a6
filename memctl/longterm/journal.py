"""Journals of multi-file operations: one 0600 file per operation in `.memctl/journal/`.

A purge, a dream step and an import write their intent here (what, which files, which ids,
and what a rerun needs to finish) before they touch anything, and delete it as their last
act, so a journal file that still exists is an operation that was cut off. The next writer
finishes or rolls it back before it does anything else (`memctl.longterm.recovery`), as
logrotate keeps one state file per run. A journal is written atomically: it is whole or absent.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from memctl.core import jsoncodec
from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes, ensure_private_dir, fsync_dir

JOURNAL_DIR = "journal"
SUFFIX = ".json"


def journal_dir(layout: Layout) -> Path:
    return layout.state_dir / JOURNAL_DIR


def begin(layout: Layout, kind: str, name: str, record: dict) -> Path:
    """Write the intent of one operation; the path to `update` and `end` it with."""
    folder = ensure_private_dir(journal_dir(layout))
    path = folder / f"{kind}-{name}{SUFFIX}"
    update(path, {**record, "kind": kind, "name": name})
    return path


def update(path: Path, record: dict) -> None:
    atomic_write_bytes(path, jsoncodec.dumps(record, ascii=True, sort_keys=True).encode("ascii"))


def end(path: Path) -> None:
    """The done record: the operation is complete and nothing needs to finish it."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        fsync_dir(path.parent)


def pending(layout: Layout, kind: str | None = None) -> list[tuple[Path, dict]]:
    """Unfinished operations, oldest first; a journal that does not read is reported by
    `verify --repair`, not acted on."""
    folder = journal_dir(layout)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob(f"{kind or '*'}-*{SUFFIX}"), key=lambda p: (p.stat().st_mtime, p.name)):
        if path.is_symlink():
            continue
        try:
            record = jsoncodec.loads(path.read_bytes())
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append((path, record))
    return found
