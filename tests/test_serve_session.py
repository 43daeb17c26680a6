"""A session's lifecycle through `memctl serve`: turn, compact and dispose over the JSON API and
MCP, what they learn found by search, audited by key; a namespace key is refused."""

from __future__ import annotations

import json

import anyio
import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from conftest import clean_env, memctl_executable  # noqa: E402
from serve_helpers import Server, add_key, l5_lines  # noqa: E402

MESSAGES = [
    {"id": "u1", "role": "user", "content": "Hi, my name is Dana.", "time": "2026-12-01T09:00:00", "speaker": "Dana"},
    {"id": "a1", "role": "assistant", "content": "Nice to meet you, Dana.", "time": "2026-12-01T09:00:05"},
    {"id": "u2", "role": "user", "content": "I prefer my morning briefing as bullet points at 7am.",
     "time": "2026-12-01T09:01:00", "speaker": "Dana"},
]


def test_turn_compact_dispose_over_the_json_api(run, root):
    run("init", root=root)
    key = add_key(run, root, "agent", "write")
    reader = add_key(run, root, "reader", "read")
    bound = add_key(run, root, "bound", "write", namespace="team")
    with Server(root) as server:
        assert server.post("turn", {"session": "s1", "messages": MESSAGES}, reader)[0] == 403
        assert server.post("turn", {"session": "s1", "messages": MESSAGES}, bound)[0] == 403
        status, first = server.post("turn", {"session": "s1", "messages": MESSAGES}, key)
        assert status == 200 and first["buffered"] == 3
        status, again = server.post("turn", {"session": "s1", "messages": MESSAGES}, key)
        assert status == 200 and again["buffered"] == 0  # a retried message is kept once
        status, compacted = server.post("compact", {"session": "s1", "budget": 200}, key)
        assert status == 200 and compacted["tokens"] <= 200 and compacted["session_learned"]
        status, disposed = server.post("dispose", {"session": "s1"}, key)
        assert status == 200 and disposed["closed"]
        status, found = server.post("search", {"query": "morning briefing bullet points"}, key)
        assert status == 200 and any("briefing" in hit["text"] for hit in found["hits"])
        status, refused = server.post("turn", {"session": "s1", "messages": [
            {"id": "u9", "role": "user", "content": "one more thing"}]}, key)
        assert status == 400 and "disposed" in refused["error"]
        assert server.post("turn", {"session": "s2", "messages": "not a list"}, key)[0] == 400
        assert server.post("turn", {"session": "s2", "messages": [{"role": "system", "content": 5}]}, key)[0] == 400
    learned = [entry for entry in l5_lines(root) if "briefing" in entry["text"]]
    assert learned and learned[0]["sources"][0]["session"] == "s1"
    audit = [json.loads(line) for line in (root / ".serve" / "audit.jsonl").read_text().splitlines()]
    assert [line["op"] for line in audit] == ["turn", "turn", "compact", "dispose"]
    assert {line["key"] for line in audit} == {"agent"}
    assert learned[0]["id"] in {entry_id for line in audit for entry_id in line["ids"]}


def test_the_session_tools_over_stdio_mcp(run, root):
    run("init", root=root)
    params = StdioServerParameters(command=memctl_executable(), args=["--root", str(root), "serve"], env=clean_env())

    errlog = open(root.parent / "serve-stderr.txt", "w+")

    async def main():
        with anyio.fail_after(120):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                turned = await session.call_tool("turn", {"session": "mcp-1", "messages": MESSAGES})
                disposed = await session.call_tool("dispose", {"session": "mcp-1"})
                uris = [str(resource.uri) for resource in (await session.list_resources()).resources]
                record = await session.read_resource("memctl://session/mcp-1")
                try:
                    await session.read_resource("memctl://session/nobody")
                    unknown = "read"
                except Exception as exc:  # the SDK's error for a failed request
                    unknown = f"{getattr(getattr(exc, 'error', None), 'code', None)} {exc}"
                return names, turned.structured_content, disposed.structured_content, uris, record, unknown

    names, turned, disposed, uris, record, unknown = anyio.run(main)
    assert uris == ["memctl://L1", "memctl://session/mcp-1"]
    kept = json.loads(record.contents[0].text)
    assert kept["session"] == "mcp-1" and "briefing" in kept["summary"]
    assert "no resource" in unknown and unknown.startswith("-32002 ")  # MCP's resource-not-found code
    errlog.seek(0)
    assert "Traceback" not in errlog.read()  # an unknown resource is an answer, not a logged crash
    assert {"turn", "compact", "dispose"} <= names
    assert turned["buffered"] == 3 and disposed["closed"]
    assert any("briefing" in entry["text"] for entry in l5_lines(root))


def test_recent_and_get_of_an_archived_session(run, tmp_path):
    import random
    from datetime import datetime

    from l4_helpers import make_folder
    from memctl.l4 import loggen

    folder = make_folder(tmp_path)
    text = loggen.format_b(datetime(2026, 3, 28, 9, 0), 2, random.Random(3), output_size=200,
                           request="Task: check the backup setup")
    folder.add_log("model_responses_1.txt", text)
    assert run("init", root=folder.root).returncode == 0
    assert run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root).returncode == 0
    key = add_key(run, folder.root, "reader", "read")
    bound = add_key(run, folder.root, "bound", "read", namespace="team")
    with Server(folder.root) as server:
        status, recent = server.post("recent", {"n": 3}, key)
        assert status == 200 and len(recent["sessions"]) == 1
        session = recent["sessions"][0]["name"]
        status, item = server.post("get", {"ref": f"L4:{session}"}, key)
        assert status == 200 and item["layer"] == "L4-session" and "backup setup" in item["text"]
        assert server.post("get", {"ref": f"L4:{session}"}, bound)[0] == 403
        status, found = server.post("search", {"query": "backup setup", "layers": ["L4"]}, key)
        assert status == 200 and found["hits"]
