"""The serve package's pure parts: the rate bucket, the argument checks, the namespace rules,
the key ring's re-read, the namespace map's catch-up (no server process)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp")

from memctl.core.config import load_settings  # noqa: E402
from memctl.core.errors import UsageError  # noqa: E402
from memctl.serve.keys import KeyFileUnreadable, KeyRefused, KeyRing, ScopeRefused, add_key, revoke_key  # noqa: E402
from memctl.serve.limits import RateLimited, RateLimiter  # noqa: E402
from memctl.serve.namespaces import EntryNamespaces  # noqa: E402
from memctl.serve.operations import Caller  # noqa: E402
from memctl.serve.schemas import check_arguments  # noqa: E402


def test_the_rate_bucket_refills_with_time():
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])  # one a second
    for _ in range(60):
        limiter.take("a")
    with pytest.raises(RateLimited) as refused:
        limiter.take("a")
    assert refused.value.retry_after == pytest.approx(1.0)
    limiter.take("b")  # another key has its own bucket
    now[0] += 2.0
    limiter.take("a")
    limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")


@pytest.mark.parametrize("name, arguments, message", [
    ("remember", [], "must be a JSON object"),
    ("remember", {}, "'text' is required"),
    ("remember", {"text": True}, "must be a string"),
    ("search", {"query": "x", "k": 1.5}, "must be an integer"),
    ("search", {"query": "x", "k": 0}, "between 1 and 100"),
    ("search", {"query": "x", "layers": "L5"}, "must be an array"),
    ("search", {"query": "x", "layers": ["L5"] * 6}, "at most 5"),
    ("get", {"ref": "x", "more": 1}, "unknown argument 'more'"),
    ("turn", {"session": "s", "messages": [1]}, "must be an object"),
])
def test_arguments_are_checked_with_one_line(name, arguments, message):
    with pytest.raises(UsageError) as refused:
        check_arguments(name, arguments)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_namespace_key_stays_in_its_namespace():
    bound, free = Caller("a", "write", "alpha"), Caller("b", "admin")
    assert bound.namespace_for(None) == "alpha" and bound.namespace_for("alpha") == "alpha"
    with pytest.raises(ScopeRefused):
        bound.namespace_for("beta")
    assert free.namespace_for("beta") == "beta" and free.namespace_for(None) == ""
    with pytest.raises(UsageError):
        free.namespace_for("../x")
    with pytest.raises(ScopeRefused):
        Caller("r", "read").require("write")


def test_the_key_ring_reads_the_file_again_when_it_changes(tmp_path):
    ring = KeyRing(tmp_path)
    with pytest.raises(KeyRefused):
        ring.authenticate("Bearer mk_x")
    token = add_key(tmp_path, "agent", "read")
    assert ring.authenticate(f"Bearer {token}").name == "agent"
    assert ring.authenticate(f"bearer   {token}  ").scope == "read"
    revoke_key(tmp_path, "agent")
    with pytest.raises(KeyRefused):
        ring.authenticate(f"Bearer {token}")
    (tmp_path / ".serve" / "keys.json").write_text("{broken")
    with pytest.raises(KeyFileUnreadable) as broken:
        ring.authenticate(f"Bearer {token}")
    assert "not a memctl key file" in str(broken.value) and broken.value.http_status == 503


def test_the_namespace_map_catches_up_with_appends_and_rewrites(tmp_path, run):
    root = tmp_path / "memory"
    run("init", root=root)
    namespaces = EntryNamespaces(load_settings(root).layout)
    l5 = root / "long_term.jsonl"
    l5.write_text(json.dumps({"id": "a", "text": "x", "namespace": "alpha"}) + "\n")
    assert namespaces.namespace_of("a") == "alpha"
    with open(l5, "a") as handle:
        handle.write(json.dumps({"id": "b", "text": "y", "namespace": "beta"}) + "\n" + '{"id": "c", "namesp')
    assert namespaces.namespace_of("b") == "beta" and namespaces.namespace_of("c") == ""
    replaced = tmp_path / "new.jsonl"
    replaced.write_text(json.dumps({"id": "a", "text": "x", "namespace": "gamma"}) + "\n")
    replaced.replace(l5)
    assert namespaces.namespace_of("a") == "gamma" and namespaces.namespace_of("b") == ""


def test_the_writer_thread_survives_a_failure_no_check_foresaw(tmp_path, run):
    from memctl.longterm.remember import RememberRequest
    from memctl.serve.batcher import Job, WriteBatcher

    root = tmp_path / "memory"
    run("init", root=root)

    class Audit:
        def append(self, records):
            pass

    batcher = WriteBatcher(load_settings(root), Audit())
    batcher.start()
    try:
        def broken():
            raise KeyError("a bug")

        with pytest.raises(KeyError):
            batcher.submit(Job(None, {}, broken), timeout=30)
        result = batcher.submit(Job(RememberRequest("still written", "event"), {}), timeout=30)
        assert result.action == "added"
    finally:
        batcher.stop()
