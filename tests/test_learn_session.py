"""`memctl turn`, `compact`, `dispose` through the installed command: a session's turns become
L5 entries with provenance; retries write nothing twice; hostile input is refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durability_helpers import l5, l6

SESSION = [
    {"id": "u1", "role": "user", "content": "Hi, my name is Dana.", "time": "2026-12-01T09:00:00", "speaker": "Dana"},
    {"id": "a1", "role": "assistant", "content": "Nice to meet you, Dana.", "time": "2026-12-01T09:00:05"},
    {"id": "u2", "role": "user", "content": "I prefer my morning briefing as bullet points at 7am.",
     "time": "2026-12-01T09:01:00", "speaker": "Dana"},
    {"id": "u3", "role": "user", "content": "Actually, I prefer the briefing at 8am, not 7am.",
     "time": "2026-12-01T09:02:00", "speaker": "Dana"},
    {"id": "u4", "role": "user", "content": "Tomorrow I plan to visit my sister Ana in Lisbon.",
     "time": "2026-12-01T09:03:00", "speaker": "Dana"},
]


def jsonl(messages: list[dict]) -> bytes:
    return "".join(json.dumps(m) + "\n" for m in messages).encode()


@pytest.fixture
def memory(run, root) -> Path:
    assert run("init", root=root).returncode == 0
    return root


def _turn(run, root, messages, session="chat-1", env=None, raw: bytes | None = None):
    return run("turn", "--session", session, root=root, input=raw if raw is not None else jsonl(messages), env=env)


def _buffer(root, name="chat-1") -> list[dict]:
    path = root / "sessions" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _learned_from(root, message: str) -> dict:
    """The one L5 entry learned from this message of chat-1 alone."""
    [entry] = [e for e in l5(root) if e.get("sources") == [{"session": "chat-1", "message": message}]]
    return entry


def test_a_session_leaves_the_corrected_preference_in_l5_with_its_sources(run, memory):
    done = _turn(run, memory, SESSION)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"5 of 5 messages buffered")
    disposed = run("dispose", "--session", "chat-1", "--json", root=memory)
    assert disposed.returncode == 0, disposed.stderr
    report = json.loads(disposed.stdout)
    assert report["closed"] and "Session chat-1: 5 messages" in report["summary"]
    [briefing] = [e for e in l5(memory) if e["type"] == "preference" and "briefing" in e["text"]]
    assert "8am" in briefing["text"] and {"session": "chat-1", "message": "u3"} in briefing["sources"]
    assert briefing["speaker"] == "Dana"
    [old] = [e for e in l6(memory) if e["id"] == briefing["corrects"]]
    assert "7am" in old["text"] and old["reason"] == "superseded"
    assert old["sources"] == [{"session": "chat-1", "message": "u2"}]
    assert _learned_from(memory, "u1")["type"] == "profile"
    assert "Lisbon" in _learned_from(memory, "u4")["text"]
    shown = run("show", briefing["id"], root=memory)
    assert json.loads(shown.stdout)["sources"] == briefing["sources"]


def test_a_retried_turn_and_a_repeated_compact_write_nothing_twice(run, memory):
    anonymous = [{"role": "user", "content": "I prefer green tea.", "time": "2026-12-01T10:00:00"},
                 {"role": "user", "content": "I prefer green tea.", "time": "2026-12-01T10:00:00"}]
    assert _turn(run, memory, SESSION + anonymous).returncode == 0
    assert len(_buffer(memory)) == 6  # the id-less twin within the batch is the same message
    again = _turn(run, memory, SESSION[2:] + anonymous[:1])
    assert again.returncode == 0 and again.stdout.startswith(b"0 of 4 messages buffered")
    assert run("compact", "--session", "chat-1", root=memory).returncode == 0
    files = {name: (memory / name).read_bytes() for name in ("long_term.jsonl", "archive.jsonl")}
    assert run("compact", "--session", "chat-1", root=memory).returncode == 0
    assert _turn(run, memory, SESSION).returncode == 0
    assert {name: (memory / name).read_bytes() for name in files} == files
    assert len(_buffer(memory)) == 6


def test_turn_extracts_when_the_unprocessed_messages_reach_the_threshold(run, memory):
    with open(memory / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nturns = 3\n")
    first = _turn(run, memory, SESSION[:2], env={})
    assert first.returncode == 0 and l5(memory) == []
    second = _turn(run, memory, SESSION[2:3])
    assert second.returncode == 0 and b"3 processed" in second.stdout
    assert any("bullet" in e["text"] for e in l5(memory))


def test_compact_prints_a_summary_within_the_budget(run, memory):
    assert _turn(run, memory, SESSION).returncode == 0
    small = run("compact", "--session", "chat-1", "--budget", "30", "--json", root=memory)
    assert small.returncode == 0, small.stderr
    report = json.loads(small.stdout)
    assert 0 < report["tokens"] <= 30 and report["summary"].startswith("Session chat-1")
    assert {item["action"] for item in report["learned"]} >= {"added"}
    text = run("compact", "--session", "chat-1", root=memory)
    assert b"Learned:" in text.stdout and b"8am" in text.stdout


def test_a_disposed_session_refuses_new_messages_and_keeps_one_short_term_record(run, memory):
    assert _turn(run, memory, SESSION).returncode == 0
    assert run("dispose", "--session", "chat-1", root=memory).returncode == 0
    assert run("dispose", "--session", "chat-1", root=memory).returncode == 0
    records = [json.loads(line) for line in (memory / "short_term.jsonl").read_text().splitlines()]
    assert [r["session"] for r in records] == ["chat-1"]
    assert _turn(run, memory, SESSION).returncode == 0  # a retry of what it holds: nothing new
    late = _turn(run, memory, [{"role": "user", "content": "one more thing"}])
    assert late.returncode == 2 and b"was disposed" in late.stderr


def test_a_json_array_crlf_lines_and_a_byte_order_mark_are_read(run, memory):
    array = json.dumps(SESSION[:2]).encode()
    assert _turn(run, memory, [], raw=array).returncode == 0
    windows = b"\xef\xbb\xbf" + jsonl(SESSION[2:]).replace(b"\n", b"\r\n")
    done = _turn(run, memory, [], raw=windows)
    assert done.returncode == 0, done.stderr
    assert [m["id"] for m in _buffer(memory)] == ["u1", "a1", "u2", "u3", "u4"]


def test_compact_of_an_unknown_session_is_one_line(run, memory):
    before = sorted(p.name for p in memory.rglob("*"))
    for command in ("compact", "dispose"):
        done = run(command, "--session", "nobody", root=memory)
        assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"no session" in done.stderr
    assert sorted(p.name for p in memory.rglob("*")) == before  # no lock file left for a typo


BAD_BATCHES = {
    "invalid JSON line": jsonl(SESSION[:1]) + b"{not json\n",
    "wrong role": jsonl(SESSION[:1] + [{"role": "system", "content": "x"}]),
    "content not a string": jsonl(SESSION[:1] + [{"role": "user", "content": 5}]),
    "id not a string": jsonl(SESSION[:1] + [{"id": 3, "role": "user", "content": "x"}]),
    "time not ISO": jsonl(SESSION[:1] + [{"role": "user", "content": "x", "time": "yesterday"}]),
    "not an object": jsonl(SESSION[:1]) + b"[1, 2]\n",
    "huge message": jsonl(SESSION[:1] + [{"role": "user", "content": "x" * 70_000}]),
    "invalid UTF-8": jsonl(SESSION[:1]) + b'{"role": "user", "content": "caf\xe9"}\n',
    "deeply nested": jsonl(SESSION[:1]) + b'{"role": "user", "content": "x", "tool_calls": ' + b"[" * 100_000 + b"\n",
    "empty": b"\n\n",
}


@pytest.mark.parametrize("name", sorted(BAD_BATCHES))
def test_hostile_input_is_one_line_exit_2_and_nothing_of_the_batch_is_buffered(run, memory, name):
    assert _turn(run, memory, SESSION[3:4]).returncode == 0
    before = (memory / "sessions" / "chat-1.jsonl").read_bytes()
    done = _turn(run, memory, [], raw=BAD_BATCHES[name])
    assert done.returncode == 2, (name, done.stderr)
    assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    assert (memory / "sessions" / "chat-1.jsonl").read_bytes() == before


@pytest.mark.parametrize("session", ["../x", "/etc/passwd", "a/../../b", ".hidden", "x" * 10_000, "tab\there", ""])
def test_a_hostile_session_id_never_escapes_the_root(run, memory, session):
    done = _turn(run, memory, SESSION[:1], session=session)
    outside = sorted(p.name for p in memory.parent.iterdir())
    assert outside == ["memory"]
    if done.returncode == 0:
        [name] = [p.name for p in (memory / "sessions").glob("*.jsonl")]
        assert "/" not in name and not name.startswith(".") and len(name) < 100
        assert run("compact", "--session", session, root=memory).returncode == 0
    else:
        assert done.returncode == 2 and done.stderr.count(b"\n") == 1


def test_a_session_id_with_nul_is_refused_by_the_module(root):
    from memctl.core.config import init_root, load_settings
    from memctl.core.errors import UsageError
    from memctl.learn import session

    init_root(root)
    with pytest.raises(UsageError, match="control character"):
        session.turn(load_settings(root), "a\0b", [{"role": "user", "content": "x"}])


def test_a_buffer_past_its_cap_refuses_the_batch(run, memory):
    with open(memory / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nmax_session_bytes = 2048\n")
    assert _turn(run, memory, SESSION).returncode == 0
    before = (memory / "sessions" / "chat-1.jsonl").read_bytes()
    more = [{"role": "user", "content": f"note {i} " + "y" * 200} for i in range(10)]
    done = _turn(run, memory, more)
    assert done.returncode == 2 and b"max_session_bytes" in done.stderr
    assert (memory / "sessions" / "chat-1.jsonl").read_bytes() == before


def test_a_secret_in_a_message_is_not_buffered_or_learned(run, memory):
    secret = "sk-ant-api03-" + "A" * 40
    done = _turn(run, memory, [{"role": "user", "content": f"I prefer to keep my key {secret} handy."}])
    assert done.returncode == 0, done.stderr
    assert run("dispose", "--session", "chat-1", root=memory).returncode == 0
    for path in [memory / "sessions" / "chat-1.jsonl", memory / "long_term.jsonl", memory / "short_term.jsonl"]:
        assert secret.encode() not in path.read_bytes()


def test_learned_entries_can_be_forgotten_restored_and_a_dream_undone(run, memory):
    assert _turn(run, memory, SESSION).returncode == 0
    assert run("dispose", "--session", "chat-1", root=memory).returncode == 0
    name = _learned_from(memory, "u1")
    assert run("forget", name["id"], root=memory).returncode == 0
    assert name["id"] not in {e["id"] for e in l5(memory)}
    assert run("restore", name["id"], root=memory).returncode == 0
    [back] = [e for e in l5(memory) if e["id"] == name["id"]]
    assert back["sources"] == name["sources"] and back["fields"] == name["fields"]
    before = sorted(json.dumps(e, sort_keys=True) for e in l5(memory))
    later = {"MEMCTL_NOW": "2027-12-01T04:00:00"}  # a year on: the contextual entries leave, unreferenced
    dream = run("dream", "--force", "--json", root=memory, env=later)
    assert dream.returncode == 0, dream.stderr
    assert sorted(json.dumps(e, sort_keys=True) for e in l5(memory)) != before
    run_id = next(json.loads(line)["run"] for line in dream.stdout.splitlines() if b'"run"' in line)
    undone = run("dream", "--undo", run_id, root=memory, env=later)
    assert undone.returncode == 0, undone.stderr
    assert sorted(json.dumps(e, sort_keys=True) for e in l5(memory)) == before


def test_show_json_prints_a_learned_entry_with_its_sources(run, memory):
    assert _turn(run, memory, SESSION).returncode == 0
    assert run("compact", "--session", "chat-1", root=memory).returncode == 0
    name = _learned_from(memory, "u1")
    shown = run("show", name["id"], "--json", root=memory)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["sources"] == [{"session": "chat-1", "message": "u1"}]
    assert json.loads(run("show", f"L5:{name['id']}", "--json", root=memory).stdout)["speaker"] == "Dana"


@pytest.mark.parametrize("planted", ["folder", "buffer", "short-term"])
def test_a_planted_symlink_is_refused_and_nothing_is_written_outside(run, memory, tmp_path, planted):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep\n")
    if planted == "folder":
        (memory / "sessions").symlink_to(outside, target_is_directory=True)
    elif planted == "buffer":
        (memory / "sessions").mkdir(mode=0o700)
        (memory / "sessions" / "chat-1.jsonl").symlink_to(outside / "victim")
    else:
        (memory / "short_term.jsonl").symlink_to(outside / "victim")
    done = _turn(run, memory, SESSION)
    if planted == "short-term":
        assert done.returncode == 0
        done = run("dispose", "--session", "chat-1", root=memory)
    assert done.returncode == 2 and b"symlink" in done.stderr and done.stderr.count(b"\n") == 1
    assert sorted(p.name for p in outside.iterdir()) == ["victim"] and (outside / "victim").read_text() == "keep\n"


def test_concurrent_turns_on_one_session_buffer_every_message_once(memctl_bin, memory):
    import subprocess

    from conftest import clean_env

    batches = [[{"id": f"w{w}-{i}", "role": "user", "content": f"worker {w} note {i}"} for i in range(5)]
               for w in range(4)]
    procs = [subprocess.Popen([memctl_bin, "--root", str(memory), "turn", "--session", "busy"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
             for _ in batches]
    for proc, batch in zip(procs, batches):
        proc.stdin.write(jsonl(batch + batches[0]))  # every worker also retries worker 0's batch
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    ids = [m["id"] for m in _buffer(memory, "busy")]
    assert sorted(ids) == sorted(m["id"] for batch in batches for m in batch)
    assert [m["position"] for m in _buffer(memory, "busy")] == list(range(20))


def test_a_busy_writer_lock_defers_extraction_but_the_turn_is_acknowledged(run, memory):
    from memctl.core.config import load_settings
    from memctl.core.fsutil import WriterLock

    with open(memory / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[learn]\nturns = 2\n")
    with WriterLock(load_settings(memory).layout.lock):
        done = run("turn", "--session", "chat-1", "--wait", "0.2", root=memory, input=jsonl(SESSION))
    assert done.returncode == 0, done.stderr
    assert b"extraction deferred: lock busy" in done.stderr and l5(memory) == []
    assert len(_buffer(memory)) == 5
    assert run("compact", "--session", "chat-1", root=memory).returncode == 0
    assert _learned_from(memory, "u1")["type"] == "profile"


def test_the_session_layer_on_either_backend(run, root, backend):
    assert run("init", root=root).returncode == 0
    backend.use(root)
    assert _turn(run, root, SESSION).returncode == 0
    disposed = run("dispose", "--session", "chat-1", "--json", root=root)
    assert disposed.returncode == 0, disposed.stderr
    learned = {item["id"]: item for item in json.loads(disposed.stdout)["session_learned"]}
    corrected = [item for item in learned.values() if item["action"] == "corrected"]
    assert corrected, learned
    shown = run("show", corrected[0]["id"], "--json", root=root)
    assert shown.returncode == 0, shown.stderr
    entry = json.loads(shown.stdout)
    assert {"session": "chat-1", "message": "u3"} in entry["sources"] and "8am" in entry["text"]
    old = json.loads(run("show", f"L6:{entry['corrects']}", "--json", root=root).stdout)
    assert "7am" in old["text"]
    assert _turn(run, root, SESSION).returncode == 0  # a retry after dispose: nothing new, nothing twice
    again = run("dispose", "--session", "chat-1", "--json", root=root)
    assert json.loads(again.stdout)["session_learned"] == json.loads(disposed.stdout)["session_learned"]


def test_two_ids_sharing_files_on_a_case_blind_file_system_are_told_apart(run, memory):
    from memctl.learn.buffer import encoded_name

    assert encoded_name("Chat").lower() != encoded_name("chat").lower()  # apart on macOS and Windows
    assert _turn(run, memory, SESSION[:1], session="Chat").returncode == 0
    assert run("compact", "--session", "Chat", root=memory).returncode == 0
    for suffix in (".state", ".jsonl"):  # files shared all the same (copied from an older memctl)
        (memory / "sessions" / (encoded_name("Chat") + suffix)).rename(memory / "sessions" / ("chat" + suffix))
    done = run("compact", "--session", "chat", root=memory)
    assert done.returncode == 2 and b"ids differing only in case" in done.stderr


def test_candidates_with_malformed_sources_are_credited_to_their_batch(root):
    from memctl.core.config import init_root, load_settings
    from memctl.learn import session
    from memctl.learn.candidates import Candidate

    init_root(root)
    settings = load_settings(root)
    def odd(settings, messages):
        return [Candidate("lesson", "restart the agent after a key rotation", "", 6, ["not a dict", 3])], \
            ["the model answered oddly"]

    session.turn(settings, "s", [{"id": "x1", "role": "user", "content": "restart it after rotating keys"}])
    outcome = session.compact(settings, "s", 100, extract=odd)
    assert outcome.notes == ["the model answered oddly"]
    [entry] = l5(root)
    assert entry["sources"] == [{"session": "s", "message": "x1"}]
