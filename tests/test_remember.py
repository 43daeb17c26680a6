"""remember: write policies (merge supersedes, append near-duplicates raise `seen`), forgotten facts."""

from __future__ import annotations

import json
import time
from pathlib import Path

NOW = {"MEMCTL_NOW": "2026-03-01T09:00:00"}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_merge_type_supersedes_the_active_entry_with_the_same_topic(run, root):
    run("init", root=root)
    first = run("remember", "I use vim", "--type", "preference", "--topic", "editor", root=root, env=NOW)
    assert first.returncode == 0, first.stderr
    old_id = first.stdout.decode().strip()
    second = run("remember", "I switched to helix", "--type", "preference", "--topic", "Editor", "--json",
                 root=root, env=NOW)
    report = json.loads(second.stdout)
    assert report["action"] == "superseded" and report["previous"] == old_id
    l5 = lines(root / "long_term.jsonl")
    assert [e["text"] for e in l5] == ["I switched to helix"]
    assert l5[0]["supersedes"] == [old_id]
    l6 = lines(root / "archive.jsonl")
    assert l6[0]["id"] == old_id and l6[0]["reason"] == "superseded" and l6[0]["left_at"] == "2026-03-01T09:00:00"


def test_other_topics_are_kept(run, root):
    run("init", root=root)
    run("remember", "vim", "--type", "preference", "--topic", "editor", root=root)
    run("remember", "zsh", "--type", "preference", "--topic", "shell", root=root)
    assert len(lines(root / "long_term.jsonl")) == 2


def test_append_type_near_duplicate_raises_seen_instead_of_adding(run, root):
    run("init", root=root)
    a = run("remember", "The deploy script needs sudo on bk-02", "--type", "lesson", root=root, env=NOW)
    b = run("remember", "the deploy script needs sudo on bk-02.", "--type", "lesson", "--json", root=root, env=NOW)
    report = json.loads(b.stdout)
    assert report["action"] == "seen" and report["id"] == a.stdout.decode().strip() and report["seen"] == 2
    c = run("remember", "The backup job runs at 03:00 on bk-02", "--type", "lesson", root=root, env=NOW)
    assert c.returncode == 0
    l5 = lines(root / "long_term.jsonl")
    assert [e["seen"] for e in l5] == [2, 1]


def test_stdin_text_and_unknown_type(run, root):
    run("init", root=root)
    long_text = "部署脚本 needs sudo.\n" * 200
    done = run("remember", "-", "--type", "event", root=root, input=long_text.encode())
    assert done.returncode == 0, done.stderr
    assert lines(root / "long_term.jsonl")[0]["text"] == long_text.strip("\n")
    bad = run("remember", "x", "--type", "recipe", root=root)
    assert bad.returncode == 2
    assert b"unknown entry type 'recipe'" in bad.stderr and b"preference" in bad.stderr


def test_a_type_added_in_the_config_works_without_code(run, root):
    run("init", root=root)
    (root / "memctl.toml").write_text('[types.recipe]\npolicy = "merge"\n')
    run("remember", "pancakes: 2 eggs", "--type", "recipe", "--topic", "pancakes", root=root)
    run("remember", "pancakes: 3 eggs", "--type", "recipe", "--topic", "pancakes", root=root)
    assert [e["text"] for e in lines(root / "long_term.jsonl")] == ["pancakes: 3 eggs"]


def test_merge_type_needs_a_topic(run, root):
    run("init", root=root)
    done = run("remember", "vim", "--type", "preference", root=root)
    assert done.returncode == 2 and b"--topic" in done.stderr


def test_forgotten_fact_is_flagged_unless_forced(run, root):
    run("init", root=root)
    entry_id = run("remember", "The staging password is hunter2", "--type", "event", root=root).stdout.decode().strip()
    assert run("forget", entry_id, root=root).returncode == 0
    again = run("remember", "the staging password is hunter2!", "--type", "event", root=root)
    assert again.returncode == 2
    assert b"forgotten" in again.stderr and entry_id.encode() in again.stderr
    assert lines(root / "long_term.jsonl") == []
    forced = run("remember", "the staging password is hunter2!", "--type", "event", "--force", root=root)
    assert forced.returncode == 0 and len(lines(root / "long_term.jsonl")) == 1


def test_remember_past_the_threshold_starts_a_background_dream(run, root):
    run("init", root=root)
    (root / "memctl.toml").write_text("[dream]\nauto_trigger_entries = 2\n")
    run("remember", "first fact about apples", "--type", "event", root=root)
    assert not (root / ".memctl" / "auto_dream").exists()
    done = run("remember", "second fact about pears", "--type", "event", root=root)
    assert done.returncode == 0 and done.stdout.strip()
    assert (root / ".memctl" / "auto_dream").exists()
    for _ in range(300):  # the detached dream logs its run; remember did not wait for it
        if (root / "dream_log.jsonl").exists() and b'"op": "end"' in (root / "dream_log.jsonl").read_bytes():
            break
        time.sleep(0.1)
    assert b'"op": "end"' in (root / "dream_log.jsonl").read_bytes()
