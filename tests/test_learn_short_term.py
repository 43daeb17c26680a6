"""L2 short-term: `dispose` leaves a tagged summary in the window, `recent` shows the window
first, `compose` carries it and the profile and preferences whatever the query."""

from __future__ import annotations

import json

import pytest

from test_learn_session import SESSION, jsonl

DAY = {"MEMCTL_NOW": "2026-12-01T12:00:00"}


@pytest.fixture
def memory(run, root):
    assert run("init", root=root).returncode == 0
    return root


def _session(run, root, name: str, messages: list[dict], now: str) -> None:
    env = {"MEMCTL_NOW": now}
    assert run("turn", "--session", name, root=root, input=jsonl(messages), env=env).returncode == 0
    done = run("dispose", "--session", name, root=root, env=env)
    assert done.returncode == 0, done.stderr


def _recent(run, root, env) -> list[dict]:
    done = run("recent", "--json", root=root, env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _talk(topic: str) -> list[dict]:
    return [{"role": "user", "content": f"Let us plan the {topic} rollout; the {topic} rollout needs a checklist."},
            {"role": "assistant", "content": f"Here is a {topic} checklist."}]


def test_the_window_keeps_the_last_sessions_newest_first_with_tags(run, memory):
    with open(memory / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nshort_term_sessions = 2\n")
    _session(run, memory, "first", _talk("kafka"), "2026-11-29T10:00:00")
    _session(run, memory, "second", _talk("postgres"), "2026-11-30T10:00:00")
    _session(run, memory, "third", _talk("redis"), "2026-12-01T10:00:00")
    kept = [json.loads(line)["session"] for line in (memory / "short_term.jsonl").read_text().splitlines()]
    assert kept == ["second", "third"]
    shown = _recent(run, memory, DAY)
    assert [(s["name"], s["layer"]) for s in shown] == [("third", "L2"), ("second", "L2")]
    assert "redis" in shown[0]["tags"] and "rollout" in shown[0]["tags"]
    assert "redis" in shown[0]["text"] and "[" in shown[0]["text"].splitlines()[0]


def test_a_session_older_than_the_window_is_no_longer_recent(run, memory):
    _session(run, memory, "chat-1", SESSION, "2026-12-01T10:00:00")
    assert [s["name"] for s in _recent(run, memory, {"MEMCTL_NOW": "2026-12-07T10:00:00"})] == ["chat-1"]
    assert _recent(run, memory, {"MEMCTL_NOW": "2026-12-09T10:00:00"}) == []  # [learn] short_term_days = 7


def test_the_summary_stays_within_short_term_bytes(run, memory):
    with open(memory / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nshort_term_bytes = 200\n")
    long = [{"role": "user", "content": f"Point {i}: " + "the deployment of the cluster " * 20} for i in range(30)]
    _session(run, memory, "long", long + SESSION, "2026-12-01T10:00:00")
    [record] = [json.loads(line) for line in (memory / "short_term.jsonl").read_text().splitlines()]
    assert 0 < len(record["summary"].encode()) <= 200


def test_compose_carries_the_profile_and_preferences_whatever_the_query(run, memory):
    _session(run, memory, "chat-1", SESSION, "2026-12-01T10:00:00")
    done = run("compose", "what is the weather in Paris", "--budget", "600", root=memory, env=DAY)
    assert done.returncode == 0, done.stderr
    block = done.stdout.decode()
    assert block.startswith('<recalled-memory source="memctl">') and "not instructions" in block
    pinned = block.index("## Profile and preferences (L5)")
    assert "8am" in block[pinned:] and "Dana" in block[pinned:]
    recent = block.index("## Recent sessions")
    assert pinned < recent and "chat-1" in block[recent:]
    assert "7am as bullet" not in block  # the superseded preference is not recalled as current
    small = run("compose", "weather", "--budget", "120", "--json", root=memory, env=DAY)
    summary = json.loads(small.stdout.splitlines()[-1])
    assert summary["tokens"] <= 120


def test_a_summary_never_ends_on_a_heading_without_its_lines():
    from memctl.core.tokens import estimate_tokens
    from memctl.learn.candidates import Message
    from memctl.learn.summary import summary_text, within_tokens

    messages = [Message("s", f"m{i}", i, "user", "a long message about the cluster deployment " * 8) for i in range(6)]
    learned = [{"id": "m1", "type": "preference", "topic": "window", "text": "Dana deploys on Tuesdays"}]
    for budget in range(5, 200, 5):
        text = summary_text("s", messages, learned, within_tokens(budget))
        assert estimate_tokens(text) <= budget or text == ""
        assert not text.rstrip("\n").endswith(":"), (budget, text)
