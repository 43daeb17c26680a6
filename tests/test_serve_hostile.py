"""What only `memctl serve --http` meets: a key past its rate, a failure no check foresaw, a write
held up past the timeout, a damaged index; each gets a one-line JSON error and the server keeps
serving everyone else. The hostile messages and connection hogs every long-lived process meets
are tests/test_hostile_services.py's. Every wait is bounded; nothing is timed."""

from __future__ import annotations

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


def test_a_failure_no_check_foresaw_is_one_line_not_a_traceback(run, memory):
    key = add_key(run, memory, "k", "write")
    (memory / "long_term.jsonl").unlink(missing_ok=True)
    (memory / "long_term.jsonl").mkdir()  # L5 a folder: the write fails with IsADirectoryError
    with Server(memory) as server:
        status, body = server.post("remember", {"text": "where can this go"}, key)
        assert status == 500 and "\n" not in body["error"] and "remember failed" in body["error"]
        (memory / "long_term.jsonl").rmdir()
        assert server.post("remember", {"text": "where can this go"}, key)[0] == 200
    assert b"remember by k failed" in server.log and b"Traceback" not in server.log


def test_a_write_held_up_past_the_timeout_is_504_and_reads_go_on(run, memory):
    import fcntl
    import os

    configure(memory, request_timeout=1)
    key = add_key(run, memory, "k", "write")
    with Server(memory) as server:
        fd = os.open(memory / ".memctl" / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as a long CLI command or a dream step would
            one_line_error(server.post("remember", {"text": "written once the lock is free"}, key), 504)
            still_serving(server, key)  # reads need no writer lock
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and not l5_lines(memory):
            time.sleep(0.1)
        assert server.post("remember", {"text": "and the next write goes through"}, key)[0] == 200
    texts = [entry["text"] for entry in l5_lines(memory)]
    assert texts == ["written once the lock is free", "and the next write goes through"]


def test_a_damaged_index_is_rebuilt_and_searches_answer(run, memory):
    key = add_key(run, memory, "k", "write")
    assert run("remember", "--type", "event", "the index will be rebuilt", root=memory).returncode == 0
    assert run("search", "rebuilt", root=memory).returncode == 0
    index = memory / ".memctl" / "index.sqlite"
    assert index.exists()
    index.write_bytes(b"this is not a database" * 100)
    with Server(memory) as server:
        status, found = server.post("search", {"query": "rebuilt"}, key)
        assert status == 200 and found["hits"][0]["text"] == "the index will be rebuilt"
