"""One hostile-input suite for every long-lived process of memctl (issue #30): the resident
writer's socket, the resident searcher's socket, `memctl serve --http` (the JSON API at /v1 and
MCP at /mcp) and `memctl serve` on stdio meet the same hostile clients, under the limits of
memctl.core.limits. Each hostile message gets a one-line error (no exception's name) or a
clean close, nothing is written, and the next good request, on a fresh connection, is served.

| case                        | resident sockets          | serve --http /v1, /mcp          | serve on stdio           |
|-----------------------------|---------------------------|---------------------------------|--------------------------|
| garbage bytes               | closed, no reply          | 400 (uvicorn's line)            | -32700                   |
| invalid UTF-8               | closed                    | 400 / -32700                    | -32700                   |
| a declared huge length      | closed before reading     | 413 before reading; 400 (h11)   | a 5 MiB line: -32700     |
| negative, non-digit lengths | closed                    | 400 (h11)                       | none: stdio has no length|
| wrong JSON types, fields    | closed                    | 400 / -32600                    | -32600, or a tool error  |
| truncated, then closed      | dropped, not counted      | nothing written                 | the server exits 0       |
| slowloris, a stalled body   | closed when overdue       | head: closed; body: 408         | none: one client, a pipe |
| a flood of connections      | the oldest idle gives way | the oldest idle gives way       | none                     |

Every wait is bounded (BOUND); nothing asserts how long anything took.
"""

from __future__ import annotations

import http.client
import json
import marshal
import os
import re
import select
import socket
import subprocess
import time

import pytest
from conftest import clean_env, memctl_executable
from test_resident import RESIDENT, _init, _l5_ids, _remember, _start_writer, _stop_writers, roots  # noqa: F401

from memctl.cli import resident
from memctl.core import limits
from memctl.residents import local_socket

BOUND = 60.0  # seconds any one wait on a server may take before the test fails
EXCEPTION_NAME = re.compile(r"Traceback|\b[A-Z]\w*(Error|Exception)\b")
SOCKETS = pytest.mark.skipif(not local_socket.usable(), reason="needs Unix sockets with SO_PEERCRED")


def one_line(text: str) -> None:
    assert "\n" not in text.strip() and not EXCEPTION_NAME.search(text), text


# --- the residents' framed messages


FRAMES = {  # what any of the two residents refuses before reading a request's fields
    "garbage": bytes(range(256)) * 4,
    "invalid UTF-8 for a length": b"\xff\xfe\n1:x",
    "huge declared length": b"99999999999999\n1:x",
    "length past the limit": b"%d\n" % (limits.REQUEST_BYTES + 1),
    "negative field length": b"6\n1:x-3:",  # once: an endless loop, 100% CPU, memory without bound
    "signed length": b"+3\n1:x",
    "non-digit length": b"abc\n1:x",
    "field length missing": b"3\n:xy",
    "field longer than the body": b"4\n9:xy",
    "field length not digits": b"4\n 1:x",
    "a well-framed message of another protocol": local_socket.frame(["hello", "world"]),
}
HALF_A_FRAME = b"40\n5:memct"


class Surface:
    """What every surface's test drives: `connect()` a fresh connection, `refuses(name, payload)`,
    `cut(answer)` (what a hog got before it was cut off), `written()`, `serves(text)`, `finish(exact)`."""

    def connect(self) -> socket.socket:
        raise NotImplementedError

    def sent(self, payload: bytes) -> socket.socket:
        """A fresh connection `payload` was sent on (as much of it as the server took before it
        answered or closed)."""
        connection = self.connect()
        try:
            connection.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return connection

    def send_and_close(self, payload: bytes) -> None:
        self.sent(payload).close()


def unix_connection(address: str) -> socket.socket:
    """A connection to a resident's socket; retried while its listen backlog is full (a Unix
    socket refuses at once instead of waiting), for up to BOUND seconds."""
    deadline = time.monotonic() + BOUND
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(BOUND)
        try:
            connection.connect(address)
            return connection
        except BlockingIOError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def writer_log(root) -> str:
    log = root / ".memctl" / "writer.log"
    return log.read_text() if log.exists() else ""


class Resident(Surface):
    """A resident process's socket; each case on a fresh connection, which it must close unanswered."""

    def __init__(self, root, socket_name: str) -> None:
        self.root, self.address = root, str(root / ".memctl" / socket_name)
        self.refused = 0

    def connect(self) -> socket.socket:
        return unix_connection(self.address)

    def refuses(self, name: str, payload: bytes) -> None:
        assert cut_off(self.sent(payload)) == b"", name
        self.refused += 1

    def cut(self, answer: bytes) -> None:
        assert answer == b"", answer[:80]


def cut_off(connection: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection (each recv bounded by BOUND)."""
    got = b""
    try:
        while chunk := connection.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    finally:
        connection.close()
    return got


class Writer(Resident):
    def __init__(self, memctl_bin: str, roots, monkeypatch) -> None:
        root = _init(memctl_bin, roots())
        super().__init__(root, resident.SOCKET_NAME)
        self.memctl_bin, self.process = memctl_bin, _start_writer(root)
        wrong = [{"confidence": "abc"}, {"wait": "inf"}, {"wait": "nan"}, {"wait": "1e400"}, {"confidence": ""},
                 {"text": b"\xff\xfe not UTF-8"}, {"id": "../../etc"}, {"id": ""}, {"id": "m0123456789AB"}]
        self.cases = {**FRAMES, **{f"fields {fields}": writer_request(root, monkeypatch, **fields) for fields in wrong}}
        self.dribble = writer_request(root, monkeypatch)

    def written(self) -> list[str]:
        return _l5_ids(self.root)

    def serves(self, text: str) -> None:
        before = self.written()
        done = _remember(self.memctl_bin, self.root, text, "--wait", "10")
        assert done.returncode == 0 and done.stderr == b"", done
        assert self.written() == before + [done.stdout.decode().strip()]
        assert self.process.poll() is None  # served by the writer, not in-process after its death

    def finish(self, exact: bool) -> None:
        _stop_writers(self.root)
        log = writer_log(self.root)
        assert "requests in" in log
        if exact:  # every hostile message refused once, the truncated ones dropped uncounted
            assert f"\t{self.refused} connections refused\t" in log, log


def writer_request(root, monkeypatch, **fields) -> bytes:
    """A request as the client frames it, under the writer's environment, with `fields` replaced."""
    for name in resident.ENVIRONMENT:
        value = clean_env(**RESIDENT).get(name)
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    options = {"type": "event", "confidence": 5.0, "wait": 10.0}
    values = resident._request_fields(str(root), "m0123456789ab", options, "a hostile fact")
    names = ["protocol", "identity", "now", "id", "text", "type", "topic", "confidence", "source", "wait",
             "force", "json"]
    framed = []
    for name, value in zip(names, values):
        chosen = fields.get(name, value)
        framed.append(chosen if isinstance(chosen, bytes) else chosen.encode("utf-8", "surrogatepass"))
    return local_socket.frame(framed)


@SOCKETS
def test_the_request_helper_frames_what_the_writer_accepts(memctl_bin, roots, monkeypatch):  # noqa: F811
    """The writer's malformed-field cases prove something only if the unaltered request is written."""
    writer = Writer(memctl_bin, roots, monkeypatch)
    connection = writer.connect()
    connection.sendall(writer_request(writer.root, monkeypatch))
    reply = local_socket.receive(connection)
    connection.close()
    assert reply is not None and reply[:2] == [b"ok", b"0"], reply
    assert writer.written() == ["m0123456789ab"]


class Searcher(Resident):
    def __init__(self, run, root) -> None:
        from test_semantic import PARAPHRASE
        from test_semantic_helper import embedded_memory
        from test_semantic_resident import ALONE, _ranked, _start_searcher

        from memctl.recall.embeddings import semantic_helper

        embedded_memory(run, root)
        super().__init__(root, semantic_helper.SOCKET_NAME)
        self.run, self.query, self.ranked = run, PARAPHRASE, _ranked
        self.expected = _ranked(run, root, PARAPHRASE, ALONE)
        self.process = _start_searcher(root)
        self.searches = 0
        identity = semantic_helper.identity(str(root))
        protocol = semantic_helper.PROTOCOL
        self.cases = {**FRAMES,
                      "not marshal": local_socket.frame([protocol, identity, PARAPHRASE, b"not marshal"]),
                      "a number for a ranking": local_socket.frame([protocol, identity, PARAPHRASE, marshal.dumps(5)]),
                      "a ranking of 200 strings": local_socket.frame([protocol, identity, PARAPHRASE,
                                                                     marshal.dumps(("x",) * 200)]),
                      "a query not UTF-8": local_socket.frame([protocol, identity, b"\xff\xfe", marshal.dumps(())])}
        self.dribble = local_socket.frame([protocol, identity, PARAPHRASE, marshal.dumps(())])
        self.layers = self.written()

    def written(self) -> list[bytes]:
        return [(self.root / name).read_bytes() for name in ("long_term.jsonl", "long_term_archive.jsonl")
                if (self.root / name).exists()]

    def serves(self, text: str) -> None:
        from test_semantic_resident import SERVED

        assert self.ranked(self.run, self.root, self.query, SERVED) == self.expected
        self.searches += 1
        assert self.process.poll() is None and self.written() == self.layers

    def finish(self, exact: bool) -> None:
        from test_semantic_resident import _log, _served, _stop

        _stop(self.root)
        assert _served(self.root) == self.searches  # every search answered by the searcher, none by a fork
        if exact:
            assert f"\t{self.refused} connections refused\t" in _log(self.root), _log(self.root)


# --- memctl serve --http


def http_request(port: int, path: str, body: bytes, key: str, extra: str = "") -> bytes:
    """A POST as it goes on the wire, with a Content-Length unless `extra` sets the framing."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" + extra)
    if "Content-Length" not in extra and "Transfer-Encoding" not in extra:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def response_of(connection: socket.socket) -> tuple[int, bytes] | None:
    """(status, body) of the server's answer, or None when it closed without one."""
    answer = http.client.HTTPResponse(connection)
    try:
        answer.begin()
        return answer.status, answer.read()
    except (http.client.RemoteDisconnected, ConnectionResetError):
        return None
    finally:
        connection.close()


class Http(Surface):
    """`memctl serve --http` with small limits (a 4 KiB body, 2 s to send a request, 16
    connections), one key; each case a raw request on a fresh TCP connection."""

    def __init__(self, run, root, path: str) -> None:
        from serve_helpers import Server, add_key
        from test_serve_hostile import configure

        assert run("init", root=root).returncode == 0
        configure(root, max_body_bytes=4096, request_timeout=2, max_connections=16)
        self.root, self.path = root, path
        self.key = add_key(run, root, "k", "write")
        self.server = Server(root).__enter__()
        port, key = self.server.port, self.key

        def post(body: bytes, extra: str = "", to: str = path) -> bytes:
            return http_request(port, to, body, key, extra)

        wrong = ([b"[1, 2]", b'{"text": 42}', b'{"text": "x", "extra": "y"}', b'{"text": "   "}', b'{"text": "fact", "type": "no-such-type"}', b'{"text": "t", "namespace": "../up"}']
                 if path.startswith("/v1") else
                 [b"[1, 2]", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "x"}',
                  b'{"jsonrpc": "2.0", "id": "x", "method": 5}', b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}'])
        self.cases = {
            "garbage": bytes(range(256)) * 4,
            "a garbage body": post(b"{not json"),
            "invalid UTF-8": post(b"\xff\xfe not utf-8"),
            "a lone surrogate": post(b'{"text": "\\ud800 lone"}'),
            "nesting past the parser": post(b"[" * 4000),
            "huge declared length": post(b"", f"Content-Length: {50 << 20}\r\n"),
            "a length of 30 digits": post(b"", "Content-Length: " + "9" * 30 + "\r\n"),
            "negative length": post(b"", "Content-Length: -5\r\n"),
            "non-digit length": post(b"", "Content-Length: abc\r\n"),
            "a chunk size not hex": post(b"zz\r\nxx\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n"),
            "chunks past the limit": post(b"".join(b"400\r\n" + b"a" * 1024 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n",
                                          "Transfer-Encoding: chunked\r\n"),
            **{f"wrong types {body[:40]!r}": post(body) for body in wrong},
        }
        if path.startswith("/v1"):  # the other operations' arguments
            self.cases.update({f"{to} {body!r}": post(body, to=to) for to, body in [
                ("/v1/search", b'{"query": "x", "k": 1000000000000000000000000000000}'),
                ("/v1/search", b'{"query": "x", "layers": ["L9"]}'), ("/v1/search", b'{"query": 5}'),
                ("/v1/get", b'{"ref": "L3:../../../etc/passwd"}'), ("/v1/get", b'{"ref": "../../etc/passwd"}'),
                ("/v1/no-such-operation", b"{}")]})
        self.dribble = post(b'{"query": "x"}')

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=BOUND)

    def refuses(self, name: str, payload: bytes) -> None:
        answer = response_of(self.sent(payload))
        assert answer is not None, name
        status, body = answer
        assert 400 <= status < 500, (name, status, body)
        text = body.decode()
        one_line(text)
        if body.startswith(b"{"):
            found = json.loads(text)
            one_line(found["error"] if "status" in found else found["error"]["message"])

    def cut(self, answer: bytes) -> None:
        """Closed unanswered (a head never whole), or answered 408 (a body never whole)."""
        if answer:
            status_line, _, rest = answer.partition(b"\r\n")
            assert b" 408 " in status_line and b"request_timeout" in rest, answer[:200]

    def written(self) -> list:
        from serve_helpers import l5_lines

        return l5_lines(self.root)

    def serves(self, text: str) -> None:
        before = self.written()
        status, found = self.server.post("remember", {"text": text}, self.key)
        assert status == 200 and found["action"] == "added", found
        assert [entry["text"] for entry in self.written()] == [entry["text"] for entry in before] + [text]
        if self.path == "/mcp":
            initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
            answer = response_of(self.sent(http_request(self.server.port, "/mcp", json.dumps(initialize).encode(),
                                                        self.key)))
            assert answer is not None and answer[0] == 200 and b'"result"' in answer[1], answer

    def finish(self, exact: bool) -> None:
        self.server.stop()
        assert b"Traceback" not in self.server.log, self.server.log.decode(errors="replace")[-3000:]
        assert sorted(path.name for path in self.root.parent.iterdir()) == ["memory"]  # nothing written outside


# --- the surfaces, each a fixture's parameter


@pytest.fixture
def surface(request, run, root, memctl_bin, roots, monkeypatch):  # noqa: F811 (roots: a fixture)
    name = request.param
    if name in ("writer", "searcher") and not local_socket.usable():
        pytest.skip("needs Unix sockets with SO_PEERCRED")
    if name == "searcher":
        from test_semantic_helper import MULTILINGUAL

        if not MULTILINGUAL:
            pytest.skip("needs the multilingual model")
    if name.startswith("http"):
        pytest.importorskip("mcp")
    made = {"writer": lambda: Writer(memctl_bin, roots, monkeypatch),
            "searcher": lambda: Searcher(run, root),
            "http /v1": lambda: Http(run, root, "/v1/remember"),
            "http /mcp": lambda: Http(run, root, "/mcp")}[name]()
    try:
        yield made
    finally:
        if isinstance(made, Http):
            made.server.stop()
        elif isinstance(made, Searcher):
            from test_semantic_resident import _stop

            _stop(root)


@pytest.mark.parametrize("surface", ["writer", "searcher", "http /v1", "http /mcp"], indirect=True)
def test_hostile_messages_are_refused_alone_and_the_next_request_is_served(surface):
    for name, payload in surface.cases.items():
        surface.refuses(name, payload)
    before = surface.written()
    surface.send_and_close(HALF_A_FRAME if isinstance(surface, Resident) else surface.dribble[:-3])  # then gone
    assert surface.written() == before == ([] if not isinstance(surface, Searcher) else surface.layers)
    surface.serves("the backup runs at 02:00")
    surface.finish(exact=True)


@pytest.mark.parametrize("surface", ["writer", "searcher", "http /v1", "http /mcp"], indirect=True)
def test_connection_hogs_are_cut_off_and_never_block_a_real_client(surface):
    """Past the connections watched, idle ones; then a silent client, one holding half a request
    and one dribbling a request a byte at a time: a real client is served meanwhile, and each
    hog is cut off once its request is overdue (on HTTP: a head closed, a body answered 408)."""
    flood = [surface.connect() for _ in range(limits.CONNECTIONS + 44 if isinstance(surface, Resident) else 40)]
    silent = surface.connect()
    half = surface.sent(HALF_A_FRAME if isinstance(surface, Resident) else surface.dribble[:-3])
    dribbler = surface.sent(surface.dribble[:1])
    try:
        surface.serves("the cache lives on n3")  # while every hog holds on
        for hog in (silent, half):
            surface.cut(cut_off(hog))
        assert dribbled_until_cut(dribbler, surface.dribble[1:]), "a dribbler was served, or kept"
        surface.serves("and the proxy on 7890")
    finally:
        for connection in flood:
            connection.close()
    surface.finish(exact=False)


def dribbled_until_cut(connection: socket.socket, rest: bytes) -> bool:
    """Send `rest` a byte at a time, a few a second, until the server closes the connection;
    whether it did (within BOUND) before the request was whole."""
    deadline = time.monotonic() + BOUND
    try:
        for byte in rest[:-1]:  # never the last: the request is never whole
            ready, _, _ = select.select([connection], [], [], 0.2)
            if ready or time.monotonic() > deadline:
                break
            connection.sendall(bytes([byte]))
        ready, _, _ = select.select([connection], [], [], max(0.0, deadline - time.monotonic()))
        return bool(ready) and connection.recv(65536) == b""
    except (BrokenPipeError, ConnectionResetError):  # closed while sending
        return True
    finally:
        connection.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the server's sockets in /proc")
def test_an_http_reply_left_unread_ends_its_connection(run, root):
    """A client that sends requests and never reads their replies (its receive window shut):
    once the server's buffers are full, its connection is closed within REPLY_SECONDS of that
    (uvicorn would wait for the client to drain it forever). A resident's reply fits in the
    socket's buffer, and its send is bounded by the same REPLY_SECONDS."""
    pytest.importorskip("mcp")
    from serve_helpers import Server

    assert run("init", root=root).returncode == 0
    with Server(root) as server:
        reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.settimeout(BOUND)
        reader.connect(("127.0.0.1", server.port))
        try:
            request = f"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
            reader.sendall(request * 3000)  # ~20 MB of replies, never read
            held = waited_for(lambda: server_socket(server, reader))
            assert held, "the server never took the connection"
            assert waited_for(lambda: held not in open_sockets(server.process.pid)), "the unread reply was kept"
        finally:
            reader.close()
        status, _ = server.request("GET", "/openapi.json")
        assert status == 200


def waited_for(condition):
    """`condition()`'s first true value, polled until BOUND passes (then its last, false)."""
    deadline = time.monotonic() + BOUND
    while not (found := condition()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def server_socket(server, client: socket.socket) -> str | None:
    """The `socket:[inode]` of the server's end of `client`'s TCP connection, once it holds it."""
    port = client.getsockname()[1]
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == server.port and int(fields[2].rsplit(":", 1)[1], 16) == port:
                name = f"socket:[{fields[9]}]"
                return name if name in open_sockets(server.process.pid) else None
    return None


def open_sockets(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return found


# --- memctl serve on stdio


class Stdio:
    """`memctl serve` on stdio: one MCP client on a pipe, a JSON-RPC message a line."""

    def __init__(self, root) -> None:
        self.root = root
        self.process = subprocess.Popen([memctl_executable(), "--root", str(root), "serve"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
        self.pending = b""

    def send(self, line: bytes) -> None:
        self.process.stdin.write(line)
        self.process.stdin.flush()

    def answer(self) -> dict:
        """The next line on stdout, as JSON (bounded by BOUND)."""
        deadline = time.monotonic() + BOUND
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "no answer within BOUND"
            chunk = self.process.stdout.read1(65536)
            assert chunk, self.process.stderr.read().decode(errors="replace")
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def call(self, number: int, method: str, params: dict) -> dict:
        self.send(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}).encode() + b"\n")
        found = self.answer()
        assert found["id"] == number, found
        return found

    def close(self) -> tuple[int, bytes]:
        self.process.stdin.close()
        code = self.process.wait(timeout=BOUND)
        rest = self.process.stdout.read()
        err = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return code, rest + err


STDIO_LINES = {  # line -> the JSON-RPC error code it is answered with
    "garbage": (bytes(range(14, 256)) + b"\n", -32700),  # no \r: the SDK reads one as a line end
    "invalid UTF-8": (b'\xff\xfe{"jsonrpc": "2.0"}\n', -32700),
    "a 5 MiB line": (b"x" * (5 << 20) + b"\n", -32700),
    "nesting past the parser": (b"[" * 200_000 + b"\n", -32700),
    "a list": (b"[1, 2]\n", -32600),
    "params a string": (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "x"}\n', -32600),
    "a method that is a number": (b'{"jsonrpc": "2.0", "id": "x", "method": 5}\n', -32600),
}


def test_stdio_answers_each_unreadable_line_and_keeps_serving(run, root):
    """MCP on stdio: a line the SDK cannot read as a message is answered with JSON-RPC's error
    (`"id": null`) instead of dropped without a word, and the session goes on: it initializes,
    a tool called with wrong types gets a one-line tool error, a good one writes its fact."""
    pytest.importorskip("mcp")
    assert run("init", root=root).returncode == 0
    server = Stdio(root)
    try:
        for name, (line, code) in STDIO_LINES.items():
            server.send(line)
            found = server.answer()
            assert found["id"] is None and found["error"]["code"] == code, (name, found)
            one_line(found["error"]["message"])
        initialized = server.call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                    "clientInfo": {"name": "t", "version": "1"}})
        assert initialized["result"]["serverInfo"]["name"] == "memctl"
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        wrong = server.call(2, "tools/call", {"name": "remember", "arguments": {"text": 42}})
        assert wrong["result"]["isError"] is True
        one_line(wrong["result"]["content"][0]["text"])
        assert not (root / "long_term.jsonl").exists() or (root / "long_term.jsonl").read_text().strip() == ""
        done = server.call(3, "tools/call", {"name": "remember", "arguments": {"text": "the backup runs at 02:00"}})
        assert done["result"]["structuredContent"]["action"] == "added"
    finally:
        code, rest = server.close()
    assert code == 0 and b"Traceback" not in rest, rest.decode(errors="replace")
    assert [json.loads(line)["text"] for line in (root / "long_term.jsonl").read_text().splitlines()] == [
        "the backup runs at 02:00"]


def test_stdio_truncated_then_closed_ends_the_server_cleanly(run, root):
    pytest.importorskip("mcp")
    assert run("init", root=root).returncode == 0
    server = Stdio(root)
    server.send(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "remember", "argu')
    code, rest = server.close()
    assert code == 0 and b"Traceback" not in rest, rest.decode(errors="replace")
    assert not (root / "long_term.jsonl").exists() or (root / "long_term.jsonl").read_text().strip() == ""
