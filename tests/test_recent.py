"""recent: after an archive run, the last sessions newest first, each summary within 2 KB."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

from memctl.l4 import loggen
from l4_helpers import make_folder


def _archive(run, folder) -> None:
    assert run("init", root=folder.root).returncode == 0
    result = run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root)
    assert result.returncode == 0, result.stderr.decode()


def test_recent_lists_sessions_newest_first_within_the_size_limit(run, tmp_path):
    folder = make_folder(tmp_path)
    rng = random.Random(5)
    start = datetime(2026, 3, 28, 9, 0)
    requests = {}
    # written out of order, and one long session whose key lines alone exceed 2 KB
    for number, day in enumerate([3, 0, 5, 1, 4, 2]):
        when = start + timedelta(days=day, hours=day)
        ask = f"Task number {day}: check the {['nas', 'proxy', 'deploy', 'backup', 'router', 'invoice'][day]} setup"
        turns = 60 if day == 4 else 2
        text = loggen.format_b(when, turns, rng, output_size=200, request=ask)
        folder.add_log(f"model_responses_{number}.txt", text)
        requests[day] = ask
    folder.add_log("model_responses_9.txt", loggen.no_tool_session(
        start + timedelta(days=6), "What is the NAS mount option?", "Use vers=3.0 when mounting the share."))
    _archive(run, folder)
    result = run("recent", "-n", "4", "--json", root=folder.root)
    assert result.returncode == 0, result.stderr.decode()
    sessions = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert len(sessions) == 4
    ends = [s["end"] for s in sessions]
    assert ends == sorted(ends, reverse=True)
    assert sessions[0]["request"] == "What is the NAS mount option?"
    assert sessions[0]["answer"] == "Use vers=3.0 when mounting the share."
    assert [s["request"] for s in sessions[1:]] == [requests[5], requests[4], requests[3]]
    assert all(s["answer"] == "Final answer: all checks passed." for s in sessions[1:])
    for s in sessions:
        assert s["bytes"] == len(s["text"].encode("utf-8")) <= 2048
    long_one = sessions[2]
    assert 1500 < long_one["bytes"] <= 2048
    assert long_one["key_lines"] and long_one["key_lines"][-1].startswith("[Agent] Done:")  # the end is kept
    plain = run("recent", root=folder.root)
    blocks = plain.stdout.decode().split("\n\n")
    assert len(blocks) == 5 and blocks[0].startswith("## ")
    assert run("recent", "-n", "0", root=folder.root).stdout == b""


def test_recent_on_an_empty_memory_prints_nothing(run, root):
    assert run("init", root=root).returncode == 0
    result = run("recent", root=root)
    assert result.returncode == 0 and result.stdout == b""
