"""The serving side of a root's resident process (memctl.residents.local_socket is the client side):
its socket under `.memctl/` (mode 0600, only this user's peers), the framed messages it reads,
when it must stop (its socket file removed or replaced, its identity — memctl's version and
code, memctl.toml, the environment — no longer the clients'), and one line in its log on exit.
The resident writer (memctl.residents.writer) and the resident searcher
(memctl.residents.searcher) are its two services.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import time

from memctl.core.fsutil import try_lock
from memctl.core.limits import LOCAL_SEND_SECONDS, REPLY_SECONDS, REQUEST_BYTES, connection_limit
from memctl.residents import local_socket


CHECK_EVERY = 2.0  # seconds between two looks at the socket file, the identity and the code


class ResidentService:
    socket_name = ""
    log_name = ""
    idle = 20.0  # seconds without a request before it exits
    message_seconds = LOCAL_SEND_SECONDS  # a connection whose next message is not whole within this is dropped
    max_message = REQUEST_BYTES
    stale_reason = "its socket file or memctl's code changed"

    def __init__(self, root: str, identity) -> None:
        """`identity(root)`: what a client must share with this process (its first field after
        the protocol's name)."""
        self.root = root
        self._identity_of = identity
        self.identity = identity(root)
        self.code_stamps: dict[str, str] = {}
        self.code_changed()
        self.selector = selectors.DefaultSelector()
        self.listener = None
        self.socket_id = None
        self.buffers: dict = {}
        self.deadlines: dict = {}  # connection -> when its next message must be whole
        self.refused = 0  # connections dropped for what they sent, or did not send in time
        self.max_connections = connection_limit()
        self.stopping = False
        self.exit_reason = "idle"

    # --- the socket

    def bind(self) -> bool:
        found = local_socket.socket_address(self.root, self.socket_name)
        if found is None:
            return False
        address, folder = found
        try:
            if local_socket.occupied(address):  # never removed: someone's file, not a killed server's socket
                self.stop(local_socket.not_a_socket(self.root, self.socket_name))
                self.log_exit(self.summary())
                return False
            _remove(address)  # a killed server's: the lock (ours) says none serves it
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            os.chmod(address, 0o600)
            listener.listen(64)
            listener.setblocking(False)
            self.socket_id = file_id(address)
        finally:
            if folder is not None:
                os.close(folder)
        self.listener = listener
        self.selector.register(listener, selectors.EVENT_READ, None)
        return True

    def socket_path(self) -> str:
        return os.path.join(self.root, ".memctl", self.socket_name)

    def stale(self) -> bool:
        """The socket file gone or replaced, memctl.toml or the code changed."""
        return (file_id(self.socket_path()) != self.socket_id or self._identity_of(self.root) != self.identity
                or self.code_changed())

    def code_changed(self) -> bool:
        """Whether a loaded module of memctl's changed on disk (a reinstall, an edit) since it
        was first seen here."""
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None) if name.startswith("memctl") else None
            if path:
                stamp = self.code_stamps.setdefault(path, local_socket.stamp(path))
                if local_socket.stamp(path) != stamp:
                    return True
        return False

    def ready(self) -> bool:
        """Whether to serve this root at all, checked (and anything slow loaded) before the socket
        is bound: until then clients do the work themselves."""
        return True

    def summary(self) -> str:
        """What was done, for the log line."""
        return ""

    def serve(self) -> None:
        """Handle what arrives until stopped, `idle` seconds pass without a message (and nothing
        is half done), or the socket, the identity or the code go stale."""
        last_message = last_check = time.monotonic()
        while not self.stopping:
            if self.handle(self.messages(timeout=1.0)):
                last_message = time.monotonic()
            now = time.monotonic()
            self.drop_late(now)
            if now - last_message >= self.idle and not self.busy():
                return
            if now - last_check >= CHECK_EVERY and not self.stopping:
                last_check = now
                if self.stale():
                    self.stop(self.stale_reason)

    def handle(self, messages: list[tuple]) -> bool:
        """Act on (connection, fields) messages; whether any was a request."""
        raise NotImplementedError

    def busy(self) -> bool:
        return False

    def stop(self, reason: str) -> None:
        self.stopping, self.exit_reason = True, reason

    def close(self) -> None:
        """Stop serving, with a line in the log."""
        self.log_exit(self.summary())
        if self.listener is not None:
            if file_id(self.socket_path()) == self.socket_id:
                os.unlink(self.socket_path())
            self.selector.unregister(self.listener)
            self.listener.close()
        for connection in list(self.buffers):
            connection.close()

    def log_exit(self, summary: str) -> None:
        """One line in `.memctl/LOG` for the person wondering what the process did."""
        refused = f"\t{self.refused} connections refused" if self.refused else ""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\tpid {os.getpid()}\t{summary}{refused}\texited: {self.exit_reason}\n"
        fd = local_socket.open_state_file(self.root, self.log_name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        if fd is None:
            return
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape"))
        except OSError:
            pass
        finally:
            os.close(fd)

    # --- messages

    def messages(self, timeout: float) -> list[tuple]:
        """(connection, fields) of every message complete by now, waiting up to `timeout` for the
        first event. A connection stays watched for more until `release`d or `drop`ped."""
        found: list[tuple] = []
        events = self.selector.select(timeout)
        while events:
            accepting = True
            for key, _ in events:
                if key.data is None:
                    accepting = self._accept()
                elif key.fileobj in self.buffers:
                    found.extend(self._read(key.fileobj))
            if not accepting:  # out of descriptors: back to the loop, which drops the overdue
                break
            events = self.selector.select(0)
        return found

    def _accept(self) -> bool:
        """Take every waiting connection; False when none can be taken now (no descriptor left)."""
        while True:
            try:
                connection, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:  # EMFILE, ENFILE: until a connection is dropped
                return False
            try:
                ours = local_socket.peer_uid(connection) == os.getuid()
            except OSError:
                ours = False
            if not ours:
                connection.close()
                continue
            if len(self.buffers) >= self.max_connections:  # a flood of idle ones: the oldest gives way
                self.refuse(min(self.deadlines, key=self.deadlines.get))
            connection.setblocking(False)
            self.buffers[connection] = b""
            self.deadlines[connection] = time.monotonic() + self.message_seconds
            self.selector.register(connection, selectors.EVENT_READ, True)

    def _read(self, connection) -> list[tuple]:
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.drop(connection)
            return []
        data = self.buffers[connection] + chunk
        found = []
        try:
            fields, data = local_socket.split_frame(data, self.max_message)
            while fields is not None:
                found.append((connection, fields))
                fields, data = local_socket.split_frame(data, self.max_message)
        except ValueError:  # not a client of this protocol, or more than a client may send
            self.refuse(connection)
            return []
        self.buffers[connection] = data
        if found:
            self.deadlines[connection] = time.monotonic() + self.message_seconds
        return found

    def expect(self, connection, seconds: float) -> None:
        """Wait up to `seconds` from now for `connection`'s next message (a second message that
        comes only after the client's own work, not as soon as it connected)."""
        if connection in self.deadlines:
            self.deadlines[connection] = time.monotonic() + seconds

    def drop_late(self, now: float) -> None:
        """Drop the connections whose next message is overdue (a client that connected and sent
        nothing, or half a message): each would hold a file descriptor for as long as it liked."""
        for connection, deadline in list(self.deadlines.items()):
            if deadline <= now:
                self.refuse(connection)

    def release(self, connection) -> None:
        """No more messages wanted from `connection`: it is the caller's, blocking."""
        self._unwatch(connection)
        connection.setblocking(True)  # not a timeout: a peek with MSG_DONTWAIT would wait it out first

    def refuse(self, connection) -> None:
        """Close a connection for what it sent (or did not send in time), and keep serving."""
        self.refused += 1
        self.drop(connection)

    def drop(self, connection) -> None:
        self._unwatch(connection)
        connection.close()

    def _unwatch(self, connection) -> None:
        if connection in self.buffers:
            self.selector.unregister(connection)
            del self.buffers[connection]
            del self.deadlines[connection]


def reply(connection, fields: list[bytes]) -> None:
    try:
        connection.settimeout(REPLY_SECONDS)
        connection.sendall(local_socket.frame(fields))
    except OSError:  # the client is gone
        pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def file_id(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def take_lock(root: str, name: str) -> int | None:
    """`.memctl/NAME` locked, or None when another process holds it (it serves this root)."""
    fd = local_socket.open_state_file(root, name, os.O_RDWR | os.O_CREAT)
    if fd is None:  # no real `.memctl/` to serve from
        return None
    try:
        if try_lock(fd):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def run_service(argv: list[str], lock_name: str, service) -> int:
    """`python -m MODULE ROOT LOCK_FD|-` of a detached server: `service(root, lock_fd)` serves
    ROOT until it stops (`-`: started by hand, e.g. a bench or a test, it takes the lock itself)."""
    if not local_socket.usable():  # no client here could check who serves it, nor start it
        return 0
    os.umask(0o077)  # its files this user's alone
    os.chdir("/")  # no client's folder kept busy
    root = argv[0]
    lock_fd = int(argv[1]) if argv[1] != "-" else take_lock(root, lock_name)
    if lock_fd is None:
        return 0
    server = service(root, lock_fd)
    if not server.ready() or not server.bind():
        return 0
    try:
        server.serve()
    finally:
        server.close()
    return 0
