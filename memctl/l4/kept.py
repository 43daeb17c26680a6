"""A second name for every raw log memctl has not archived yet, so that no deletion loses one.

A GenericAgent process that was running when `memctl init` took its archiver over has already
imported its own `compress_session`; its next 12-hour run deletes raw logs that are in no
memctl zip (and tiny or duplicate-named ones that are in no zip at all). So `init`, and every
archive run after it, gives each raw log a hard link under `.memctl/kept-raw/<inode>/<name>`:
whoever deletes the log in `temp/model_responses/`, its bytes stay here, and the next
`memctl archive` archives a kept log whose original is gone (an orphan) like any other, then
drops the link. Where a hard link is impossible (another filesystem), the log is copied
(again whenever it grows) and the report says so.

The folder is named by the original's inode: a raw log deleted and written anew under the
same name (a live GenericAgent process recreates its log) is another file, kept beside it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.fsutil import NOFOLLOW, atomic_writer, ensure_private_dir, fsync_dir
from memctl.l4.staging import Candidate, FileSignature

TYPE_CHECKING = False  # typing costs ~7 ms to import, paid by every archive run
if TYPE_CHECKING:
    from typing import BinaryIO

RAW_PREFIX, RAW_SUFFIX = "model_responses_", ".txt"
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


def open_log(path: Path) -> BinaryIO:
    """A raw log opened for reading: not through a symlink, and never waiting on a FIFO that
    whoever writes GenericAgent's folder put in its place (OSError instead)."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW | NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(fd, "rb")


def is_raw_log_name(name: str) -> bool:
    return name.startswith(RAW_PREFIX) and name.endswith(RAW_SUFFIX)


def beside_genericagent(layout: Layout) -> bool:
    """Whether GenericAgent's archiver (or memctl's shim in its place, the original kept beside
    it) is in L4: only there does another program delete raw logs."""
    return any((layout.l4_dir / name).is_file() for name in ("compress_session.py", "compress_session.genericagent.py"))


def kept_dir(layout: Layout) -> Path:
    return layout.state_dir / "kept-raw"


@dataclass
class KeepReport:
    linked: list[str] = field(default_factory=list)  # raw logs given a hard link now
    copied: list[str] = field(default_factory=list)  # raw logs copied (no hard link possible)
    orphans: list[str] = field(default_factory=list)  # kept logs whose original is gone


@dataclass
class KeptLog:
    path: Path
    info: os.stat_result
    original_inode: int  # the folder's name: the inode of the raw log it keeps


def kept_logs(layout: Layout) -> list[KeptLog]:
    """Every kept raw log (regular files only; anything else under the folder is ignored)."""
    folder = kept_dir(layout)
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = []
    for sub in sorted(os.scandir(folder), key=lambda e: e.name):
        if not sub.name.isdigit() or not sub.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(sub.path):
            if is_raw_log_name(entry.name) and entry.is_file(follow_symlinks=False):
                found.append(KeptLog(Path(entry.path), entry.stat(follow_symlinks=False), int(sub.name)))
    return found


def raw_logs(raw_dir: Path) -> list[tuple[Path, os.stat_result]]:
    """The regular raw-log files of the folder (no symlinks), with their lstat."""
    if not raw_dir.is_dir():
        return []
    found = []
    for entry in os.scandir(raw_dir):
        if is_raw_log_name(entry.name) and entry.is_file(follow_symlinks=False):
            found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
    return sorted(found)


def keep_unarchived(layout: Layout, raw_dir: Path) -> KeepReport:
    """Link (or copy) every raw log of `raw_dir` not kept yet; the caller holds the writer lock."""
    report = KeepReport()
    logs = raw_logs(raw_dir)
    kept = {(k.original_inode, k.path.name): k for k in kept_logs(layout)}
    report.orphans = [str(c.path) for c in orphan_candidates(layout, raw_dir)]
    touched = set()
    for path, info in logs:
        existing = kept.get((info.st_ino, path.name))
        if existing is not None and _still_current(existing, info):
            continue
        folder, how = _keep_in_folder(layout, path, info)
        (report.linked if how == "linked" else report.copied).append(path.name)
        touched.add(folder)
        faults.checkpoint("raw-kept")
    for folder in touched:
        fsync_dir(folder)
    if touched:
        fsync_dir(kept_dir(layout))
    return report


def keep_log(layout: Layout, path: Path, info: os.stat_result) -> None:
    """Keep one raw log under its inode now, durably, unless it is kept there already (a purge
    that replaced the log by its scrubbed copy: a new inode)."""
    target = kept_dir(layout) / str(info.st_ino) / path.name
    if target.is_file() and not target.is_symlink() and _still_current(KeptLog(target, target.stat(), info.st_ino), info):
        return
    folder, _ = _keep_in_folder(layout, path, info)
    fsync_dir(folder)
    fsync_dir(kept_dir(layout))


def _keep_in_folder(layout: Layout, path: Path, info: os.stat_result) -> tuple[Path, str]:
    folder = ensure_private_dir(kept_dir(layout) / str(info.st_ino))
    return folder, _keep_one(path, info, folder / path.name)


def _still_current(kept: KeptLog, info: os.stat_result) -> bool:
    """A link is the file itself; a copy is current while size and mtime match."""
    if os.path.samestat(kept.info, info):
        return True
    return (kept.info.st_size, kept.info.st_mtime_ns) == (info.st_size, info.st_mtime_ns)


def _keep_one(path: Path, info: os.stat_result, target: Path) -> str:
    """'linked', or 'copied' when the filesystem refuses a hard link."""
    if not target.exists():
        try:
            os.link(path, target, follow_symlinks=False)
            return "linked"
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
    _copy(path, target, info)
    return "copied"


def _copy(path: Path, target: Path, info: os.stat_result) -> None:
    """A durable copy with the original's mtime. A copy only grows: a log GenericAgent rewrote
    whole stays kept as it was (its folder gets a second copy beside it, never over it)."""
    if target.exists() and not _is_prefix_of(target, path):
        target = target.with_name(f"{target.stem}.{info.st_mtime_ns}{RAW_SUFFIX}")
    with open_log(path) as source, atomic_writer(target, 0o600) as out:
        shutil.copyfileobj(source, out, 1 << 20)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _is_prefix_of(kept: Path, path: Path) -> bool:
    with open(kept, "rb") as old, open_log(path) as new:
        while chunk := old.read(1 << 20):
            if new.read(len(chunk)) != chunk:
                return False
    return True


def kept_inodes(layout: Layout) -> set[tuple[int, int]]:
    """(device, inode) of every kept hard link: a raw log's second name that is memctl's own."""
    return {(k.info.st_dev, k.info.st_ino) for k in kept_logs(layout)}


def orphan_candidates(layout: Layout, raw_dir: Path) -> list[Candidate]:
    """Kept logs whose raw log is gone from `raw_dir` (deleted, or replaced by another file of
    the same name): nobody writes them any more, so they are archived whatever their age."""
    present = {(info.st_ino, path.name) for path, info in raw_logs(raw_dir)}
    return [Candidate(kept.path, FileSignature.of(kept.info)) for kept in kept_logs(layout)
            if (kept.original_inode, kept.path.name) not in present]


def drop_kept(layout: Layout, raw_inode: int, name: str) -> None:
    """Remove the kept link or copy of a raw log that was just archived and deleted."""
    folder = kept_dir(layout) / str(raw_inode)
    target = folder / name
    if target.is_file() and not target.is_symlink():
        target.unlink()
    remove_if_empty(folder)


def remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty, or not there
        pass
