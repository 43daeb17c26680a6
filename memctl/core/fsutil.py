"""Safe file handling: atomic writes, the single writer lock, private permissions, safe names.

The recipes are borg's SaveFile and restic's local backend (conventions.md §6): a temp file
in the destination folder, fsync, rename, fsync of the folder; the temp file is removed on
any failure. The lock is a kernel `flock` on `.memctl/lock`, released by the kernel when the
process dies, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from memctl.core.errors import LockBusy, UnsafePath

TYPE_CHECKING = False  # typing costs ~7 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterator

TMP_SUFFIX = ".tmp"
DIR_MODE = 0o700
FILE_MODE = 0o600


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:  # network file systems refuse directory fsync
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) 0700; refuse a symlink where a folder is expected."""
    path = Path(path)
    if path.is_symlink():
        raise UnsafePath(f"{path} is a symlink; memctl only writes into real folders")
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_writer(dest: Path, mode: int = FILE_MODE) -> Iterator[object]:
    """Yield a binary file object; on success it replaces `dest` atomically and durably."""
    dest = Path(dest)
    folder = dest.parent
    import tempfile  # here: a search never writes whole files, and the import costs ~5 ms

    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{dest.name}.", suffix=TMP_SUFFIX)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        fsync_dir(folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_bytes(dest: Path, data: bytes, mode: int = FILE_MODE) -> None:
    with atomic_writer(dest, mode) as handle:
        handle.write(data)


def atomic_write_text(dest: Path, text: str, mode: int = FILE_MODE) -> None:
    atomic_write_bytes(dest, text.encode("utf-8", "surrogateescape"), mode)


def append_durably(dest: Path, data: bytes) -> None:
    """Append one complete record with a single write(), then fsync (history, logs)."""
    fd = os.open(dest, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files a killed run left behind (they never hold the only copy of anything)."""
    removed = []
    if not folder.is_dir():
        return removed
    for entry in os.scandir(folder):
        if entry.name.startswith(".") and entry.name.endswith(TMP_SUFFIX) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def safe_child(folder: Path, name: str) -> Path:
    """`folder/name`, refusing names that would leave the folder (`../x`, `/etc/x`, `a/b`)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise UnsafePath(f"refusing unsafe name {name!r}: it must be a plain file name")
    return Path(folder) / name


def read_bytes_nofollow(path: Path) -> bytes:
    """Read a file's bytes, refusing to follow a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{path} is a symlink; memctl does not follow links in the memory") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


class WriterLock:
    """The one exclusive lock every writing command takes (`.memctl/lock`)."""

    def __init__(self, lock_path: Path, wait_seconds: float = 0.0, poll: float = 0.05):
        self.lock_path = Path(lock_path)
        self.wait_seconds = wait_seconds
        self.poll = poll
        self._fd: int | None = None

    def acquire(self) -> "WriterLock":
        ensure_private_dir(self.lock_path.parent)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        deadline = time.monotonic() + max(self.wait_seconds, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise LockBusy(
                        f"lock busy: another memctl is writing to this memory{holder}; "
                        "retry later or pass --wait SECONDS"
                    ) from None
                time.sleep(self.poll)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
