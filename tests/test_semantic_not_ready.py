"""A resident searcher that cannot get ready (memctl.recall.embeddings.semantic_unready): it leaves a record
in `.memctl/`, and the fused searches of that root start no other searcher while nothing it
depended on changed and the back-off has not passed; every search still exits 0 with its lexical
results and one warning. A record that is corrupt, huge, of another identity or not a plain file
is ignored. Starts are counted by the failing searchers' lines in `.memctl/semantic.log`; after
each search the test waits for the lock every started searcher holds until it exits.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from test_semantic import E5_CONFIG, PARAPHRASE
from test_semantic_helper import MULTILINGUAL, embedded_memory
from test_semantic_resident import SERVED, _log, _served, _serving, _stop, _wait_for

from memctl.residents import local_socket
from memctl.recall.embeddings import semantic_unready

needs_searcher = pytest.mark.skipif(not (MULTILINGUAL and local_socket.usable()),
                                    reason="needs the multilingual model and Unix sockets with SO_PEERCRED")
QUERY = "faucet washer"  # "tap" is its lexical match


@pytest.fixture
def broken(run, root):
    """An embedded memory whose memctl.toml names an empty model directory."""
    embedded_memory(run, root)
    model = root.parent / "model"
    model.mkdir()
    (root / "memctl.toml").write_text(f'[semantic]\nmodel = "{model}"\n')
    yield root
    _stop(root)


def _search(run, root: Path, **env: str) -> None:
    """One fused search, lexical results and one warning; returns when any searcher it started
    has exited (a started searcher holds semantic.lock until then)."""
    done = run("search", "--layers", "L6", "--json", QUERY, root=root, env={**SERVED, **env})
    ids = [json.loads(line)["id"] for line in done.stdout.decode().splitlines()]
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 0 and ids[:1] == ["tap"], (done.returncode, ids, lines)
    assert len(lines) == 1 and lines[0].startswith("warning: semantic search skipped: "), lines
    _stop(root)


def _starts(root: Path) -> int:
    return _log(root).count("\texited: not ready: ")


def _record(root: Path) -> Path:
    return root / ".memctl" / semantic_unready.RECORD_NAME


def _later(minutes: int) -> str:
    return (datetime.now() + timedelta(minutes=minutes)).isoformat(timespec="seconds")


@needs_searcher
def test_searches_start_one_doomed_searcher_within_the_back_off(run, broken):
    for _ in range(4):
        _search(run, broken)
    assert _starts(broken) == 1
    record = json.loads(_record(broken).read_text())
    assert record["model"] == str(broken.parent / "model") and "config.json" in record["reason"]
    assert _record(broken).stat().st_mode & 0o777 == 0o600
    _search(run, broken, MEMCTL_NOW=_later(5))  # the clock moved, not past the back-off
    assert _starts(broken) == 1


@needs_searcher
def test_the_back_off_passing_starts_one_again(run, broken):
    _search(run, broken)
    _search(run, broken, MEMCTL_NOW=_later(11))
    assert _starts(broken) == 2
    _search(run, broken, MEMCTL_NOW=_later(12))  # the second one's record counts from its own clock
    assert _starts(broken) == 2
    _search(run, broken, MEMCTL_NOW=_later(-60))  # a record from the future (the clock went back): ignored
    assert _starts(broken) == 3


@needs_searcher
def test_a_changed_model_directory_starts_one_again(run, broken):
    model = broken.parent / "model"
    _search(run, broken)
    (model / "config.json").write_text('{"model_type": "gpt2"}')  # still no model: another reason
    _search(run, broken)
    _search(run, broken)
    assert _starts(broken) == 2
    with open(model / "config.json", "r+") as handle:  # rewritten in place: the folder's own stat unchanged
        handle.write('{"model_type": "gpt3"}')
    _search(run, broken)
    assert _starts(broken) == 3
    assert "gpt3" in json.loads(_record(broken).read_text())["reason"]


@needs_searcher
def test_a_changed_vector_store_starts_one_again(run, broken):
    """An embedding pass's write (here a change of the file's mtime alone, as a write makes)."""
    _search(run, broken)
    store = broken / ".memctl" / "vectors.sqlite"
    written = store.stat().st_mtime_ns + 1_000_000_000
    os.utime(store, ns=(written, written))
    _search(run, broken)
    _search(run, broken)
    assert _starts(broken) == 2


@needs_searcher
def test_a_fixed_model_gets_a_searcher_that_serves_and_clears_the_record(run, broken):
    _search(run, broken)
    assert _record(broken).exists()
    (broken / "memctl.toml").write_text(E5_CONFIG)
    first = run("search", "--layers", "L6", "--json", PARAPHRASE, root=broken, env=SERVED)
    assert first.returncode == 0 and first.stderr == b""
    _wait_for(lambda: _serving(broken), "the searcher of the fixed model")
    assert not _record(broken).exists()
    second = run("search", "--layers", "L6", "--json", PARAPHRASE, root=broken, env=SERVED)
    _stop(broken)
    assert second.stdout == first.stdout and second.stderr == b""
    assert _served(broken) == 1 and _starts(broken) == 1


def _hostile_records(root: Path, valid: bytes) -> dict:
    """name -> how to plant it: each would hold the searches back if it were read as a record."""
    elsewhere = root.parent / "elsewhere.json"

    def symlink(path: Path) -> None:
        elsewhere.write_bytes(valid)  # a current record: following the link would hold back
        path.symlink_to(elsewhere)

    body = json.loads(valid)
    return {
        "truncated": lambda path: path.write_bytes(valid[:len(valid) // 2]),
        "binary": lambda path: path.write_bytes(b"\x00\xff\xfe" * 300),
        "huge": lambda path: path.write_bytes(valid.rstrip() + b" " * semantic_unready.MAX_RECORD_BYTES),
        "symlink": symlink,
        "fifo": lambda path: os.mkfifo(path, 0o600),
        "wrong types": lambda path: path.write_text(json.dumps({**body, "at": str(body["at"])})),
        "not an object": lambda path: path.write_text(json.dumps([body])),
        "another identity": lambda path: path.write_text(json.dumps({**body, "identity": "0.0.0\nelse"})),
    }


@needs_searcher
def test_a_corrupt_or_hostile_record_is_ignored(run, broken):
    _search(run, broken)
    valid = _record(broken).read_bytes()
    for count, (kind, plant) in enumerate(_hostile_records(broken, valid).items(), start=2):
        _record(broken).unlink()
        plant(_record(broken))
        _search(run, broken)
        assert _starts(broken) == count, kind
        assert _record(broken).is_file() and not _record(broken).is_symlink(), kind  # rewritten in its place
    assert (broken.parent / "elsewhere.json").read_bytes() == valid  # never written through the link
    _search(run, broken)
    assert _starts(broken) == count


# --- the record's rules, in this process


def test_a_record_holds_back_only_its_identity_and_model_within_the_back_off(tmp_path):
    root = str(tmp_path)
    (tmp_path / ".memctl").mkdir()
    model = tmp_path / "model"
    model.mkdir()
    depends = semantic_unready.stamps([str(model), str(tmp_path / "vectors.sqlite")])
    semantic_unready.record(root, "me", str(model), depends, "cannot load\nthe model")
    found = semantic_unready.holds_back(root, "me", str(model))
    assert found is not None and found.reason == "cannot load the model"
    assert semantic_unready.holds_back(root, "someone else", str(model)) is None
    assert semantic_unready.holds_back(root, "me", "another-model") is None
    at = found.at
    assert semantic_unready.holds_back(root, "me", str(model), at=at + 599) is not None
    assert semantic_unready.holds_back(root, "me", str(model), at=at + 1, backoff=0) is None
    assert semantic_unready.holds_back(root, "me", str(model), at=at + semantic_unready.BACKOFF_SECONDS) is None
    assert semantic_unready.holds_back(root, "me", str(model), at=at - 1) is None  # from the future
    (tmp_path / "vectors.sqlite").write_bytes(b"")  # a store appeared where there was none
    assert semantic_unready.holds_back(root, "me", str(model), at=at) is None


def test_a_cleared_record_holds_nothing_back(tmp_path):
    root = str(tmp_path)
    (tmp_path / ".memctl").mkdir()
    semantic_unready.record(root, "me", "", [], "broken")
    assert semantic_unready.holds_back(root, "me", "") is not None
    semantic_unready.clear(root)
    semantic_unready.clear(root)  # nothing there: no error
    assert semantic_unready.holds_back(root, "me", "") is None


def test_an_identity_with_undecodable_bytes_holds_back_alike(tmp_path):
    root = str(tmp_path)
    (tmp_path / ".memctl").mkdir()
    identity = "0.1.0\n" + os.fsdecode(b"/memories/\xff\xfe")  # a root path that is not UTF-8
    semantic_unready.record(root, identity, "", [], "broken")
    assert semantic_unready.holds_back(root, identity, "") is not None


def test_a_symlinked_state_folder_is_neither_read_nor_written(tmp_path):
    from memctl.core.errors import UnsafePath

    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / ".memctl").symlink_to(real)
    root = str(tmp_path / "root")
    with pytest.raises(UnsafePath, match="is not a real folder"):
        semantic_unready.record(root, "me", "", [], "broken")
    assert list(real.iterdir()) == []
    (tmp_path / "good" / ".memctl").mkdir(parents=True)
    semantic_unready.record(str(tmp_path / "good"), "me", "", [], "broken")
    current = (tmp_path / "good" / ".memctl" / semantic_unready.RECORD_NAME).read_bytes()
    (real / semantic_unready.RECORD_NAME).write_bytes(current)
    assert semantic_unready.holds_back(str(tmp_path / "good"), "me", "") is not None
    assert semantic_unready.holds_back(root, "me", "") is None  # the same record, but through the link
    semantic_unready.clear(root)
    assert (real / semantic_unready.RECORD_NAME).read_bytes() == current


def test_a_relative_model_directory_is_taken_from_the_root_in_every_process():
    from memctl.recall.embeddings import e5
    from memctl.recall.ranking.ranking import model_from_root

    assert model_from_root("models/bge", "/srv/memory") == "/srv/memory/models/bge"
    assert model_from_root("/opt/bge", "/srv/memory") == "/opt/bge"
    assert model_from_root(e5.NAME, "/srv/memory") == e5.NAME and model_from_root("", "/srv/memory") == ""
    assert model_from_root("~/bge", "/srv/memory") == os.path.expanduser("~/bge")


@needs_searcher
def test_a_relative_model_directory_means_the_same_one_from_any_working_directory(run, root, tmp_path):
    """Before, the search read it from its working directory and the searcher (which works from
    "/") from "/": the two named different directories."""
    embedded_memory(run, root)
    (root / "memctl.toml").write_text('[semantic]\nmodel = "models/none"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        done = run("search", "--layers", "L6", QUERY, root=root, env=SERVED, cwd=elsewhere)
        assert done.returncode == 0, done.stderr
        assert str(root / "models" / "none") in done.stderr.decode(), done.stderr
        _stop(root)
        assert str(root / "models" / "none") in _log(root)  # the searcher tried the same one
    finally:
        _stop(root)
