"""`memctl serve` over both entry stores: the files, and a team memory on PostgreSQL (the
service holding the server's connection, agents reaching the database only through it)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from serve_helpers import Server, add_key  # noqa: E402


def test_the_json_api_and_namespaces_on_either_store(run, root, backend):
    run("init", root=root)
    backend.use(root)
    writer = add_key(run, root, "writer", "write")
    alpha = add_key(run, root, "alpha", "write", namespace="alpha")
    with Server(root, env=backend.env) as server:
        status, shared = server.post("remember", {"text": "the release train leaves on Thursdays"}, writer)
        assert status == 200, shared
        status, mine = server.post("remember", {"text": "the release train of alpha leaves on Fridays"}, alpha)
        assert status == 200 and mine["namespace"] == "alpha"
        status, zh = server.post("remember", {"text": "发布列车每周四出发"}, writer)
        assert status == 200
        _, found = server.post("search", {"query": "release train"}, writer)
        assert {hit["id"] for hit in found["hits"]} >= {shared["id"], mine["id"]}
        _, found = server.post("search", {"query": "release train"}, alpha)
        assert [hit["id"] for hit in found["hits"]] == [mine["id"]]
        _, found = server.post("search", {"query": "发布列车"}, writer)
        assert found["hits"][0]["id"] == zh["id"]
        assert server.post("get", {"ref": f"L5:{shared['id']}"}, alpha)[0] == 403
        assert server.post("forget", {"ref": f"L5:{shared['id']}"}, writer)[0] == 200
        _, found = server.post("search", {"query": "release train Thursdays"}, writer)
        assert shared["id"] not in {hit["id"] for hit in found["hits"]}
        assert server.post("restore", {"ref": f"L6:{shared['id']}"}, writer)[0] == 200
        status, item = server.post("get", {"ref": f"L5:{mine['id']}"}, alpha)
        assert status == 200 and item["entry"]["key"] == "alpha" and item["entry"]["namespace"] == "alpha"
