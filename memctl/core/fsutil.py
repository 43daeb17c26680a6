"""Safe file handling: atomic writes, the single writer lock, private permissions, safe names.

The recipes are borg's SaveFile and restic's local backend (conventions.md §6): a temp file
in the destination folder, fsync, rename, fsync of the folder; the temp file is removed on
any failure. The lock is a kernel lock on `.memctl/lock`, released by the kernel when the
process dies, so a killed run never leaves a stale lock behind: `flock` on POSIX,
`msvcrt.locking` of the file's first byte on Windows. This is the only module that locks with
`fcntl` or `msvcrt` (the resident processes' start locks too: `try_lock`); `residents.local_socket`
only asks whether `fcntl` exists.

Portability: where a POSIX-only step does not exist it is skipped, never faked —
`O_NOFOLLOW` (Windows: symlinks need privileges to create, and `is_symlink` checks remain),
directory fsync (Windows cannot open a folder; NTFS journals the rename itself) and
permission bits (Windows has ACLs; `set_mode` does nothing there).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time

from memctl.core import faults
from memctl.core.errors import MAX_WAIT, LockBusy, ReadOnly, UnsafePath, UsageError, WriteFailed
from memctl.core.paths import join, name, parent

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


TYPE_CHECKING = False  # typing costs ~7 ms to import, paid by every search
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Iterable, Iterator

TMP_SUFFIX = ".tmp"
DIR_MODE = 0o700
FILE_MODE = 0o600
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # 0 where it does not exist (Windows)
POSIX_MODES = os.name != "nt"
PID_WIDTH = 24  # the lock file's content: the holder's pid, newline, padded with spaces


def set_mode(path: Path, mode: int) -> None:
    """chmod on POSIX; nothing on Windows, where os.chmod can only toggle read-only."""
    if POSIX_MODES:
        os.chmod(path, mode)


def fsync_dir(path: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder to fsync it
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:  # network file systems refuse directory fsync
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def refuse_symlink(*paths: Path) -> None:
    """One clear error if any of `paths` is a symlink (memctl neither writes nor reads through a
    link planted in the memory: it could point anywhere). A missing path is fine."""
    for path in paths:
        if os.path.islink(path):
            raise UnsafePath(f"{path} is a symlink; memctl does not follow links in the memory "
                             "(remove it and rerun)")


def open_nofollow(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """os.open that refuses a symlink at `path` with one line naming it (ELOOP otherwise)."""
    try:
        return os.open(path, flags | NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (not NOFOLLOW and os.path.islink(path)):
            refuse_symlink(path)
        raise


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) 0700; refuse a symlink where a folder is expected."""
    if not isinstance(path, str):
        path = _as_path(path)
    if os.path.islink(path):
        raise UnsafePath(f"{path} is a symlink; memctl only writes into real folders")
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)  # as Path.mkdir(parents=True): the mode is the leaf's
    return path


def _as_path(path) -> Path:
    from pathlib import Path

    return Path(path)


class _GuardedFile:
    """The write side of a temp file: every write goes through `faults.write` (all of it)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> int:
        write_all(self._fd, data)
        return len(data)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._fd


def write_all(fd: int, data: bytes) -> None:
    """Write the whole buffer (a short write is continued, as the kernel allows)."""
    view = memoryview(data)
    while view:
        written = faults.write(fd, view)
        view = view[written:]


_DISK_ERRORS = {errno.ENOSPC: "no space left on", getattr(errno, "EDQUOT", errno.ENOSPC): "disk quota exceeded on",
                errno.EIO: "input/output error writing", errno.EROFS: "read-only file system:",
                errno.EFBIG: "file too large:"}


def is_disk_error(exc: OSError) -> bool:
    return exc.errno in _DISK_ERRORS


def write_failed(path: Path, exc: OSError) -> WriteFailed:
    """The one-line error for a write the disk refused, after the file was put back."""
    return WriteFailed(f"{_DISK_ERRORS.get(exc.errno, 'cannot write')} {path}: nothing was written")


def make_temp(folder: Path, prefix: str, suffix: str) -> tuple[int, Path]:
    """A new private file `folder/prefix<random>suffix`, opened for writing: what
    `tempfile.mkstemp` does (O_EXCL, mode 0600), without its import (~4 ms of a write process)."""
    for _ in range(100):
        path = join(folder if isinstance(folder, str) else _as_path(folder), f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, FILE_MODE), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))


@contextlib.contextmanager
def atomic_writer(dest: Path, mode: int = FILE_MODE) -> Iterator[object]:
    """Yield a binary writer; on success it replaces `dest` atomically and durably. A full or
    failing disk raises WriteFailed with `dest` untouched."""
    dest = dest if isinstance(dest, str) else _as_path(dest)
    folder = parent(dest)
    sync_pending()
    refuse_symlink(dest)  # os.replace would swap the link itself, but a planted link is refused
    fd, tmp = make_temp(folder, f".{name(dest)}.", TMP_SUFFIX)
    try:
        try:
            yield _GuardedFile(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        set_mode(tmp, mode)
        os.replace(tmp, dest)
        fsync_dir(folder)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and is_disk_error(exc):
            raise write_failed(dest, exc) from None
        raise


class StagedFile:
    """A file's next contents, written and fsynced beside it ahead of time — before a lock is
    taken — so that the moment of replacing it is short: `put_in_place(tail)` appends `tail`
    (what was added to the file meanwhile), fsyncs and renames over the file, then fsyncs the
    folder; `discard()` removes it. A full disk raises WriteFailed with the file untouched.
    Left behind by a kill, it is a stale temp file (with TMP_SUFFIX, `sweep_stale_temp_files`
    removes it; with another suffix, its owner must)."""

    def __init__(self, dest: Path, data: bytes | Iterable[bytes], suffix: str = TMP_SUFFIX,
                 mode: int = FILE_MODE) -> None:
        """`data`: the bytes, or pieces of them written one after the other (a big file is
        never held whole)."""
        self.dest = dest if isinstance(dest, str) else _as_path(dest)
        self._mode = mode
        sync_pending()
        refuse_symlink(self.dest)
        fd, self._tmp = make_temp(parent(self.dest), f".{name(self.dest)}.", suffix)
        self._guarded(fd, data)

    def present(self) -> bool:
        return os.path.isfile(self._tmp)

    def open_for_reading(self) -> int:
        """A descriptor reading the staged bytes, valid after they are put in place."""
        return open_nofollow(self._tmp, os.O_RDONLY)

    def put_in_place(self, tail: bytes = b"") -> None:
        if tail:
            self._guarded(open_nofollow(self._tmp, os.O_WRONLY | os.O_APPEND), tail)
        try:
            set_mode(self._tmp, self._mode)
            os.replace(self._tmp, self.dest)
            fsync_dir(parent(self.dest))
        except BaseException as exc:
            self._failed(exc)
            raise

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)

    def _guarded(self, fd: int, data: bytes) -> None:
        try:
            try:
                for piece in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
                    write_all(fd, piece)
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            self._failed(exc)
            raise

    def _failed(self, exc: BaseException) -> None:
        self.discard()
        if isinstance(exc, OSError) and is_disk_error(exc):
            raise write_failed(self.dest, exc) from None


# --- group commit: the fsync of a write's last append, after the writer lock is released
#
# Why it is safe to acknowledge a write whose line another writer may already have read
# before the line was on disk: the acknowledgement (exit 0) still waits for this process's own
# fsync, so what a process acknowledges is durable. A later writer that read the unsynced
# line, and acted on it, either appends to the same file and fsyncs it before its own
# acknowledgement (an fsync flushes every dirty page of the file, the earlier line too), or
# rewrites the file atomically, whose new copy it fsyncs before the rename. A power loss before
# the first process's fsync returned loses a line nobody acknowledged, or nothing. Only the
# last append of a write is deferred (`synced_after_unlock`), never one that a later step of a
# journaled multi-file change depends on, and any other durable write of the same process
# first syncs what is pending (`sync_pending`), so the order on disk is the order of writing.

_defer_sync = False
_unsynced: list[tuple[int, str]] = []  # (open fd, path) of appends written, not yet fsynced


@contextlib.contextmanager
def synced_after_unlock() -> Iterator[None]:
    """Around the last append of a write: its fsync waits for the writer lock's release, so the
    next writer need not wait for this one's disk flush (group commit)."""
    global _defer_sync
    _defer_sync = True
    try:
        yield
    finally:
        _defer_sync = False


def defer_sync(fd: int, path: Path) -> bool:
    """Keep `fd` open to fsync after the lock is released; False (the caller syncs now) unless
    inside `synced_after_unlock` with a writer lock held."""
    if not (_defer_sync and _held):
        return False
    _unsynced.append((fd, str(path)))
    return True


def sync_pending() -> None:
    """fsync (and close) every deferred append; WriteFailed if the disk refuses. Its line stays
    in the file — other writers may have appended after it — and nothing was acknowledged."""
    synced: set[tuple[int, int]] = set()
    while _unsynced:
        fd, path = _unsynced.pop(0)
        try:
            _sync_once(fd, path, synced)
        finally:
            os.close(fd)


def _sync_once(fd: int, path: str, synced: set[tuple[int, int]]) -> None:
    """fsync `fd` unless another fd of the same file was synced after every deferred write (the
    resident writer's batch: many appends to L5, one fsync)."""
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) not in synced:
            faults.sync(fd)
            synced.add((info.st_dev, info.st_ino))
    except OSError as exc:
        raise _unconfirmed(path, exc) from None


def _unconfirmed(path, exc: OSError) -> WriteFailed:
    return WriteFailed(f"{path}: written, but the disk did not confirm it ({exc.strerror or exc}); "
                       "it may not survive a power loss (`memctl verify` checks the files)")


def sync_file(path) -> None:
    """fsync a file written earlier by another process (a resident writer that died before its
    fsync); WriteFailed as `sync_pending` says it."""
    sync_pending()
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except OSError as exc:
        raise _unconfirmed(path, exc) from None
    try:
        faults.sync(fd)
    except OSError as exc:
        raise _unconfirmed(path, exc) from None
    finally:
        os.close(fd)


def atomic_write_bytes(dest: Path, data: bytes, mode: int = FILE_MODE) -> None:
    with atomic_writer(dest, mode) as handle:
        handle.write(data)


def atomic_write_text(dest: Path, text: str, mode: int = FILE_MODE) -> None:
    atomic_write_bytes(dest, text.encode("utf-8", "surrogateescape"), mode)


def append_durably(dest: Path, data: bytes) -> None:
    """Append one complete record with a single write(), then fsync (history, logs); on a full
    disk the file is cut back to its length and WriteFailed raised."""
    sync_pending()
    fd = open_nofollow(dest, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        start = os.fstat(fd).st_size
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:  # a full disk: cut back what part of the record went in
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            if is_disk_error(exc):
                raise write_failed(dest, exc) from None
            raise
    finally:
        os.close(fd)


def sweep_stale_temp_files(folder: Path, before: float | None = None,
                           owned: tuple[str, ...] = ()) -> list[Path]:
    """Remove temp files a killed run left behind (they never hold the only copy of anything).
    `before`: only those last changed before this time (a writer's own start); `owned`: only
    temp files of these destination names (`.NAME.xxxx.tmp`)."""
    removed = []
    if not os.path.isdir(folder):
        return removed
    for entry in os.scandir(folder):
        if not (entry.name.startswith(".") and entry.name.endswith(TMP_SUFFIX)) or not entry.is_file(follow_symlinks=False):
            continue
        if owned and not any(entry.name.startswith(f".{name}.") for name in owned):
            continue
        with contextlib.suppress(FileNotFoundError):
            if before is not None and entry.stat(follow_symlinks=False).st_mtime >= before:
                continue
            os.unlink(entry.path)
            removed.append(entry.path if isinstance(folder, str) else _as_path(entry.path))
    return removed


def safe_child(folder: Path, name: str) -> Path:
    """`folder/name`, refusing names that would leave the folder (`../x`, `/etc/x`, `a/b`)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise UnsafePath(f"refusing unsafe name {name!r}: it must be a plain file name")
    return _as_path(folder) / name


def pread(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes at `offset`: `os.pread`, or where it is missing (Windows) a seek and
    reads on this process's own descriptor (every caller opened it; none shares it)."""
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    parts = []
    while size > 0:
        part = os.read(fd, size)
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def read_bytes_nofollow(path: Path) -> bytes:
    """Read a file's bytes, refusing to follow a symlink."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def try_lock(fd: int, wait: bool = False, poll: float = 0.05) -> bool:
    """Take the exclusive lock on an open lock file; False if another process holds it."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            return True
        except BlockingIOError:
            return False
    while True:
        if _msvcrt_try_lock(fd):
            return True
        if not wait:
            return False
        time.sleep(poll)


def unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return
    import msvcrt

    os.lseek(fd, 0, os.SEEK_SET)
    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _msvcrt_try_lock(fd: int) -> bool:
    try:
        import msvcrt
    except ImportError:
        raise LockBusy("this platform offers neither fcntl nor msvcrt file locks; memctl cannot "
                       "keep two writers apart here") from None
    os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks bytes from the current position
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:  # EACCES / EDEADLOCK: another process holds the byte
        return False


def open_lock_file(path: Path) -> int:
    """Open (creating) a lock file; a folder this process may not write is one clear error."""
    try:
        ensure_private_dir(_parent_of(path))
        return open_nofollow(path, os.O_RDWR | os.O_CREAT)
    except PermissionError:
        raise ReadOnly(f"cannot write to {_parent_of(path)}: permission denied "
                       "(a read-only memory can be searched, not changed)") from None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise ReadOnly(f"cannot write to {_parent_of(path)}: read-only file system") from None
        raise


def _parent_of(path) -> str | Path:
    """`Path(path).parent`, a str for a str."""
    return parent(path if isinstance(path, str) else _as_path(path))


_held: set[str] = set()  # the lock files this process holds


def holds_writer_lock(lock_path: Path) -> bool:
    """Whether this process holds the writer lock of that memory (derived state written only
    under it, such as the write lookups, is kept current only then)."""
    return os.path.abspath(lock_path) in _held


def lock_wait(seconds: float) -> float:
    """A --wait checked: a number of seconds up to MAX_WAIT (a negative one waits not at all);
    inf, nan and 1e400 (read as inf) are refused with one line, not a traceback or an endless wait."""
    if not -MAX_WAIT <= seconds <= MAX_WAIT:  # nan compares false
        raise UsageError(f"--wait must be a number of seconds up to {MAX_WAIT:.0f}, got {seconds}")
    return max(seconds, 0.0)


class WriterLock:
    """The one exclusive lock every writing command takes (`.memctl/lock`)."""

    def __init__(self, lock_path: Path, wait_seconds: float = 0.0, poll: float = 0.05):
        self.lock_path = lock_path if isinstance(lock_path, str) else _as_path(lock_path)
        self.wait_seconds = lock_wait(wait_seconds)
        self.poll = poll
        self._fd: int | None = None

    def acquire(self) -> "WriterLock":
        fd = open_lock_file(self.lock_path)
        deadline = time.monotonic() + self.wait_seconds
        # a writer holds the lock for a few milliseconds: retry after 1 ms, backing off to `poll`
        # (a fixed 50 ms sleep left the lock idle most of the time with 8 writers waiting)
        delay = min(0.001, self.poll)
        while not try_lock(fd):
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                os.close(fd)
                raise LockBusy(
                    f"lock busy: another memctl is writing to this memory{holder}; "
                    "retry later or pass --wait SECONDS"
                )
            time.sleep(delay)
            delay = min(delay * 2, self.poll)
        if fcntl is not None:  # under msvcrt the locked byte cannot hold the pid
            # one fixed-width write, no ftruncate (which costs milliseconds on overlay file systems)
            try:
                os.pwrite(fd, f"{os.getpid()}\n".encode().ljust(PID_WIDTH), 0)
            except OSError as exc:
                # the pid only names the holder in a busy message: a new lock file on a full
                # disk must not turn the write it guards into a raw OSError (that write says it)
                if not is_disk_error(exc):
                    os.close(fd)
                    raise
        self._fd = fd
        _held.add(os.path.abspath(self.lock_path))
        return self

    def release(self) -> None:
        if self._fd is not None:
            _held.discard(os.path.abspath(self.lock_path))
            unlock(self._fd)
            os.close(self._fd)
            self._fd = None
            if not _held:
                faults.checkpoint("unlocked, last append not yet synced")
                sync_pending()

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except (OSError, AttributeError):  # no os.pread on Windows
        return ""
    return f" (pid {text})" if text.isdigit() else ""
