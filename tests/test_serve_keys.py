"""Keys, scopes and namespaces of `memctl serve --http`, against the installed server."""

from __future__ import annotations

import json
import os
import stat

import pytest

pytest.importorskip("mcp")

from serve_helpers import Server, add_key, l5_lines  # noqa: E402


@pytest.fixture
def memory(run, root):
    assert run("init", root=root).returncode == 0
    return root


def audit_lines(root) -> list[dict]:
    path = root / ".serve" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_no_key_and_a_wrong_key_are_refused(run, memory):
    add_key(run, memory, "real", "admin")
    with Server(memory) as server:
        for key in (None, "mk_not-a-key", ""):
            status, body = server.post("search", {"query": "anything"}, key)
            assert status == 401 and "key" in body["error"]
        status, _ = server.post("search", {"query": "x"}, headers={"Authorization": "Basic dXNlcjpwYXNz"})
        assert status == 401
        assert server.request("GET", "/health")[0] == 200  # health needs no key
    assert l5_lines(memory) == []


def test_a_read_key_may_read_but_not_write(run, memory):
    reader = add_key(run, memory, "reader", "read")
    writer = add_key(run, memory, "writer", "write")
    with Server(memory) as server:
        status, body = server.post("remember", {"text": "a read key cannot write this"}, reader)
        assert status == 403 and "scope read" in body["error"]
        status, written = server.post("remember", {"text": "the writer wrote this"}, writer)
        assert status == 200
        assert server.post("search", {"query": "writer"}, reader)[0] == 200
        assert server.post("forget", {"ref": written["id"]}, reader)[0] == 403
        assert server.post("restore", {"ref": written["id"]}, reader)[0] == 403
    assert [entry["text"] for entry in l5_lines(memory)] == ["the writer wrote this"]


def test_a_namespace_key_never_sees_another_namespace(run, memory):
    alpha = add_key(run, memory, "alpha-agent", "write", namespace="alpha")
    beta = add_key(run, memory, "beta-agent", "write", namespace="beta")
    admin = add_key(run, memory, "boss", "admin")
    with Server(memory) as server:
        _, mine = server.post("remember", {"text": "the launch code word is heron"}, alpha)
        _, theirs = server.post("remember", {"text": "the launch code word is falcon"}, beta)
        _, shared = server.post("remember", {"text": "the launch code word is sparrow"}, admin)
        assert mine["namespace"] == "alpha" and theirs["namespace"] == "beta"
        status, found = server.post("search", {"query": "launch code word"}, alpha)
        assert status == 200 and [hit["id"] for hit in found["hits"]] == [mine["id"]]
        _, found = server.post("compose", {"query": "launch code word"}, alpha)
        assert "heron" in found["text"] and "falcon" not in found["text"] and "sparrow" not in found["text"]
        assert server.post("get", {"ref": f"L5:{theirs['id']}"}, alpha)[0] == 403
        assert server.post("get", {"ref": shared["id"]}, alpha)[0] == 403
        assert server.post("forget", {"ref": theirs["id"]}, alpha)[0] == 403
        assert server.post("search", {"query": "launch", "namespace": "beta"}, alpha)[0] == 403
        assert server.post("search", {"query": "launch", "layers": ["L4"]}, alpha)[0] == 403
        assert server.post("recent", {}, alpha)[0] == 403
        _, everything = server.post("search", {"query": "launch code word"}, admin)
        assert {hit["id"] for hit in everything["hits"]} == {mine["id"], theirs["id"], shared["id"]}
        _, only_beta = server.post("search", {"query": "launch code word", "namespace": "beta"}, admin)
        assert [hit["id"] for hit in only_beta["hits"]] == [theirs["id"]]
    by_id = {entry["id"]: entry for entry in l5_lines(memory)}
    assert by_id[mine["id"]]["namespace"] == "alpha" and "namespace" not in by_id[shared["id"]]


def test_a_revoked_key_is_refused_at_once(run, memory):
    key = add_key(run, memory, "temp", "write")
    with Server(memory) as server:
        assert server.post("remember", {"text": "written before the revocation"}, key)[0] == 200
        done = run("keys", "revoke", "temp", root=memory)
        assert done.returncode == 0
        status, body = server.post("remember", {"text": "written after the revocation"}, key)
        assert status == 401 and "revoked" in body["error"]
        assert server.post("search", {"query": "revocation"}, key)[0] == 401
    assert [entry["text"] for entry in l5_lines(memory)] == ["written before the revocation"]
    listed = [json.loads(line) for line in run("keys", "list", "--json", root=memory).stdout.splitlines()]
    assert listed[0]["name"] == "temp" and listed[0]["revoked"]


def test_the_key_file_holds_no_key_and_every_write_names_its_key(run, memory):
    first = add_key(run, memory, "first", "write")
    second = add_key(run, memory, "second", "write")
    assert first != second and first.startswith("mk_")
    path = memory / ".serve" / "keys.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with Server(memory) as server:
        _, one = server.post("remember", {"text": "first agent's fact"}, first)
        _, two = server.post("remember", {"text": "second agent's fact"}, second)
        server.post("forget", {"ref": two["id"]}, first)
    for secret in (first, second):
        for stored in memory.rglob("*"):
            if stored.is_file():
                assert secret.encode() not in stored.read_bytes(), stored
    audit = audit_lines(memory)
    assert [(line["key"], line["op"], line["ids"]) for line in audit] == [
        ("first", "remember", [one["id"]]), ("second", "remember", [two["id"]]), ("first", "forget", [two["id"]])]
    assert {entry["id"]: entry["key"] for entry in l5_lines(memory)} == {one["id"]: "first"}
    listed = run("keys", "list", root=memory).stdout.decode()
    assert "first\twrite" in listed and first not in listed


def test_keys_add_refuses_a_bad_name_scope_or_duplicate(run, memory):
    assert run("keys", "add", "../evil", "--scope", "read", root=memory).returncode == 2
    assert run("keys", "add", "ok", "--scope", "root", root=memory).returncode == 2
    add_key(run, memory, "ok", "read")
    again = run("keys", "add", "ok", "--scope", "read", root=memory)
    assert again.returncode == 2 and b"Traceback" not in again.stderr and again.stdout == b""
    assert run("keys", "revoke", "nobody", root=memory).returncode == 2
    huge = run("keys", "add", "x" * 100_000, "--scope", "read", root=memory)  # not echoed back whole
    assert huge.returncode == 2 and huge.stderr.count(b"\n") == 1 and len(huge.stderr) < 300


def test_namespaces_keep_their_own_near_duplicates_and_topics(run, memory):
    alpha = add_key(run, memory, "a", "write", namespace="alpha")
    beta = add_key(run, memory, "b", "write", namespace="beta")
    with Server(memory) as server:
        _, first = server.post("remember", {"text": "the weekly sync is on Tuesday"}, alpha)
        _, second = server.post("remember", {"text": "the weekly sync is on Tuesday"}, beta)
        _, again = server.post("remember", {"text": "the weekly sync is on Tuesday"}, alpha)
        assert (first["action"], second["action"], again["action"]) == ("added", "added", "seen")
        assert second["id"] != first["id"] and again["id"] == first["id"]
        _, pref_a = server.post("remember", {"text": "uses vim", "type": "preference", "topic": "editor"}, alpha)
        _, pref_b = server.post("remember", {"text": "uses emacs", "type": "preference", "topic": "editor"}, beta)
        assert pref_a["action"] == pref_b["action"] == "added"
        assert server.post("forget", {"ref": first["id"]}, alpha)[0] == 200
        status, body = server.post("remember", {"text": "the weekly sync is on Tuesday"}, beta)
        assert status == 200 and body["action"] == "seen" and body["id"] == second["id"]
    topics = {entry["id"]: entry.get("topic") for entry in l5_lines(memory)}
    assert topics[pref_a["id"]] == "alpha/editor" and topics[pref_b["id"]] == "beta/editor"


def test_the_admin_scope_alone_reads_the_audit_lists_keys_and_changes_any_namespace(run, memory):
    admin = add_key(run, memory, "boss", "admin")
    writer = add_key(run, memory, "writer", "write")
    reader = add_key(run, memory, "reader", "read")
    alpha = add_key(run, memory, "alpha-agent", "write", namespace="alpha")
    with Server(memory) as server:
        _, theirs = server.post("remember", {"text": "alpha's deploy window is Friday"}, alpha)
        _, plain = server.post("remember", {"text": "the office closes at six"}, writer)
        for key in (writer, reader, alpha):  # audit and keys: an admin key's only
            for operation in ("audit", "keys"):
                status, body = server.post(operation, {}, key)
                assert status == 403 and "needs admin" in body["error"], (operation, body)
        # a write key changes the entries of its own namespace only: an unbound one, of none
        status, body = server.post("forget", {"ref": f"L5:{theirs['id']}"}, writer)
        assert status == 403 and "namespace 'alpha'" in body["error"]
        status, body = server.post("forget", {"ref": f"L5:{plain['id']}"}, alpha)
        assert status == 403
        assert server.post("forget", {"ref": f"L5:{plain['id']}"}, writer)[0] == 200
        assert server.post("forget", {"ref": f"L5:{theirs['id']}"}, alpha)[0] == 200
        status, body = server.post("restore", {"ref": f"L6:{theirs['id']}"}, writer)
        assert status == 403
        assert server.post("restore", {"ref": f"L6:{theirs['id']}"}, admin)[0] == 200  # an admin: any entry
        assert server.post("forget", {"ref": f"L5:{theirs['id']}"}, admin)[0] == 200
        status, listed = server.post("keys", {}, admin)
        assert status == 200 and {key["name"] for key in listed["keys"]} == {"boss", "writer", "reader", "alpha-agent"}
        assert all("sha256" not in key and not any(token in json.dumps(key) for token in (admin, writer))
                   for key in listed["keys"])
        status, audited = server.post("audit", {"n": 3}, admin)
        assert status == 200 and [(r["key"], r["op"]) for r in audited["records"]] == \
            [("alpha-agent", "forget"), ("boss", "restore"), ("boss", "forget")]
        status, alphas = server.post("audit", {"key": "alpha-agent"}, admin)
        assert [r["op"] for r in alphas["records"]] == ["remember", "forget"]
        assert all("text" not in r for r in alphas["records"])
