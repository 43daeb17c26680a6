"""Hostile input to `memctl serve`'s HTTP JSON API: secrets are not echoed back."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")

from serve_helpers import Server, add_key  # noqa: E402

SECRET = "sk-ant-api03-Zx9q2LmPw7Rt4Yu1Io8Kj3Hg6Fd5Sa0QwErTyUiOpAsDfGhJk"


def test_a_secret_in_a_search_query_is_not_echoed(run, root):
    assert run("init", root=root).returncode == 0
    key = add_key(run, root, "k", "read")
    with Server(root) as server:
        status, body = server.post("search", {"query": f"deploy key {SECRET}"}, key)
        assert status == 200, body
        status_compose, composed = server.post("compose", {"query": f"deploy key {SECRET}"}, key)
        assert status_compose == 200, composed
    for answer in (body, composed):
        assert SECRET not in json.dumps(answer)
    assert "deploy key" in body["query"]
    audit = root / ".serve" / "audit.jsonl"
    assert not audit.exists() or SECRET not in audit.read_text(encoding="utf-8")
