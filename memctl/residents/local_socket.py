"""A memory root's resident processes and their clients: one Unix socket under `.memctl/` per
service (the resident writer's `writer.sock`, the resident searcher's `semantic.sock`), served by
one detached process of this user, found by its clients, both sides checking the peer's uid.

The client side imports `_socket` only (not `socket`, which loads enum): it runs in the short
`remember` and `search` processes, where every import is paid on each call. Messages are framed:
the body's length and `\\n`, then each field as `N:` and N bytes; how large one may be is
memctl.core.limits'.
"""

from __future__ import annotations

import os
import sys

from memctl.core.limits import REPLY_BYTES


def socket_address(root: str, name: str) -> tuple[str, int | None] | None:
    """(address of `.memctl/NAME`, the folder's fd to close after use or None), or None when
    `.memctl/` is not a real folder (never follow a symlink out of the root). A long path (over
    the ~108 bytes a socket address holds) goes through /proc/self/fd."""
    state = os.path.join(root, ".memctl")
    try:
        info = os.lstat(state)
    except OSError:
        return None
    if info.st_mode & 0o170000 != 0o040000:
        return None
    address = os.path.join(state, name)
    if len(os.fsencode(address)) < 100:
        return address, None
    if not os.path.isdir("/proc/self/fd"):
        return None
    try:
        folder = os.open(state, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    return f"/proc/self/fd/{folder}/{name}", folder


def wanted() -> bool:
    """Whether a short process here may use (and start) a resident process: not turned off
    (`MEMCTL_RESIDENT=0`), no fault injection set (its tests count this process's own steps), and
    a platform that can check who serves it."""
    if os.environ.get("MEMCTL_RESIDENT", "") == "0" or any(name.startswith("MEMCTL_FAULT_") for name in os.environ):
        return False
    return usable()


def usable() -> bool:
    """Whether this platform can serve and check a resident process: the peer's uid is read with
    SO_PEERCRED (where it is missing a client would refuse every server), the server is started
    with posix_spawn under an flock (Windows has neither, nor fcntl: every command runs
    in-process there)."""
    if os.name != "posix" or not hasattr(os, "posix_spawn"):
        return False
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    import _socket

    return hasattr(_socket, "AF_UNIX") and hasattr(_socket, "SO_PEERCRED")


def connect(root: str, name: str):
    """A connection to the root's NAME service, run by this user; None when none serves."""
    import _socket

    found = socket_address(root, name)
    if found is None:
        return None
    address, folder = found
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.connect(address)
        if peer_uid(connection) != os.getuid():
            connection.close()
            return None
    except OSError:
        connection.close()
        return None
    finally:
        if folder is not None:
            os.close(folder)
    return connection


def peer_uid(connection) -> int | None:
    """The uid of the process at the other end (SO_PEERCRED: `usable` requires it)."""
    import _socket

    credentials = connection.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    return int.from_bytes(credentials[4:8], sys.byteorder)


def frame(fields: list[str | bytes]) -> bytes:
    """Length-prefixed fields (`N:` then N bytes each), the whole prefixed by its length and `\\n`."""
    parts = []
    for field in fields:
        data = field if isinstance(field, bytes) else field.encode("utf-8", "surrogatepass")
        parts.append(b"%d:" % len(data))
        parts.append(data)
    body = b"".join(parts)
    return b"%d\n" % len(body) + body


_LENGTH_DIGITS = 20  # a length longer than this is not a length


def receive(connection, limit: int = REPLY_BYTES) -> list[bytes] | None:
    """One framed message, or None when the other end closed first. Raises ValueError for bytes
    that are not a framed message of at most `limit` bytes."""
    data = b""
    while b"\n" not in data:
        if len(data) > _LENGTH_DIGITS:
            raise ValueError("not a framed message")
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\n")
    size = length(head, limit)
    parts, have = [body], len(body)
    while have < size:
        chunk = connection.recv(max(65536, size - have))
        if not chunk:
            return None
        parts.append(chunk)
        have += len(chunk)
    return fields_of(b"".join(parts)[:size])


def split_frame(data: bytes, limit: int) -> tuple[list[bytes] | None, bytes]:
    """(the first complete message's fields or None, the bytes after it). Raises ValueError for
    bytes that are not framed, or a message declaring more than `limit` bytes: a server refuses
    it at once rather than buffer what a client says is coming."""
    head, newline, body = data.partition(b"\n")
    if not newline:
        if len(head) > _LENGTH_DIGITS or (head and not head.isdigit()):
            raise ValueError("not a framed message")
        return None, data
    size = length(head, limit)
    if len(body) < size:
        return None, data
    return fields_of(body[:size]), body[size:]


def fields_of(body: bytes) -> list[bytes]:
    """The fields of a message's body; ValueError unless it is exactly `N:` and N bytes, again
    and again (a negative or missing length once sent a server round the same bytes forever)."""
    fields = []
    at = 0
    while at < len(body):
        colon = body.find(b":", at, at + _LENGTH_DIGITS + 1)
        if colon < 0:
            raise ValueError("not a framed message")
        start = colon + 1
        size = length(body[at:colon], len(body) - start)
        fields.append(body[start:start + size])
        at = start + size
    return fields


def length(digits: bytes, limit: int) -> int:
    """A length in ASCII digits (no sign, no space), at most `limit`; else ValueError."""
    if not digits or len(digits) > _LENGTH_DIGITS or not digits.isdigit():
        raise ValueError("not a framed message")
    size = int(digits)
    if size > limit:
        raise ValueError(f"a message of {size} bytes, over {limit}")
    return size


def stamp(path: str) -> str:
    """A file's version as stat sees it ('-' when absent)."""
    try:
        info = os.stat(path)
    except OSError:
        return "-"
    return f"{info.st_mtime_ns}:{info.st_size}:{info.st_ino}"


def open_state_file(root: str, name: str, flags: int) -> int | None:
    """`.memctl/NAME` opened with `flags` (created 0600), or None when it cannot be: `.memctl/` not
    a real folder, NAME a symlink. O_NOFOLLOW on the whole path guards only its last part: a
    symlinked `.memctl` was followed, and a lock or log written outside the root."""
    try:
        folder = os.open(os.path.join(root, ".memctl"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)


def occupied(address: str) -> bool:
    """Whether something other than a socket (a folder, a file, a symlink) sits at a socket's
    address: no server could bind there, and none is started to die trying."""
    try:
        return os.lstat(address).st_mode & 0o170000 != 0o140000
    except OSError:
        return False


def not_a_socket(root: str, name: str) -> str:
    return f"{os.path.join(root, '.memctl', name)} is not a socket; remove it to let memctl serve this root"


def start_detached(root: str, socket_name: str, lock_name: str, module: str, environment: dict[str, str]) -> str | None:
    """`python -m MODULE ROOT LOCK_FD`, detached, unless one runs or starts: it holds
    `.memctl/LOCK_NAME`, taken here and handed to it, so two clients never both start one.
    Returns why none can serve the root, for a warning, when the user must act."""
    found = socket_address(root, socket_name)
    if found is None:
        return None
    address, folder = found
    try:
        if occupied(address):
            return not_a_socket(root, socket_name)
    finally:
        if folder is not None:
            os.close(folder)
    _spawn(root, lock_name, module, environment)
    return None


def _spawn(root: str, lock_name: str, module: str, environment: dict[str, str]) -> None:
    from memctl.core.fsutil import try_lock  # here: a client that finds a server never loads it

    lock = open_state_file(root, lock_name, os.O_RDWR | os.O_CREAT)
    if lock is None:
        return
    try:
        if not try_lock(lock):
            return  # one runs, or starts
        os.set_inheritable(lock, True)
        null = os.devnull
        os.posix_spawn(sys.executable, [sys.executable, "-P", "-m", module, root, str(lock)], environment,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0)],
                       setsid=True)
    except OSError:  # one runs, or it cannot start: the next client tries again
        pass
    finally:
        os.close(lock)
