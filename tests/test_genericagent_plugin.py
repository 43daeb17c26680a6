"""The GenericAgent plugin `memctl init` installs, wired end to end (issue 29, must-show 3; issue
32's two plugin items): GenericAgent's own `agent_loop.py` runs a task with a scripted model
(tests/ga_scripted_task.py) and the installed plugin; memctl learns from it without the loop
ever waiting on memctl longer than the recall's limit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import clean_env
from ga_checkout import make_checkout

DRIVER = Path(__file__).resolve().parent / "ga_scripted_task.py"
REQUEST = "I'm vegetarian, and my sister Ana lives in Lisbon. Fetch the quarterly reports for me."
GENEROUS = 60  # seconds: a bound no healthy run comes near, far below a hang's


def _installed(tmp_path: Path, run):
    checkout = make_checkout(tmp_path)
    done = run("init", cwd=checkout.base)
    assert done.returncode == 0, done.stderr
    assert b"# memctl-genericagent-plugin v2" in (checkout.base / "plugins" / "memctl_recall.py").read_bytes()
    return checkout


def _run_task(checkout, request: str = REQUEST, **env: str) -> tuple[dict, subprocess.CompletedProcess]:
    request_file = checkout.base.parent / "request.txt"
    request_file.write_text(request, encoding="utf-8")
    done = subprocess.run([sys.executable, str(DRIVER), str(checkout.base), str(request_file)], capture_output=True,
                          cwd=checkout.base, env=clean_env(**env), timeout=GENEROUS * 3)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.decode().splitlines()[-1]), done


def _fake_memctl(tmp_path: Path, body: str) -> dict[str, str]:
    """`python -m memctl` replaced by BODY (PYTHONPATH first); run from tmp_path, not the checkout."""
    fake = tmp_path / "fake"
    (fake / "memctl").mkdir(parents=True, exist_ok=True)
    (fake / "memctl" / "__main__.py").write_text(body)
    return {"PYTHONPATH": str(fake)}


def _waits(report: dict, event: str) -> list[float]:
    return [seconds for name, seconds in report["waits"] if name == event]


def test_a_task_through_genericagents_loop_is_counted_by_memctl_tools(tmp_path, run):
    checkout = _installed(tmp_path, run)
    report, done = _run_task(checkout, MEMCTL_RECALL_TIMEOUT="30", MEMCTL_HOOK_TIMEOUT="60")
    assert report["result"]["result"] == "CURRENT_TASK_DONE"
    assert len(_waits(report, "tool_after")) == 5  # four tools and GenericAgent's own no_tool
    tools = {row["tool"]: row for row in map(json.loads, run("tools", "--json", root=checkout.memory).stdout.splitlines())}
    assert (tools["web_fetch"]["calls"], tools["web_fetch"]["failures"]) == (3, 3)
    assert (tools["file_read"]["calls"], tools["file_read"]["failures"]) == (1, 0)
    assert "no_tool" not in tools
    assert b"[memctl_recall]" not in done.stderr  # every queued call ran, none failed
    l5 = [json.loads(line) for line in (checkout.memory / "long_term.jsonl").read_text().splitlines()]
    [lesson] = [e for e in l5 if e["type"] == "tool"]
    assert lesson["topic"] == "web_fetch" and "file too large: <n> bytes at <url>" in lesson["text"]
    # what the user said about themselves, learned through turn_after -> `memctl turn`, agent_after -> dispose
    [about_user] = [e for e in l5 if "vegetarian" in e["text"]]
    assert "Ana" in about_user["text"] and about_user["sources"][0]["session"].startswith("ga-")
    short_term = run("recent", "--json", root=checkout.memory)
    assert about_user["sources"][0]["session"].encode() in short_term.stdout, short_term.stderr

    # no hook call kept the loop waiting on memctl longer than its limit (the recall's; the others only queue)
    assert max(_waits(report, "agent_before")) < 30
    assert all(seconds < 60 for _event, seconds in report["waits"])

    again, _ = _run_task(checkout, MEMCTL_RECALL_TIMEOUT="30", MEMCTL_HOOK_TIMEOUT="60")  # the same call ids
    tools = {row["tool"]: row for row in map(json.loads, run("tools", "--json", root=checkout.memory).stdout.splitlines())}
    assert tools["web_fetch"]["calls"] == 3  # a call id seen before counts once


def test_a_memctl_that_hangs_never_hangs_the_loop(tmp_path, run):
    checkout = _installed(tmp_path, run)
    env = {**_fake_memctl(tmp_path, "import time\ntime.sleep(600)\n"), "MEMCTL_RECALL_TIMEOUT": "1.5",
           "MEMCTL_HOOK_TIMEOUT": "1"}
    report, done = _run_task(checkout, **env)
    assert report["result"]["result"] == "CURRENT_TASK_DONE"
    # by construction: only agent_before runs memctl on the loop's thread, and it is killed at its
    # limit; turn_after, tool_after and agent_after only queue (the 600 s hang shows up nowhere)
    assert max(_waits(report, "agent_before")) < GENEROUS
    for event in ("tool_after", "turn_after", "agent_after"):
        assert _waits(report, event) and max(_waits(report, event)) < 5, event
    assert report["loop_seconds"] < GENEROUS
    err = done.stderr.decode()
    assert "memctl compose took longer than 1.5s" in err
    assert "memctl tools took longer than 1.0s" in err  # the background calls were killed, and said so
    assert "queued memctl calls left undone at exit" in err
    hung = subprocess.run(["pgrep", "-f", "--", f"--root {checkout.memory} "], capture_output=True)
    assert hung.stdout == b"", "a hung memctl outlived the agent"


SLOW = 3.0  # seconds the stand-in memctl sleeps before it runs the real one: any call waited on takes longer
RECALL_LIMIT = 0.5
KILL_GRACE = 1.5  # the recall's stop: SIGKILL to the process group, then at most 0.5 s to reap it


def test_a_slow_memctl_bounds_each_hook_call_by_its_limit_and_still_learns(tmp_path, run, memctl_bin):
    """A memctl that answers only after SLOW seconds (the real one, late): the recall is given up at
    its limit, every other hook returns without waiting for a call, and what the task taught is
    learned all the same, off the loop's thread."""
    checkout = _installed(tmp_path, run)
    late = ("import os, sys, time\n"
            f"time.sleep({SLOW})\n"
            "env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}\n"
            f"os.execve({memctl_bin!r}, [{memctl_bin!r}, *sys.argv[1:]], env)\n")
    report, done = _run_task(checkout, MEMCTL_RECALL_TIMEOUT=str(RECALL_LIMIT), MEMCTL_HOOK_TIMEOUT="30",
                             **_fake_memctl(tmp_path, late))
    assert report["result"]["result"] == "CURRENT_TASK_DONE"
    assert f"memctl compose took longer than {RECALL_LIMIT}s" in done.stderr.decode()  # it was slow, and cut off
    [recall] = _waits(report, "agent_before")
    assert recall < RECALL_LIMIT + KILL_GRACE < SLOW  # bounded by its limit, not by the slow memctl
    queued = [seconds for event, seconds in report["waits"] if event != "agent_before"]
    assert len(queued) >= 7 and max(queued) < SLOW  # tool_after x5, turn_after, agent_after: none waited on a call
    l5 = [json.loads(line) for line in (checkout.memory / "long_term.jsonl").read_text().splitlines()]
    assert [e for e in l5 if "vegetarian" in e["text"]]  # learned, though every call came SLOW seconds late
    tools = {row["tool"]: row for row in map(json.loads, run("tools", "--json", root=checkout.memory).stdout.splitlines())}
    assert (tools["web_fetch"]["calls"], tools["file_read"]["calls"]) == (3, 1)


def test_the_request_goes_on_stdin_and_l1_is_left_out(tmp_path, run):
    checkout = _installed(tmp_path, run)
    seen = tmp_path / "seen.json"
    recorder = ("import json, sys\n"
                f"json.dump({{'argv': sys.argv[1:], 'stdin': len(sys.stdin.buffer.read())}}, open({str(seen)!r}, 'w'))\n"
                "print('<recalled-memory>x</recalled-memory>')\n")
    huge = "please read this log: " + "0123456789abcdef" * 9000  # 144 KiB: over Linux's 128 KiB per argument
    report, done = _run_task(checkout, huge, MEMCTL_LEARN="0", MEMCTL_RECALL_TIMEOUT="30",
                             **_fake_memctl(tmp_path, recorder))
    called = json.loads(seen.read_text())
    assert called["stdin"] == len(huge.encode())
    assert called["argv"][-5:] == ["compose", "--budget", "1500", "--no-l1", "-"]
    assert not any("0123456789abcdef" in argument for argument in called["argv"])

    # the real memctl: the same request on stdin, and the block without GenericAgent's L1
    l1 = (checkout.memory / "global_mem_insight.txt").read_text().splitlines()[0]
    (checkout.memory / "global_mem.txt").write_text("## [NAS]\n- backup target: nas-07, port 2222\n")
    query = ("what port does the NAS backup use? " * 4000).encode()
    block = run("compose", "--no-l1", "-", root=checkout.memory, input=query)
    assert block.returncode == 0, block.stderr
    assert b"2222" in block.stdout and l1.encode() not in block.stdout
    with_l1 = run("compose", "-", root=checkout.memory, input=query)
    assert l1.encode() in with_l1.stdout
    refused = run("compose", "-", root=checkout.memory, input=b"\xff\xfe")
    assert refused.returncode == 2 and refused.stderr.count(b"\n") == 1 and b"not UTF-8" in refused.stderr


def test_learn_leaves_a_session_the_plugin_fed_live_to_it(tmp_path, run):
    import random
    from datetime import datetime, timedelta

    from memctl.l4 import loggen

    checkout = _installed(tmp_path, run)
    _run_task(checkout, MEMCTL_RECALL_TIMEOUT="30", MEMCTL_HOOK_TIMEOUT="60")
    # GenericAgent's own log of that task (its llmcore writes it; the scripted model has none)
    log = loggen.format_a(datetime.now() - timedelta(minutes=1), 2, random.Random(1), 200, chinese=False,
                          request=REQUEST)
    (checkout.raw_dir / "model_responses_424242.txt").write_text(log, encoding="utf-8")
    assert run("archive", "--min-age", "0s", "--keep-newest", "0", root=checkout.memory).returncode == 0
    elsewhere = tmp_path / "elsewhere"  # the same archive without the plugin's buffers: learned from the log
    shutil.copytree(checkout.memory, elsewhere, ignore=shutil.ignore_patterns("sessions"))

    report = json.loads(run("learn", "--json", root=checkout.memory).stdout)
    assert report["learned"] == report["learned_live"] == 1 and report["candidates"] == 0
    [about_user] = [json.loads(line) for line in (checkout.memory / "long_term.jsonl").read_text().splitlines()
                    if "vegetarian" in line]
    assert about_user.get("seen", 1) == 1

    control = json.loads(run("learn", "--json", root=elsewhere).stdout)
    assert control["learned_live"] == 0 and control["candidates"] > 0
    [seen_twice] = [json.loads(line) for line in (elsewhere / "long_term.jsonl").read_text().splitlines()
                    if "vegetarian" in line]
    assert seen_twice["seen"] == 2
