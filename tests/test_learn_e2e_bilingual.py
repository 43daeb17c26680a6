"""The write link end to end (issue #29, must-show 2), through the installed `memctl` as real
subprocesses: a session of 40 messages in English and one of 40 in Chinese
(tests/learn_bilingual_sessions.py), sent as an agent sends them (`turn` after each exchange,
`tools record` after each tool call, `compact` once, `dispose` at the end).

What they must leave: the corrected preference in L5 and the one it corrects in L6; the plan with
its absolute date; a `tool` lesson from the repeated failure; no secret in any file under the
root; every learned entry's `sources` naming the message it came from; `forget`/`restore` and
`dream --undo` working on learned entries; nothing written twice by a repeated or retried turn;
and no acknowledged message lost to a SIGKILL at any of the write link's kill points.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import learn_bilingual_sessions as sessions
from conftest import clean_env, memctl_executable
from durability_helpers import every_line_parses, l5, l6

NOW = {"MEMCTL_NOW": "2026-11-16T10:00:00"}
KILLED = -9
# every kill point of a session's own steps that `turn`, `compact` or `dispose` passes
# (memctl.core.faults), and the deferred fsync of the last append; the write lookups' points
# (lookups-rebuild, -catch-up, -splice) are test_lookups_durability's, and the counts of
# checkpoints between them test_learn_durability's, so each is swept once here, not again
LABELS = ("learn: buffered", "learn: extracted", "learn: candidate routed", "learn: routed",
          "learn: short-term kept", "unlocked, last append not yet synced")
BATCH = 4  # messages an agent sends per `turn`: an exchange and its tool results
COMPACT_AFTER = 5  # batches, then the agent's context is nearly full: `compact`
SESSIONS = {"english": ("chat-en", sessions.ENGLISH, sessions.ENGLISH_SPEAKER),
            "chinese": ("chat-zh", sessions.CHINESE, sessions.CHINESE_SPEAKER)}
CONFIG = "\n[learn]\nturns = 8\n"  # extraction at the threshold as well as at compact and dispose

pytestmark = pytest.mark.slow


def run(root: Path, *args: str, input: bytes | None = None, env: dict | None = None):
    return subprocess.run([memctl_executable(), "--root", str(root), *args], input=input, capture_output=True,
                          env=clean_env(**{**NOW, **(env or {})}), timeout=120)


def jsonl(messages: list[dict]) -> bytes:
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages).encode("utf-8")


def steps(language: str) -> list[tuple[str, ...] | tuple]:
    """One session's commands in the order an agent runs them: (arguments, stdin)."""
    session, script, speaker = SESSIONS[language]
    messages = sessions.messages(script, speaker)
    out = []
    for number, start in enumerate(range(0, len(messages), BATCH), start=1):
        out.append((("turn", "--session", session), jsonl(messages[start:start + BATCH])))
        if number == COMPACT_AFTER:
            out.append((("compact", "--session", session, "--budget", "200"), None))
    out += [(("tools", "record"), json.dumps(event).encode()) for event in sessions.tool_events(language, session)]
    out.append((("dispose", "--session", session), None))
    return out


def all_steps() -> list:
    return steps("english") + steps("chinese")


def new_memory(root: Path) -> Path:
    done = run(root, "init")
    assert done.returncode == 0, done.stderr
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write(CONFIG)
    return root


def fed(root: Path, fault: dict | None = None) -> int:
    """Every step, with the fault if any; a step the fault killed is run again without it (what an
    agent's retry does). How many steps were killed."""
    killed = 0
    for args, data in all_steps():
        done = run(root, *args, input=data, env=fault)
        if done.returncode == KILLED:
            killed += 1
            done = run(root, *args, input=data)
        assert done.returncode == 0, (args, done.stderr)
    return killed


def outcome(root: Path) -> dict:
    """What the memory holds, as a user would compare it."""
    every_line_parses(root)
    active = l5(root)
    ids = [e["id"] for e in active]
    assert len(ids) == len(set(ids)), "an entry twice in L5"
    buffered = {}
    for session, _script, _speaker in SESSIONS.values():
        path = root / "sessions" / f"{session}.jsonl"
        buffered[session] = [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]
    short = [json.loads(line)["session"] for line in (root / "short_term.jsonl").read_text().splitlines()]
    return {"l5": sorted((_learned_id(e), e["text"], json.dumps(e.get("sources"))) for e in active),
            "l6": sorted(_learned_id(e) for e in l6(root)), "buffered": buffered, "short": short}


def _learned_id(entry: dict) -> str:
    """An entry's id; a tool lesson's by its tool (the collector names its lessons afresh in each memory)."""
    return f"tool:{entry['topic']}" if entry["type"] == "tool" else entry["id"]


@pytest.fixture(scope="module")
def memory(tmp_path_factory) -> Path:
    root = new_memory(tmp_path_factory.mktemp("bilingual") / "memory")
    assert fed(root) == 0
    return root


@pytest.fixture
def scratch(memory, tmp_path) -> Path:
    """A copy of the fed memory a test may change."""
    return Path(shutil.copytree(memory, tmp_path / "memory", symlinks=True))


def _one(entries: list[dict], test) -> dict:
    found = [e for e in entries if test(e)]
    assert len(found) == 1, [e["text"] for e in found]
    return found[0]


# ---------------------------------------------------------------- what the sessions leave

@pytest.mark.parametrize("new, old", [("short Slack message", "long email in the evening"),
                                      ("每天早上用钉钉发一条简短的汇总", "每天晚上用邮件发一份详细的汇总")])
def test_the_corrected_preference_is_in_l5_and_the_one_it_corrects_in_l6(memory, new, old):
    current = _one(l5(memory), lambda e: new in e["text"])
    assert current["type"] == "preference"
    assert not any(old in e["text"] for e in l5(memory))
    corrected = _one(l6(memory), lambda e: old in e["text"])
    assert corrected["reason"] == "superseded" and current["corrects"] == corrected["id"]


@pytest.mark.parametrize("said, written", [
    ("Next Friday I'm going to present the reporting migration plan", "On 20 November 2026 Priya is going to "
                                                                       "present the reporting migration plan"),
    ("我打算下周五在技术评审会上", "王磊打算2026年11月27日在技术评审会上"),
])
def test_the_plan_holds_its_absolute_date(memory, said, written):
    assert any(said in content for _id, _role, content in sessions.ENGLISH + sessions.CHINESE)
    plan = _one(l5(memory), lambda e: written in e["text"])
    assert plan["type"] == "event" and "Friday" not in plan["text"] and "下周" not in plan["text"]


def test_names_are_profile_facts(memory):
    assert _one(l5(memory), lambda e: e["type"] == "profile" and "Priya Raman" in e["text"])
    assert _one(l5(memory), lambda e: e["type"] == "profile" and e["topic"] == "王磊的名字")


@pytest.mark.parametrize("tool, session, shape", [("db_query", "chat-en", "timed out after <n> seconds"),
                                                  ("sql_query", "chat-zh", "超时（<n>秒）")])
def test_the_repeated_tool_failure_is_a_tool_lesson(memory, tool, session, shape):
    lesson = _one(l5(memory), lambda e: e["type"] == "tool" and e["topic"] == tool)
    assert shape in lesson["text"] and "3 of 3 calls" in lesson["text"]
    assert lesson["source"] == f"tool_usage: {session}"  # the collector's provenance: the session it saw fail
    table = {row["tool"]: row for row in map(json.loads, run(memory, "tools", "--json").stdout.splitlines())}
    assert (table[tool]["calls"], table[tool]["failures"]) == (3, 3)


def test_no_secret_rests_in_any_file_under_the_root(memory):
    # the derived files too: the index a search builds, the recalled block, the tool table
    assert run(memory, "search", "staging API key password token").returncode in (0, 1)
    assert run(memory, "compose", "what did Priya say about the database?").returncode == 0
    assert run(memory, "recent", "--json").returncode == 0
    files = [path for path in memory.rglob("*") if path.is_file()]
    assert any(path.parent.name == "sessions" for path in files) and (memory / ".memctl" / "index.sqlite").exists()
    for path in files:
        data = path.read_bytes()
        for secret in sessions.SECRETS:
            for part in (secret, secret[len(secret) // 3:2 * len(secret) // 3]):  # whole, or a middle third
                assert part.encode() not in data, f"{path.relative_to(memory)} holds a secret"


def _words(text: str) -> set[str]:
    """What two texts must share to speak of the same thing: English words of four letters or more,
    Chinese character pairs."""
    lowered = text.lower()
    cjk = "".join(ch if "\u4e00" <= ch <= "\u9fff" else " " for ch in lowered).split()
    return ({w for w in re.findall(r"[a-z]{4,}", lowered) if w not in {"priya", "that", "with", "their"}}
            | {run[i:i + 2] for run in cjk for i in range(len(run) - 1)} - {"王磊"})


def test_every_learned_entry_names_the_message_it_came_from(memory):
    said = {(SESSIONS[language][0], message["id"]): message
            for language in SESSIONS for message in sessions.messages(*SESSIONS[language][1:])}
    learned = [e for e in l5(memory) + l6(memory) if e["type"] != "tool"]
    assert len(learned) >= 20
    for entry in learned:
        assert entry.get("sources"), entry["text"]
        for source in entry["sources"]:
            message = said[(source["session"], source["message"])]
            assert message["role"] in ("user", "assistant")
            assert _words(entry["text"]) & _words(message["content"]), (entry["text"], message["content"])
        shown = json.loads(run(memory, "show", entry["id"]).stdout)
        assert shown["sources"] == entry["sources"]
    lesson = _one(learned, lambda e: e["type"] == "lesson" and "VPN" in e["text"])
    assert lesson["sources"] == [{"session": "chat-en", "message": "e15"}]  # the assistant's, as it said it


# ---------------------------------------------------------------- undo

def test_forget_and_restore_a_learned_entry(scratch):
    name = _one(l5(scratch), lambda e: "Priya Raman" in e["text"])
    assert run(scratch, "forget", name["id"]).returncode == 0
    assert name["id"] not in {e["id"] for e in l5(scratch)} and name["id"] in {e["id"] for e in l6(scratch)}
    assert run(scratch, "restore", name["id"]).returncode == 0
    back = _one(l5(scratch), lambda e: e["id"] == name["id"])
    assert (back["text"], back["sources"]) == (name["text"], name["sources"])


def test_dream_undo_puts_back_the_learned_entries_it_archived(scratch):
    before = outcome(scratch)["l5"]
    later = {"MEMCTL_NOW": "2027-01-01T10:00:00"}  # the plan and the other happenings are past their 30 days
    dreamt = run(scratch, "dream", "--only", "archive", "--force", "--json", env=later)
    assert dreamt.returncode == 0, dreamt.stderr
    report = json.loads(dreamt.stdout)
    assert report["counts"]["archive"] >= 4
    assert any("20 November 2026" in e["text"] for e in l6(scratch))
    assert run(scratch, "dream", "--undo", report["run"], env=later).returncode == 0
    assert outcome(scratch)["l5"] == before


# ---------------------------------------------------------------- nothing twice, nothing lost

def test_the_same_turns_sent_again_write_nothing(scratch):
    files = {name: (scratch / name).read_bytes() for name in ("long_term.jsonl", "archive.jsonl", "short_term.jsonl")}
    for args, data in all_steps():
        if args[0] in ("turn", "tools"):  # every batch and tool call again: the session is closed by now
            done = run(scratch, *args, input=data)
            assert done.returncode == 0, done.stderr
    assert {name: (scratch / name).read_bytes() for name in files} == files


def _without_tool_ids(root: Path) -> list[str]:
    """L5's lines, a tool lesson's id left out: the collector names its lessons afresh in each memory."""
    return [re.sub(r'^\{"id": "m[0-9a-f]+", (?="text": "`)', "{", line)
            for line in (root / "long_term.jsonl").read_text(encoding="utf-8").splitlines()]


def test_a_retried_turn_and_a_repeated_session_write_nothing_twice(memory, tmp_path):
    """Every batch sent twice (an agent retrying a turn whose answer it lost), and the whole session
    again before `dispose`: the memory is byte for byte the one each batch sent once made."""
    root = new_memory(tmp_path / "memory")
    for args, data in all_steps():
        if args[0] == "dispose":
            language = next(name for name, (session, _s, _p) in SESSIONS.items() if session == args[-1])
            whole = jsonl(sessions.messages(*SESSIONS[language][1:]))
            again = run(root, "turn", "--session", args[-1], "--json", input=whole)
            assert again.returncode == 0 and json.loads(again.stdout)["buffered"] == 0
        for _ in range(2 if args[0] == "turn" else 1):
            assert run(root, *args, input=data).returncode == 0
    for name in ("archive.jsonl", "short_term.jsonl"):
        assert (root / name).read_bytes() == (memory / name).read_bytes(), name
    assert _without_tool_ids(root) == _without_tool_ids(memory)


@pytest.mark.parametrize("label", LABELS)
def test_a_kill_at_each_point_loses_no_acknowledged_message(memory, tmp_path, label):
    root = new_memory(tmp_path / "memory")
    assert fed(root, {"MEMCTL_FAULT_AT": label}) >= 1, f"no step reached {label!r}"
    assert outcome(root) == outcome(memory)


@pytest.mark.parametrize("after", [4])
def test_a_kill_after_any_count_of_checkpoints_loses_no_acknowledged_message(memory, tmp_path, after):
    root = new_memory(tmp_path / "memory")
    assert fed(root, {"MEMCTL_FAULT_AFTER": str(after)}) >= 1
    assert outcome(root) == outcome(memory)


@pytest.mark.parametrize("write", [1])
def test_a_torn_write_loses_no_acknowledged_message(memory, tmp_path, write):
    root = new_memory(tmp_path / "memory")
    assert fed(root, {"MEMCTL_FAULT_WRITE": f"{write}:torn"}) >= 1
    assert outcome(root) == outcome(memory)
