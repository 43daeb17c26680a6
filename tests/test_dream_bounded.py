"""A dream's apply steps in bounded memory (issue #31, a million entries in ≤ 400 MiB): the L6
copies and audit records go through scratch files and are appended a chunk at a time, the
digests of the planned lines are held in flat arrays, and the check every write command makes
of L5 (`bad_lines`) is streamed. Each must write what the whole-in-memory way wrote, and a
step cut off between two chunks must lose nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import pytest

from durability_helpers import ENV, l5, l6, lines_of, present_once, seed
from memctl.longterm import dream, dream_apply, dream_scratch
from memctl.longterm.dream_apply import Planned, line_digest
from memctl.longterm.entries import bad_lines, iter_nonblank_lines
from test_dream_golden import L5_AFTER, L6_AFTER, LOG_AFTER
from test_dream_streamed import NOW, memory  # noqa: F401  (the fixture)
from test_torn_writes import dream_entries
from conftest import clean_env


def test_nonblank_lines_streamed_are_the_lines_read_whole(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "store.jsonl"
    cases = [b"", b"\n", b"a", b"a\n\nb", b"a\r\nb\rc\n", b"\r\r\n \n", b"x\r", b"\x0b\x0c\x1c\x85\n"]
    cases += [bytes(rng.choice(b"ab \r\n\t\x0b\x85") for _ in range(rng.randint(0, 30))) for _ in range(500)]
    for data in cases:
        path.write_bytes(data)
        whole = [(number, raw) for number, raw in enumerate(data.splitlines(), start=1) if raw.strip()]
        assert list(iter_nonblank_lines(path)) == whole, data
    assert list(iter_nonblank_lines(tmp_path / "missing.jsonl")) == []


def test_bad_lines_numbers_each_line_as_before(tmp_path):
    path = tmp_path / "long_term.jsonl"
    good = json.dumps({"id": "a", "text": "the build host is bk-02", "type": "lesson"})
    path.write_bytes(f"{good}\r\n\n{{\"id\": \"b\"}}\rnot json\n{good}\n\xff\n".encode("latin-1"))
    found = bad_lines(path)
    assert [number for number, _ in found] == [3, 4, 6]
    assert (found[1][1], found[2][1]) == ("not JSON", "not UTF-8 text")


def test_scratch_lines_come_back_as_whole_lines(monkeypatch):
    monkeypatch.setattr(dream_scratch, "CHUNK_BYTES", 64)
    rng = random.Random(3)
    lines = [("x" * rng.randint(0, 150) + "\n").encode() for _ in range(200)]
    with dream_scratch.ScratchLines() as scratch:
        for line in lines:
            scratch.write(line)
        chunks = [bytes(chunk) for chunk in scratch.chunks()]  # each good until the next
        assert b"".join(chunks) == b"".join(lines) and scratch.size == len(b"".join(lines))
        assert len(chunks) > 10 and all(chunk.endswith(b"\n") for chunk in chunks)
        assert b"".join(bytes(chunk) for chunk in scratch.chunks()) == b"".join(lines)  # read again
    with dream_scratch.ScratchLines() as small:  # under a chunk: held, one piece, no file read
        small.write(b"one\n")
        small.write(b"two\n")
        assert list(small.chunks()) == [b"one\ntwo\n"]
    with dream_scratch.ScratchLines() as empty:
        assert list(empty.chunks()) == []


@pytest.mark.parametrize("chunk", [1, 700])
def test_a_run_appended_a_chunk_at_a_time_writes_what_main_wrote(memory, monkeypatch, tmp_path, chunk):
    """The golden memory's run (tests/test_dream_golden.py) with every step's L6 copies and
    audit records appended in many chunks: the same bytes in L5, L6 and the dream log."""
    monkeypatch.setenv("MEMCTL_IDS", str(tmp_path / "ids"))
    monkeypatch.setattr(dream_scratch, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(dream_apply, "STEP_CHANGES", 60)
    chunks = []
    original = dream_scratch.ScratchLines.chunks

    def counted(self):
        for chunk in original(self):
            chunks.append(len(chunk))
            yield chunk

    monkeypatch.setattr(dream_scratch.ScratchLines, "chunks", counted)
    report = dream.run(memory, NOW, dream.DreamOptions(force=True))
    assert (report.l5_before, report.l5_after, report.skipped) == (1821, 1417, 0)
    assert len(chunks) > 3 * report.steps  # the chunks were many
    digest = {name: hashlib.sha256((memory.layout.root / name).read_bytes()).hexdigest()
              for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")}
    assert digest == {"long_term.jsonl": L5_AFTER, "archive.jsonl": L6_AFTER, "dream_log.jsonl": LOG_AFTER[60]}


def _line(entry_id: str, text: str) -> bytes:
    return json.dumps({"id": entry_id, "text": text}).encode() + b"\n"


@pytest.mark.parametrize("alike", [False, True])
def test_planned_digests_tell_each_planned_line(monkeypatch, alike):
    """Every id's planned line matches, nothing else does — also when every id hashes alike."""
    if alike:
        monkeypatch.setattr(dream_apply, "id_key", lambda entry_id: 7)
    planned = Planned()
    ids = [f"m{k}" for k in range(50)]
    for entry_id in sorted(ids, key=dream_apply.id_key):
        planned.hashes.append(dream_apply.id_key(entry_id))
        planned.digests += line_digest(_line(entry_id, f"text {entry_id}"))
    for entry_id in ids:
        assert planned.matches(entry_id, _line(entry_id, f"text {entry_id}"))
        assert not planned.matches(entry_id, _line(entry_id, "changed since"))
    assert not planned.matches("other", _line("other", "text other"))
    planned.update([("m3", line_digest(_line("m3", "folded"))), ("new", line_digest(_line("new", "x")))])
    assert planned.matches("m3", _line("m3", "folded"))
    assert planned.matches("m4", _line("m4", "text m4"))
    if not alike:  # an id in no change of the plan is not kept (alike: beside the others, never asked)
        assert not planned.matches("new", _line("new", "x"))


@pytest.mark.parametrize("alike", [False, True])
def test_a_run_whose_ids_all_hash_alike_writes_what_main_wrote(memory, monkeypatch, tmp_path, alike):
    monkeypatch.setenv("MEMCTL_IDS", str(tmp_path / "ids"))
    if alike:
        monkeypatch.setattr(dream_apply, "id_key", lambda entry_id: len(entry_id) % 2)
    report = dream.run(memory, NOW, dream.DreamOptions(force=True))
    assert (report.l5_before, report.l5_after, report.skipped) == (1821, 1417, 0)
    assert hashlib.sha256((memory.layout.root / "long_term.jsonl").read_bytes()).hexdigest() == L5_AFTER


# a dream in a real process whose appends are cut into chunks of 200 bytes (the constant set
# before the command runs): a kill at any write of it must lose nothing
CHUNKED = ("import sys; from memctl.longterm import dream_scratch; dream_scratch.CHUNK_BYTES = 200; "
           "import memctl.entry; sys.argv[0] = 'memctl'; sys.exit(memctl.entry.main())")


def _chunked(root, env):
    return subprocess.run([sys.executable, "-c", CHUNKED, "--root", str(root), "dream", "--force"],
                          capture_output=True, env=clean_env(**env), timeout=120)


def test_a_dream_cut_off_between_two_chunks_loses_nothing(forked, tmp_path):
    """Every write of a chunked dream, in turn, torn and the process killed there; the next
    writer rolls the step back or finishes it, the dream run again completes, and every entry
    is in L5 or L6 with its text, once."""
    entries = dream_entries()
    ack = {e.id: e.text for e in entries}
    killed_at = 0
    for number in range(1, 60):
        root = tmp_path / f"m{number}"
        root.mkdir()
        assert forked("init", root=root).returncode == 0
        seed(root, entries)
        cut = _chunked(root, {**ENV, "MEMCTL_FAULT_WRITE": f"{number}:torn"})
        if cut.returncode == 0:
            break
        assert cut.returncode == -9, cut.stderr
        killed_at = number
        assert forked("remember", "grass is green", "-t", "event", root=root, env=ENV).returncode == 0
        again = forked("dream", "--force", root=root, env=ENV)
        assert again.returncode == 0, again.stderr
        present_once(root, ack)
        assert {"a", "b", "c", "old", "v1"}.isdisjoint(e["id"] for e in l5(root))
        lines_of(root / "dream_log.jsonl")
        assert all("id" in e for e in l6(root))
    assert killed_at > 8  # the run wrote its chunks (many writes) before it could finish


def test_lean_rows_numbers_widen_past_four_gib():
    from array import array

    from memctl.longterm.dream_rows import _appended

    numbers = _appended(array("I", [1, 2]), 2**32 - 1)
    assert numbers.typecode == "I"
    wide = _appended(numbers, 2**32 + 5)
    assert wide.typecode == "q" and list(wide) == [1, 2, 2**32 - 1, 2**32 + 5]


def test_chunks_that_are_not_whole_lines_leave_the_file_as_it_was(tmp_path):
    from memctl.core.jsonl import append_line_chunks

    path = tmp_path / "archive.jsonl"
    path.write_bytes(b'{"id": "a"}\n')
    assert append_line_chunks(path, [b'{"id": "b"}\n', b'{"id": "c"}\n'], tmp_path / "torn") == 12
    with pytest.raises(ValueError):
        append_line_chunks(path, [b'{"id": "d"}\n', b'{"id": "e"'], tmp_path / "torn")
    assert path.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n'
