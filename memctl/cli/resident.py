"""The client of the resident writer: a plain `remember` handed to the process that serves the
root's `.memctl/writer.sock` (memctl.residents.writer), which writes it in a batch with the
other writers' requests under one lock hold and one fsync, and replies only after the fsync.

A `remember` process is mostly the interpreter's start-up and memctl's imports; the write
itself is a few percent of it. This client imports `_socket` (not `socket`, which loads enum)
and the argument reader, nothing of the settings, the entry format, SQLite or JSON. When no
writer answers — no socket, a refused connection, a writer of another version, code, config
or environment, any doubt — it returns None and the in-process write runs exactly as before,
then starts a writer for the next calls (`start_writer`, one per root: the flock on
`.memctl/writer.lock` decides). A writer that dies after the request was sent leaves the
request's entry id to the in-process retry, which first looks for that id in L5 (written but
unacknowledged: synced and reported, not written twice). `MEMCTL_RESIDENT=0` turns it off.
"""

from __future__ import annotations

import os
import sys

SOCKET_NAME = "writer.sock"
LOCK_NAME = "writer.lock"
PROTOCOL = "memctl-writer/1"
REPLY_MARGIN = 30.0  # seconds past the request's --wait before a silent writer counts as dead
# what the written text or its rendering depends on besides the request (MEMCTL_NOW is sent with it)
ENVIRONMENT = ("TZ", "NO_COLOR", "TERM", "COLUMNS", "XDG_CACHE_HOME", "MEMCTL_LOOKUPS", "MEMCTL_PG_DSN")

# set by `try_remember` for the in-process write that follows a None
wants_writer = False  # a writer was looked for and none served: start one after the write
stdin_text: str | None = None  # the text already read from stdin
retry_id: str | None = None  # the request was sent, no reply came: it may be in L5 under this id


def serves(settings) -> bool:
    """Whether a writer may serve this memory: it is on, and the memory is made of files."""
    return float(settings.get("writes", "resident_idle")) > 0 and settings.get("store", "backend") == "files"


def try_remember(argv: list[str]) -> int | None:
    """The exit status of a `remember` a resident writer answered, else None."""
    from memctl.residents.local_socket import wanted

    if not wanted():  # off, fault injection, or no way to check the writer's uid
        return None
    from memctl.cli.argv import global_options, write_form

    parsed = global_options(argv)
    if parsed is None or parsed[1] or parsed[2][:1] != ["remember"]:
        return None
    form = write_form(parsed[2])
    if form is None or _on_terminal():
        return None
    try:
        from memctl.core.roots import resolve_root

        root = resolve_root(parsed[0], as_text=True)
    except Exception:  # no memory here: the in-process path says so
        return None
    return _ask(root, *form)


def _on_terminal() -> bool:
    """rich renders some messages on a terminal: those runs stay in-process."""
    try:
        return sys.stdout.isatty() or sys.stderr.isatty()
    except (ValueError, AttributeError):
        return True


def _ask(root: str, options: dict, words: list[str]) -> int | None:
    global wants_writer, retry_id
    text = _text(words)
    if text is None:
        return None
    connection = connect(root)
    if connection is None:
        wants_writer = True
        return None
    from memctl.longterm.ids import new_id

    from memctl.core.limits import REQUEST_BYTES
    from memctl.residents.local_socket import frame, receive

    entry_id = new_id()
    request = frame(_request_fields(root, entry_id, options, text))
    if len(request) > REQUEST_BYTES:  # past any fact's limit: the in-process write says so
        connection.close()
        return None
    wait = options.get("wait", 10.0)
    try:
        connection.settimeout(max(wait, 0.0) + REPLY_MARGIN)
        connection.sendall(request)
        reply = receive(connection)
    except (OSError, ValueError):  # gone, or not a writer's reply
        reply = None
    finally:
        connection.close()
    if reply is None or reply[:1] != [b"ok"] or len(reply) != 4:
        wants_writer = True
        if reply != [b"decline"]:  # a declined request was not written
            retry_id = entry_id
        return None
    _write_out(reply[2], reply[3])
    return int(reply[1])


def _text(words: list[str]) -> str | None:
    """The fact's text, read from stdin for `-` or no word (kept for the in-process path)."""
    global stdin_text
    if words and words[0] != "-":
        return words[0]
    if sys.stdin is None or sys.stdin.isatty():
        return None
    from memctl.core.defaults import MAX_FACT_BYTES

    stdin_text = sys.stdin.read(MAX_FACT_BYTES + 1)  # as cli.writes.read_stdin: past it, refused
    return stdin_text


def _request_fields(root: str, entry_id: str, options: dict, text: str) -> list[str]:
    return [PROTOCOL, identity(root), os.environ.get("MEMCTL_NOW", ""), entry_id, text, options["type"],
            options.get("topic", ""), repr(options.get("confidence", 5.0)), options.get("source", ""),
            repr(options.get("wait", 10.0)), "1" if options.get("force") else "", "1" if options.get("json") else "",
            *options.get("contradicts", [])]


def identity(root: str) -> str:
    """What must be the same in the writer and here: memctl's code, the root, its memctl.toml,
    the environment the write reads."""
    import memctl
    from memctl.residents.local_socket import stamp

    parts = [memctl.__version__, stamp(__file__), root, stamp(os.path.join(root, "memctl.toml"))]
    parts += [f"{name}={os.environ.get(name, '')}" for name in ENVIRONMENT]
    return "\n".join(parts)


def _write_out(out: bytes, err: bytes) -> None:
    for stream, data in ((sys.stdout, out), (sys.stderr, err)):
        if data:
            stream.flush()
            stream.buffer.write(data)
            stream.buffer.flush()


# --- the socket (memctl.residents.local_socket), shared with the writer


def socket_address(root: str):
    from memctl.residents.local_socket import socket_address as address

    return address(root, SOCKET_NAME)


def connect(root: str):
    """A connection to the root's writer, run by this user; None when none serves."""
    from memctl.residents.local_socket import connect as connect_to

    return connect_to(root, SOCKET_NAME)


# --- starting a writer


def start_writer(root: str) -> str | None:
    """A detached writer for this root, unless one runs or starts (`writer.lock` decides); why
    none can, when the user must act."""
    from memctl.residents.local_socket import start_detached

    return start_detached(root, SOCKET_NAME, LOCK_NAME, "memctl.residents.writer", _writer_environment())


def _writer_environment() -> dict[str, str]:
    """This process's environment; `MEMCTL_WRITER_FAULT_*` become the writer's `MEMCTL_FAULT_*`
    (the crash tests), and nothing else of fault injection is passed on."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MEMCTL_FAULT_")}
    for name, value in os.environ.items():
        if name.startswith("MEMCTL_WRITER_FAULT_"):
            env["MEMCTL_FAULT_" + name[len("MEMCTL_WRITER_FAULT_"):]] = value
    return env
