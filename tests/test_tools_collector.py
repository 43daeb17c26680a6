"""The tool-usage collector (issue 29, design.md §9a): `memctl tools record` (what GenericAgent's
plugin runs after a tool call) and `memctl tools`, the failure shapes, the `tool` lesson a
repeated failure becomes, hostile events and a killed run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memctl.core.config import init_root
from memctl.learn.tools import error_shape, failure_of, make_event

ENV = {"MEMCTL_NOW": "2026-12-01T10:00:00"}


def _event(i: int, **fields) -> bytes:
    data = {"tool": "web_fetch", "args": {"url": f"https://files.example.org/report-{i}.pdf", "_index": 0},
            "result": {"status": "error", "msg": f"file too large: {20 + i}000000 bytes at /tmp/dl/r{i}.pdf"},
            "session": f"s{i}", "call": f"toolu_{i:04d}", **fields}
    return json.dumps(data).encode()


def _usage(root: Path) -> list[dict]:
    path = root / "tool_usage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _l5(root: Path) -> list[dict]:
    path = root / "long_term.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _table(run, root: Path) -> dict[str, dict]:
    result = run("tools", "--json", root=root)
    assert result.returncode == 0, result.stderr
    return {row["tool"]: row for row in map(json.loads, result.stdout.decode().splitlines())}


def test_shapes_fold_what_varies_between_calls():
    first = error_shape("HTTPError 413: file too large: 21000000 bytes at /tmp/dl/a1.pdf")
    second = error_shape("HTTPError 413: file too large: 23500000 bytes at /var/cache/b.pdf")
    assert first == second == "HTTPError <n>: file too large: <n> bytes at <path>"
    assert error_shape("open 'C:\\Users\\ana\\x.txt' failed for req 9f3ac21b7e") == "open '<s>' failed for req <id>"
    assert error_shape("GET https://a.example/x?id=5 timed out") == "GET <url> timed out"
    traceback = "Traceback (most recent call last):\n  File \"/x.py\", line 3\nKeyError: 'name'"
    assert error_shape(traceback) == "KeyError: '<s>'"


def test_a_result_is_a_failure_when_genericagents_tools_say_so():
    assert failure_of({"status": "success", "stdout": "ok", "exit_code": 0}) is None
    assert failure_of({"status": "error", "msg": "no such element"}) == "no such element"
    assert failure_of({"status": "success", "exit_code": 2, "stderr": "grep: x: No such file"}) == "grep: x: No such file"
    assert failure_of('{"status": "failed", "error": "timeout"}') == "timeout"
    assert failure_of("Error: permission denied") == "Error: permission denied"
    assert failure_of("line 1: error rates were fine") is None
    assert failure_of(None) is None and failure_of(["error"]) is None


def test_a_secret_in_failed_arguments_is_redacted_and_the_arguments_cut_short():
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    event = make_event("http", {"headers": {"Authorization": f"token {token}"}, "body": "x" * 5000},
                       f"401 for token {token}", lambda text: text.replace(token, "[REDACTED]"))
    assert token not in event.args and token not in event.error and len(event.args) <= 240


def test_repeated_failures_become_one_tool_lesson_with_provenance(run, root):
    init_root(root)
    for i in range(1, 3):
        assert run("tools", "record", root=root, env=ENV, input=_event(i)).returncode == 0
    assert _l5(root) == []  # twice is not yet a pattern
    third = run("tools", "record", "--json", root=root, env=ENV, input=_event(3))
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["lessons"][0]["action"] == "added"
    assert run("tools", "record", root=root, env=ENV,
               input=b'{"tool": "web_fetch", "ok": true, "call": "toolu_0009"}').returncode == 0

    [lesson] = _l5(root)
    assert lesson["type"] == "tool" and lesson["topic"] == "web_fetch"
    assert lesson["text"].startswith('`web_fetch` fails with "file too large: <n> bytes at <path>" (3 of 3 calls, '
                                     'last 2026-12-01)')
    assert "report-3.pdf" in lesson["text"]  # the last failed arguments
    assert lesson["source"] == "tool_usage: s1, s2, s3"
    row = _table(run, root)["web_fetch"]
    assert (row["calls"], row["failures"]) == (4, 3)
    assert row["shapes"][0]["count"] == 3 and row["shapes"][0]["sessions"] == ["s1", "s2", "s3"]

    for i in range(4, 6):  # 5 failures: below the next stage (6), the lesson stays as it is
        run("tools", "record", root=root, env=ENV, input=_event(i))
    assert [e["id"] for e in _l5(root)] == [lesson["id"]]
    run("tools", "record", root=root, env=ENV, input=_event(6))
    [rewritten] = _l5(root)
    assert "(6 of 7 calls" in rewritten["text"] and rewritten["supersedes"] == [lesson["id"]]


def test_a_repeated_call_id_counts_once_and_the_table_reads_the_file(run, root):
    init_root(root)
    for _ in range(3):
        run("tools", "record", root=root, env=ENV, input=_event(1))
    assert len(_usage(root)) == 1 and _table(run, root)["web_fetch"]["calls"] == 1
    piped = run("tools", root=root)
    assert piped.stdout.decode().split("\t")[:4] == ["web_fetch", "1", "1", "100%"]

    (root / ".memctl" / "tool_usage.json").write_text("{not json")  # derived: a damaged summary is summed anew
    assert _table(run, root)["web_fetch"]["calls"] == 1
    (root / ".memctl" / "tool_usage.json").unlink()
    run("tools", "record", root=root, env=ENV, input=_event(1))
    assert len(_usage(root)) == 1


@pytest.mark.parametrize("payload, message", [
    (b"\xff\xfe{", "not UTF-8"),
    (b"{\"tool\": ", "not JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"tool": 7}', "`tool` must be a name"),
    (b'{"tool": "a\\u0000b"}', "`tool` must be a name"),
    (b'{"tool": "x", "ok": "yes"}', "`ok` must be true or false"),
    (b'{"tool": "x", "session": {"a": 1}}', "`session` must be a string"),
    (b"[" * 100000 + b"]" * 100000, "more than 65536 bytes"),
    (b'{"tool": "x", "args": ' + b"[" * 20000 + b"]" * 20000 + b"}", "not JSON"),
])
def test_a_hostile_event_is_refused_with_one_line_and_nothing_written(run, root, payload, message):
    init_root(root)
    result = run("tools", "record", root=root, input=payload)
    assert result.returncode == 2 and message in result.stderr.decode()
    assert result.stderr.count(b"\n") == 1 and b"Traceback" not in result.stderr
    assert not (root / "tool_usage.jsonl").exists()


def test_a_secret_never_reaches_the_file_or_the_output(run, root):
    init_root(root)
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    event = {"tool": "http", "args": {"auth": f"Bearer {token}"}, "ok": False, "error": f"401 with {token}"}
    for call in range(3):
        assert run("tools", "record", root=root, input=json.dumps({**event, "call": str(call)}).encode()).returncode == 0
    outputs = run("tools", root=root).stdout + run("tools", "--json", root=root).stdout
    assert token.encode() not in outputs and b"REDACTED" in outputs
    for path in root.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def test_a_run_killed_at_any_step_loses_no_acknowledged_event_and_writes_no_lesson_twice(run, root):
    init_root(root)
    for i in (1, 2):
        assert run("tools", "record", root=root, env=ENV, input=_event(i)).returncode == 0
    torn = run("tools", "record", root=root, env={**ENV, "MEMCTL_FAULT_WRITE": "1:torn"}, input=_event(3))
    assert torn.returncode == -9  # killed mid-append: not acknowledged
    killed = run("tools", "record", root=root, env={**ENV, "MEMCTL_FAULT_AT": "tool-summary"}, input=_event(3))
    assert killed.returncode == -9  # killed after the event and the lesson, before the summary
    assert len(_l5(root)) == 1
    again = run("tools", "record", "--json", root=root, env=ENV, input=_event(3))
    assert again.returncode == 0 and json.loads(again.stdout)["duplicates"] == 1
    assert [e["call"] for e in _usage(root)] == ["toolu_0001", "toolu_0002", "toolu_0003"]
    assert len(_l5(root)) == 1 and _table(run, root)["web_fetch"]["failures"] == 3
    assert list((root / ".memctl" / "torn").iterdir())  # the torn half-line was set aside, not glued on


def test_a_symlinked_usage_file_is_refused_and_nothing_outside_the_root_is_read_or_written(run, root, tmp_path):
    init_root(root)
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"tool": "secret-tool", "ok": true}\n')
    (root / "tool_usage.jsonl").symlink_to(outside)
    for args, data in ((("tools", "record"), _event(1)), (("tools",), None)):
        result = run(*args, root=root, input=data)
        assert result.returncode == 2 and b"symlink" in result.stderr and result.stderr.count(b"\n") == 1, result.stderr
        assert b"secret-tool" not in result.stdout
    assert outside.read_text() == '{"tool": "secret-tool", "ok": true}\n'
