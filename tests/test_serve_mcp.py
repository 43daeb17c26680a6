"""`memctl serve` driven by the official MCP client (the `mcp` SDK, 2.x) over stdio and over
streamable HTTP, and the same operations through the HTTP JSON API: the installed command as a
real subprocess, every wait bounded."""

from __future__ import annotations

import json

import anyio
import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from conftest import clean_env, memctl_executable  # noqa: E402
from serve_helpers import Server, add_key, l5_lines  # noqa: E402

TOOLS = {"remember", "search", "get", "compose", "recent", "forget", "restore", "turn", "compact", "dispose", "audit",
         "keys"}
CLIENT_TIMEOUT = 120


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def exercise(session: ClientSession) -> dict:
    """The whole round through MCP tools: what the test then checks."""
    seen: dict = {}
    listed = await session.list_tools()
    seen["tools"] = {tool.name: tool for tool in listed.tools}
    english = structured(await session.call_tool("remember", {"text": "The staging database moved to port 6543"}))
    chinese = structured(await session.call_tool(
        "remember", {"text": "用户更喜欢用深色主题写代码", "type": "preference", "topic": "主题"}))
    seen["remembered"] = (english, chinese)
    seen["search_en"] = structured(await session.call_tool("search", {"query": "staging database port"}))
    seen["search_zh"] = structured(await session.call_tool("search", {"query": "深色主题"}))
    seen["compose"] = structured(await session.call_tool("compose", {"query": "staging database", "budget": 120}))
    seen["get"] = structured(await session.call_tool("get", {"ref": f"L5:{english['id']}"}))
    seen["forget"] = structured(await session.call_tool("forget", {"ref": f"L5:{english['id']}"}))
    seen["after_forget"] = structured(await session.call_tool("search", {"query": "staging database port"}))
    seen["restore"] = structured(await session.call_tool("restore", {"ref": f"L6:{english['id']}"}))
    seen["after_restore"] = structured(await session.call_tool("search", {"query": "staging database port"}))
    bad = await session.call_tool("search", {"query": 5})
    seen["bad"] = (bad.is_error, bad.content[0].text)
    resources = await session.list_resources()
    seen["resources"] = [str(resource.uri) for resource in resources.resources]
    return seen


def check_round(seen: dict, root) -> None:
    tools = seen["tools"]
    assert set(tools) == TOOLS
    assert tools["remember"].input_schema["required"] == ["text"]
    assert set(tools["remember"].input_schema["properties"]) >= {"text", "type", "topic"}
    assert tools["search"].input_schema["properties"]["k"]["type"] == "integer"
    assert tools["search"].annotations.read_only_hint is True
    assert tools["forget"].annotations.read_only_hint is False
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["remember"].annotations.destructive_hint is False
    english, chinese = seen["remembered"]
    assert english["action"] == "added" and chinese["action"] == "added"
    assert [hit["id"] for hit in seen["search_en"]["hits"]][:1] == [english["id"]]
    assert [hit["id"] for hit in seen["search_zh"]["hits"]][:1] == [chinese["id"]]
    compose = seen["compose"]
    assert compose["tokens"] <= 120 and "6543" in compose["text"]
    assert seen["get"]["entry"]["text"] == "The staging database moved to port 6543"
    assert seen["forget"]["forgotten"] == [english["id"]]
    assert english["id"] not in [hit["id"] for hit in seen["after_forget"]["hits"]]
    assert seen["restore"]["restored"] == english["id"]
    assert english["id"] in [hit["id"] for hit in seen["after_restore"]["hits"]]
    assert seen["bad"][0] is True and "'query' must be a string" in seen["bad"][1]
    assert seen["resources"] == ["memctl://L1"]
    assert {entry["id"] for entry in l5_lines(root)} == {english["id"], chinese["id"]}


def test_stdio_mcp_client_runs_every_tool(run, root):
    run("init", root=root)
    params = StdioServerParameters(command=memctl_executable(), args=["--root", str(root), "serve"],
                                   env=clean_env())

    async def main() -> dict:
        with anyio.fail_after(CLIENT_TIMEOUT):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await exercise(session)

    seen = anyio.run(main)
    check_round(seen, root)
    audit = [json.loads(line) for line in (root / ".serve" / "audit.jsonl").read_text().splitlines()]
    assert {line["key"] for line in audit} == {"local"}  # stdio runs as the local user


def test_streamable_http_mcp_client_runs_every_tool_with_a_key(run, root):
    run("init", root=root)
    key = add_key(run, root, "agent-http", "write")
    with Server(root) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"

        async def main(headers) -> dict:
            with anyio.fail_after(CLIENT_TIMEOUT):
                async with create_mcp_http_client(headers=headers) as http, \
                        streamable_http_client(url, http_client=http) as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    return await exercise(session)

        seen = anyio.run(main, {"Authorization": f"Bearer {key}"})
        status, _ = server.request("POST", "/mcp", b"{}", {"Content-Type": "application/json"})
        assert status == 401  # MCP over HTTP without a key
    check_round(seen, root)
    assert all(entry["key"] == "agent-http" and entry["source"] == "serve:agent-http" for entry in l5_lines(root))


def test_json_api_runs_the_same_operations(run, root):
    run("init", root=root)
    key = add_key(run, root, "curl", "write")
    with Server(root) as server:
        assert server.request("GET", "/health")[0] == 200
        status, openapi = server.request("GET", "/openapi.json")
        assert status == 200 and set(openapi["paths"]) >= {f"/v1/{name}" for name in TOOLS}
        status, english = server.post("remember", {"text": "Backups run at 02:00 UTC"}, key)
        assert status == 200 and english["action"] == "added"
        status, chinese = server.post("remember", {"text": "周五下午团队开周会"}, key)
        assert status == 200
        status, found = server.post("search", {"query": "backups"}, key)
        assert status == 200 and found["hits"][0]["id"] == english["id"]
        status, found = server.post("search", {"query": "周会"}, key)
        assert found["hits"][0]["id"] == chinese["id"]
        status, block = server.post("compose", {"query": "backups", "budget": 150}, key)
        assert status == 200 and block["tokens"] <= 150 and "02:00" in block["text"]
        status, item = server.post("get", {"ref": english["id"]}, key)
        assert item["entry"]["text"] == "Backups run at 02:00 UTC"
        assert server.post("forget", {"ref": f"L5:{english['id']}"}, key)[0] == 200
        status, found = server.post("search", {"query": "backups"}, key)
        assert english["id"] not in [hit["id"] for hit in found["hits"]]
        assert server.post("restore", {"ref": english["id"]}, key)[0] == 200
        assert server.post("recent", {}, key) == (200, {"sessions": []})
        assert server.post("nonsense", {}, key)[0] == 404
        assert server.post("search", {"query": "x", "k": "5"}, key)[0] == 400


def test_mcp_over_http_checks_each_call_against_its_key(run, root):
    run("init", root=root)
    reader = add_key(run, root, "mcp-reader", "read")
    with Server(root) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"

        async def main() -> tuple:
            with anyio.fail_after(CLIENT_TIMEOUT):
                async with create_mcp_http_client(headers={"Authorization": f"Bearer {reader}"}) as http, \
                        streamable_http_client(url, http_client=http) as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    searched = await session.call_tool("search", {"query": "anything"})
                    written = await session.call_tool("remember", {"text": "a reader may not write"})
                    assert run("keys", "revoke", "mcp-reader", root=root).returncode == 0
                    try:
                        await session.call_tool("search", {"query": "anything"})
                        after = "answered"
                    except Exception as exc:  # the transport's error for the 401
                        after = type(exc).__name__
                    return searched.is_error, written.is_error, written.content[0].text, after

        searched_error, written_error, written_text, after = anyio.run(main)
    assert searched_error is False
    assert written_error is True and written_text.startswith("403:")
    assert after != "answered"
    assert l5_lines(root) == []


def test_serve_refuses_a_public_address_without_a_reason(run, root):
    run("init", root=root)
    for args in (["--http", "0.0.0.0:0"], ["--http", "[::]:8765"], ["--http", "nope"], ["--http", "1:99999"]):
        done = run("serve", *args, root=root, timeout=60)
        assert done.returncode == 2 and done.stdout == b"", args
        assert len(done.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in done.stderr
    assert b"--listen" in run("serve", "--http", "0.0.0.0:0", root=root, timeout=60).stderr


def test_a_port_in_use_is_one_line(run, root):
    run("init", root=root)
    with Server(root) as server:
        done = run("serve", "--http", str(server.port), root=root, timeout=60)
    assert done.returncode == 2 and b"cannot listen on 127.0.0.1" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_sigterm_ends_the_server_while_an_mcp_stream_is_open(run, root):
    import http.client
    import subprocess

    run("init", root=root)
    key = add_key(run, root, "streamer", "read")
    server = Server(root)
    try:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "0"}}}
        first = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        first.request("POST", "/mcp", json.dumps(hello), headers)
        answer = first.getresponse()
        session = answer.getheader("mcp-session-id")
        answer.read()
        assert answer.status == 200 and session
        stream = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        stream.request("GET", "/mcp", headers={**headers, "Accept": "text/event-stream", "mcp-session-id": session,
                                               "mcp-protocol-version": "2025-06-18"})
        opened = stream.getresponse()
        assert opened.status == 200  # the server's stream to the client, left open
        server.process.terminate()
        try:
            code = server.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
        assert code is not None, "the server did not stop while a stream was open"
    finally:
        server.stop()


def test_serve_without_its_extra_says_how_to_get_it(run, root, tmp_path):
    run("init", root=root)
    blocker = tmp_path / "no_mcp"
    (blocker / "mcp").mkdir(parents=True)
    (blocker / "mcp" / "__init__.py").write_text("raise ImportError('hidden by the test', name='mcp')\n")
    done = run("serve", root=root, env={"PYTHONPATH": str(blocker)}, timeout=60)
    assert done.returncode == 2 and b"pip install 'mcp>=2.3" in done.stderr
    assert b"Traceback" not in done.stderr and done.stdout == b""
