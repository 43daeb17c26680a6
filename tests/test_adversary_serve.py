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


def test_a_search_over_http_says_which_word_it_read_as_another(run, root, tmp_path):
    """`search --json` reports a corrected typo; the same search through the service does too,
    so an agent never takes the facts of the word searched for those of the word it typed."""
    assert run("init", root=root).returncode == 0
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "bk02", "text": "bk-02 server backup runs nightly at 02:00"}) + "\n",
                     encoding="utf-8")
    assert run("import", str(items), "--layer", "L5", root=root).returncode == 0
    key = add_key(run, root, "k", "read")
    with Server(root) as server:
        status, typo = server.post("search", {"query": "bakup"}, key)
        status_exact, exact = server.post("search", {"query": "backup"}, key)
    assert status == 200 and status_exact == 200, (typo, exact)
    assert typo["corrected"] == {"bakup": "backup"} and typo["hits"][0]["id"] == "bk02"
    assert "corrected" not in exact and exact["hits"][0]["id"] == "bk02"
