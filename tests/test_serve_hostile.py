"""Hostile clients of `memctl serve --http`: each gets a one-line JSON error (or its connection
closed) and the server keeps serving everyone else. Every wait is bounded; nothing is timed."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("mcp")

from serve_helpers import Server, add_key, l5_lines  # noqa: E402

BOUND = 60.0  # seconds any wait on the server may take before the test fails


def configure(root, **serve) -> None:
    lines = "".join(f"{name} = {value}\n" for name, value in serve.items())
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write(f"\n[serve]\n{lines}")


@pytest.fixture
def memory(run, root):
    assert run("init", root=root).returncode == 0
    return root


def still_serving(server: Server, key: str) -> None:
    status, body = server.post("search", {"query": "anything at all"}, key)
    assert status == 200 and "hits" in body


def one_line_error(status_body: tuple[int, dict], status: int) -> str:
    got, body = status_body
    assert got == status, body
    assert "\n" not in body["error"] and "Traceback" not in body["error"]
    return body["error"]


def test_garbage_bodies_get_one_line_errors(run, memory):
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        one_line_error(server.post("remember", None, key, raw=b"\xff\xfe not utf-8"), 400)
        one_line_error(server.post("remember", None, key, raw=b"{not json"), 400)
        assert "object" in one_line_error(server.post("remember", None, key, raw=b"[1, 2]"), 400)
        one_line_error(server.post("search", None, key, raw=b"[" * 200_000), 400)
        one_line_error(server.post("remember", {"text": 42}, key), 400)
        one_line_error(server.post("remember", {"text": "x", "extra": "y"}, key), 400)
        one_line_error(server.post("remember", {"text": "a" * 70_000}, key), 400)
        one_line_error(server.post("remember", {"text": "   "}, key), 400)
        one_line_error(server.post("remember", None, key, raw=b'{"text": "\\ud800 lone surrogate"}'), 400)
        one_line_error(server.post("search", {"query": "x", "k": 10**30}, key), 400)
        one_line_error(server.post("search", {"query": "x", "layers": ["L9"]}, key), 400)
        one_line_error(server.post("get", {"ref": "L3:../../../etc/passwd"}, key), 404)
        one_line_error(server.post("get", {"ref": "../../etc/passwd"}, key), 400)
        one_line_error(server.post("remember", {"text": "t", "namespace": "../up"}, key), 400)
        one_line_error(server.post("remember", {"text": "fact", "type": "no-such-type"}, key), 400)
        still_serving(server, key)
    assert l5_lines(memory) == []
    assert sorted(path.name for path in memory.parent.iterdir()) == ["memory"]  # nothing written outside


def test_a_huge_body_is_refused_before_it_is_read(run, memory):
    configure(memory, max_body_bytes=4096)
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        declared = {"Authorization": f"Bearer {key}", "Content-Length": str(50 << 20)}
        with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as raw:
            head = "".join(f"{name}: {value}\r\n" for name, value in declared.items())
            raw.sendall(f"POST /v1/remember HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
            answer = raw.recv(4096)  # answered without the 50 MB being sent
        assert b" 413 " in answer.split(b"\r\n")[0]
        streamed = server.request("POST", "/v1/remember", iter([b'{"text": "' + b"a" * 1024] * 8 + [b'"}']),
                                  {"Authorization": f"Bearer {key}"})  # no length: http.client sends it chunked
        one_line_error(streamed, 413)
        status, _ = server.request("POST", "/mcp", b"x" * 8192,
                                   {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        assert status == 413
        still_serving(server, key)
    assert l5_lines(memory) == []


def test_a_slowloris_is_cut_off_and_others_are_served_meanwhile(run, memory):
    configure(memory, request_timeout=2)
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)
        head = f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n".encode()
        closed = False
        deadline = time.monotonic() + BOUND
        try:
            for byte in head:  # one byte at a time, another client served between them
                slow.sendall(bytes([byte]))
                assert server.post("remember", {"text": f"served while the slow one dribbles {byte}"}, key)[0] \
                    in (200, 429)
            slow.settimeout(1.0)
            while time.monotonic() < deadline and not closed:
                try:
                    slow.sendall(b"X")
                    closed = slow.recv(1024) == b""
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
        finally:
            slow.close()
        assert closed, "the server kept a connection that never finished its request head"
        still_serving(server, key)


def test_a_body_that_stalls_is_answered_408(run, memory):
    configure(memory, request_timeout=2)
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as stalled:
            stalled.sendall(f"POST /v1/remember HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"te".encode())
            still_serving(server, key)
            answer = b""  # each recv bounded by BOUND: the server answers once request_timeout passed
            while b"request_timeout" not in answer:
                chunk = stalled.recv(4096)
                if not chunk:
                    break
                answer += chunk
        assert b" 408 " in answer.split(b"\r\n")[0] and b"request_timeout" in answer
        still_serving(server, key)
    assert l5_lines(memory) == []


def test_many_idle_connections_do_not_block_a_real_client(run, memory):
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        idle = []
        try:
            for number in range(64):
                connection = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)
                if number % 2:
                    connection.sendall(b"POST /v1/remember HTTP/1.1\r\nHost: x\r\n")
                idle.append(connection)
            status, body = server.post("remember", {"text": "a real client among idle sockets"}, key)
            assert status == 200 and body["action"] == "added"
        finally:
            for connection in idle:
                connection.close()
        still_serving(server, key)


def test_a_key_past_its_rate_gets_429_and_other_keys_do_not(run, memory):
    configure(memory, rate_per_minute=3)
    greedy = add_key(run, memory, "greedy", "read")
    polite = add_key(run, memory, "polite", "read")
    with Server(memory) as server:
        answers = [server.post("search", {"query": "x"}, greedy)[0] for _ in range(4)]
        assert answers[:3] == [200, 200, 200] and answers[3] == 429
        connection_answer = server.request("POST", "/v1/search", b'{"query": "x"}', {"Authorization": f"Bearer {greedy}"})
        assert connection_answer[0] == 429 and "rate_per_minute" in connection_answer[1]["error"]
        assert server.post("search", {"query": "x"}, polite)[0] == 200
