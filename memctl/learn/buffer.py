"""A session's buffer: its messages as plain files under the memory root (design.md §9a).

One session, three files in `sessions/`, named by the session id's encoding (`encoded_name`):

- `<name>.jsonl`: the messages, one JSON object a line, in the order they arrived; each line
  is a `Message.to_dict()` (its `position` its line number from 0) plus, for a message sent
  without an id, the `digest` of its role, content, time and speaker that recognises its retry.
  Appended only, through `core.jsonl.append_lines` (one write, fsync, a torn tail cut aside), so
  a message is acknowledged only once it is whole on disk.
- `<name>.state`: a JSON object, replaced atomically (`fsutil.atomic_write_bytes`): the session
  id, how many messages are `processed` (extracted and routed), when it was `closed` (disposed),
  and what was learned from it (for `compact`'s summary).
- `<name>.lock`: the session's lock, held while its files change (never with the writer lock
  held first: the writer lock is always the inner one).

The buffer is the truth and the state only says how far the work got: a run killed after an
append and before the state was written leaves messages unprocessed, which the next run
extracts again; the router's deterministic entry ids keep that from writing anything twice.
`.jsonl` and `.state` are not searched as L3 files (recall.indexing.sources takes neither suffix).
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime

from memctl.core import jsoncodec
from memctl.core.errors import UsageError
from memctl.core.fsutil import WriterLock, atomic_write_bytes, ensure_private_dir, open_nofollow
from memctl.core.jsonl import append_lines, split_torn, torn_dir
from memctl.core.paths import join
from memctl.learn.candidates import ROLES, Message

SESSIONS_DIR = "sessions"
MAX_ID_BYTES = 256  # a session id, a message id, a speaker
NAME_CHARS = 64  # the readable part of a long id's file name, before its hash
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_DEVICE_NAMES = frozenset(("CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"))
_OPTIONAL_TEXT = ("id", "time", "speaker")
BAD_JSON = (ValueError, TypeError, RecursionError)


def sessions_dir(layout) -> str:
    return join(str(layout.root), SESSIONS_DIR)


def check_session_id(session_id: str) -> str:
    """The id as given, or a one-line UsageError: empty, too long, a control character, not UTF-8."""
    _check_label("session id", session_id)
    if not session_id.strip():
        raise UsageError("the session id is empty: pass --session ID")
    return session_id


def _check_label(what: str, value: str) -> None:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"the {what} is not valid UTF-8") from None
    if size > MAX_ID_BYTES:
        raise UsageError(f"the {what} is {size} bytes long; at most {MAX_ID_BYTES}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"the {what} holds a control character (NUL, newline, …); use printable text")


def encoded_name(session_id: str) -> str:
    """A file name for any session id that stays inside `sessions/` on every system: letters,
    digits, `-`, `_` and `.` (not first, not last) kept, every other byte as `%XX`; a name Windows
    reserves for a device (`CON`, `nul.txt`, `COM1`) escaped; a long one cut, and one holding a
    capital letter, told apart by its hash (`Abc` and `abc` are one file on macOS and Windows)."""
    data = session_id.encode("utf-8")
    out = []
    for index, byte in enumerate(data):
        char = chr(byte)
        edge = char == "." and index in (0, len(data) - 1)
        out.append(char if char in _SAFE and not edge else f"%{byte:02X}")
    if _is_device_name(session_id):
        out[0] = f"%{data[0]:02X}"
    name = "".join(out)
    if len(name) <= NAME_CHARS + 17 and not any("A" <= char <= "Z" for char in session_id):
        return name
    cut = name[:NAME_CHARS]
    percent = cut.rfind("%", len(cut) - 2)
    if percent >= 0:
        cut = cut[:percent]
    return f"{cut}~{hashlib.sha256(data).hexdigest()[:16]}"


def _is_device_name(session_id: str) -> bool:
    stem = session_id.split(".", 1)[0].rstrip(" ").upper()
    return stem in _DEVICE_NAMES or (len(stem) == 4 and stem[:3] in ("COM", "LPT") and stem[3] in "0123456789")


class SessionFiles:
    """The paths of one session's files."""

    __slots__ = ("session", "folder", "messages", "state", "lock")

    def __init__(self, layout, session_id: str) -> None:
        self.session = check_session_id(session_id)
        self.folder = sessions_dir(layout)
        base = join(self.folder, encoded_name(session_id))
        self.messages, self.state, self.lock = base + ".jsonl", base + ".state", base + ".lock"

    def locked(self, wait: float) -> WriterLock:
        ensure_private_dir(self.folder)
        return WriterLock(self.lock, wait_seconds=wait)


# ---------------------------------------------------------------- the input of `turn`


def parse_messages(data: bytes) -> list:
    """The items of one `turn` call's input: JSON Lines, or one JSON array (`check_messages`
    checks them). A one-line UsageError names the first thing wrong."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"the input is not valid UTF-8 (byte {exc.start + 1}); send messages as UTF-8 JSON") from None
    text = text.removeprefix("\ufeff")  # a byte order mark some Windows editors write first
    stripped = text.strip()
    if not stripped:
        raise UsageError("no messages: send JSON Lines or a JSON array of {\"role\", \"content\"} objects")
    if stripped.startswith("["):
        items = _loads(stripped, "the input")
        if not isinstance(items, list):
            raise UsageError("the input is not a JSON array of messages")
    else:
        items = [_loads(line, f"line {number}") for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    return items


def check_messages(items, max_message_bytes: int) -> list[dict]:
    """Every message checked before any is buffered (a batch is all or nothing): a one-line
    UsageError names the first thing wrong."""
    if not isinstance(items, list):
        raise UsageError("the messages must be a list of {\"role\", \"content\"} objects")
    if not items:
        raise UsageError("no messages: send JSON Lines or a JSON array of {\"role\", \"content\"} objects")
    return [_checked(item, number, max_message_bytes) for number, item in enumerate(items, 1)]


def _loads(text: str, where: str):
    try:
        return jsoncodec.loads(text)
    except BAD_JSON as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else exc.__class__.__name__
        raise UsageError(f"{where} is not JSON ({reason})") from None


def _checked(item, number: int, max_message_bytes: int) -> dict:
    where = f"message {number}"
    if not isinstance(item, dict):
        raise UsageError(f"{where} is not a JSON object with \"role\" and \"content\"")
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise UsageError(f"{where}: \"role\" must be one of {', '.join(ROLES)}, got {_shown(role)}")
    if not isinstance(content, str):
        raise UsageError(f"{where}: \"content\" must be a string, got {_shown(content)}")
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > max_message_bytes:
        raise UsageError(f"{where} is {size} bytes; at most {max_message_bytes} ([learn] max_message_bytes)")
    message = {"role": role, "content": content}
    for key in _OPTIONAL_TEXT:
        value = item.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise UsageError(f"{where}: \"{key}\" must be a string, got {_shown(value)}")
        _check_label(f"{key} of {where}", value)
        message[key] = value
    if "time" in message:
        _check_time(message["time"], where)
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
            raise UsageError(f"{where}: \"tool_calls\" must be a list of objects")
        if len(jsoncodec.dumps(calls)) > max_message_bytes:
            raise UsageError(f"{where}: its tool_calls are over {max_message_bytes} bytes ([learn] max_message_bytes)")
        message["tool_calls"] = calls
    _check_unicode(message, where)
    return message


def _check_unicode(message: dict, where: str) -> None:
    """JSON's "\\ud800" decodes to a lone surrogate, which no UTF-8 file can hold: buffered, it
    would make every later read of the session fail, so the batch is refused here."""
    try:
        jsoncodec.dumps(message).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{where} holds a lone surrogate (such as \"\\ud800\"), which is not text; "
                         "send valid Unicode") from None


def _check_time(value: str, where: str) -> None:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{where}: \"time\" is not ISO 8601 (e.g. 2026-04-05T09:00:00): {value[:40]!r}") from None


def _shown(value) -> str:
    return "nothing" if value is None else type(value).__name__ if not isinstance(value, str) else repr(value[:40])


# ---------------------------------------------------------------- reading and appending


def read_messages(files: SessionFiles) -> list[Message]:
    """The buffered messages in order; a torn last line (a killed append, never acknowledged) and
    a line that is not a message are skipped."""
    messages = []
    for line in _lines(files.messages):
        try:
            messages.append(Message.from_dict(line))
        except BAD_JSON:
            continue
    return messages


def _lines(path: str) -> list[dict]:
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        with os.fdopen(fd, "rb") as handle:
            fd = None
            whole, _ = split_torn(handle.read())
    finally:
        if fd is not None:
            os.close(fd)
    out = []
    for raw in whole.splitlines():
        try:
            line = jsoncodec.loads(raw)
        except BAD_JSON:
            continue
        if isinstance(line, dict):
            out.append(line)
    return out


def digest(message: dict) -> str:
    """What recognises the retry of a message sent without an id."""
    parts = [message.get(key, "") for key in ("role", "content", "time", "speaker")]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def new_lines(files: SessionFiles, session_id: str, incoming: list[dict]) -> tuple[list[dict], list[Message]]:
    """The lines to append for `incoming` (a retried message — the same id, or without one the
    same role, content, time and speaker — is left out, within the batch too), and what is
    buffered already. The session lock is held."""
    lines = _lines(files.messages)
    ids = {line.get("id") for line in lines}
    digests = {line.get("digest") for line in lines if line.get("digest")}
    fresh = []
    position = len(lines)
    for message in incoming:
        key = message.get("id") or digest(message)
        if key in ids or key in digests:
            continue
        line = {"session": session_id, **message, "position": position}
        if "id" in message:
            ids.add(key)
        else:
            line["id"], line["digest"] = f"#{position}", key
            digests.add(key)
        fresh.append(line)
        position += 1
    return fresh, [Message.from_dict(line) for line in lines]


def append(layout, files: SessionFiles, lines: list[dict], max_session_bytes: int) -> None:
    """Append the lines in one durable write (the session lock held); refused whole when the
    buffer would pass `[learn] max_session_bytes`."""
    if not lines:
        return
    payload = "".join(jsoncodec.dumps(line) + "\n" for line in lines).encode("utf-8", "surrogatepass")
    try:
        size = os.lstat(files.messages).st_size
    except FileNotFoundError:
        size = 0
    if size + len(payload) > max_session_bytes:
        raise UsageError(f"session {files.session[:60]!r} would pass {max_session_bytes} bytes "
                         "([learn] max_session_bytes): dispose it and continue in a new session")
    append_lines(files.messages, payload, torn_dir(layout.state_dir))


# ---------------------------------------------------------------- the state record


def read_state(files: SessionFiles) -> dict:
    try:
        fd = open_nofollow(files.state, os.O_RDONLY)
    except FileNotFoundError:
        return {"session": files.session, "processed": 0}
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    try:
        state = jsoncodec.loads(data)
    except BAD_JSON:
        state = None
    if not isinstance(state, dict) or not isinstance(state.get("processed"), int):
        return {"session": files.session, "processed": 0}  # a damaged record: the work is redone, nothing twice
    if state.get("session", files.session) != files.session:  # "Chat" and "chat" on a case-blind file system
        raise UsageError(f"session {files.session[:60]!r} shares its files with session {str(state['session'])[:60]!r} "
                         "on this file system (ids differing only in case); use another id")
    return state


def write_state(files: SessionFiles, state: dict) -> None:
    atomic_write_bytes(files.state, (jsoncodec.dumps(state) + "\n").encode("utf-8", "surrogatepass"))
