"""Journals of multi-file operations: one 0600 file per operation in `.memctl/journal/`.

A purge, a dream step and an import write their intent here (what, which files, which ids,
and what a rerun needs to finish) before they touch anything, and delete it as their last
act, so a journal file that still exists is an operation that was cut off. The next writer
finishes or rolls it back before it does anything else (`memctl.longterm.recovery`), as
logrotate keeps one state file per run. A journal is written atomically: it is whole or absent.
"""

from __future__ import annotations

import contextlib
import os

from memctl.core import jsoncodec
from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes, ensure_private_dir, fsync_dir
from memctl.core.paths import join, parent

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

JOURNAL_DIR = "journal"
SUFFIX = ".json"


def journal_dir(layout: Layout) -> Path:
    return join(layout.state_dir, JOURNAL_DIR)


def begin(layout: Layout, kind: str, name: str, record: dict) -> Path:
    """Write the intent of one operation; the path to `update` and `end` it with."""
    folder = ensure_private_dir(journal_dir(layout))
    path = join(folder, f"{kind}-{name}{SUFFIX}")
    update(path, {**record, "kind": kind, "name": name})
    return path


def update(path: Path, record: dict) -> None:
    atomic_write_bytes(path, jsoncodec.dumps(record, ascii=True, sort_keys=True).encode("ascii"))


def end(path: Path) -> None:
    """The done record: the operation is complete and nothing needs to finish it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        fsync_dir(parent(path))


def pending(layout: Layout, kind: str | None = None) -> list[tuple[Path, dict]]:
    """Unfinished operations, oldest first; a journal that does not read is reported by
    `verify --repair`, not acted on."""
    folder = journal_dir(layout)
    if not os.path.isdir(folder):
        return []
    found = []
    names = [name for name in os.listdir(folder) if _is_journal(name, kind)]  # glob's `{kind or '*'}-*.json`
    for name in sorted(names, key=lambda name: (os.stat(join(folder, name)).st_mtime, name)):
        path = join(folder, name)
        if os.path.islink(path):
            continue
        try:
            with open(path, "rb") as handle:
                record = jsoncodec.loads(handle.read())
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append((path, record))
    return found


def _is_journal(name: str, kind: str | None) -> bool:
    if not name.endswith(SUFFIX):
        return False
    stem = name[: -len(SUFFIX)]
    return stem.startswith(f"{kind}-") if kind else "-" in stem
