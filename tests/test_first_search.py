"""A first search as fast as the second (issue #31): `import`, `archive` and `learn` leave the
index complete even in a memory that had none, so the search after them does no indexing work
(the index file is the same bytes before and after it); `remember` and `turn` start the build
in the background; a build killed half-way is repaired by the next command."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from conftest import SAMPLES
from l4_helpers import make_folder
from memctl.l4 import loggen

WORD = "quetzalfrob"


def index_path(root: Path) -> Path:
    return root / ".memctl" / "index.sqlite"


def index_state(root: Path) -> tuple[dict[str, int], str, str]:
    """(items per layer, the `items` meta, a digest of the index's files) — or raises when the
    index is not there."""
    path = index_path(root)
    assert path.exists(), "no index"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        layers = dict(db.execute("SELECT layer, count(*) FROM items GROUP BY layer").fetchall())
        meta = db.execute("SELECT value FROM meta WHERE key='items'").fetchone()[0]
    db.close()
    digest = hashlib.sha256()
    for part in sorted(path.parent.glob("index.sqlite*")):  # the file and any journal beside it
        digest.update(part.name.encode() + part.read_bytes())
    return layers, meta, digest.hexdigest()


def import_lines(count: int) -> bytes:
    return "".join(json.dumps({"id": f"imp{n}", "text": f"the gazebo number {n} was painted {WORD}"}) + "\n"
                   for n in range(count)).encode()


def first_search_changes_nothing(run, root: Path, query: str) -> None:
    before = index_state(root)
    found = run("search", query, "--json", root=root)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip()
    assert index_state(root) == before  # the search read the index as the write left it


def test_import_into_a_memory_without_an_index_leaves_it_complete(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    assert not index_path(root).exists()
    done = run("import", "-", "--layer", "L5", root=root, input=import_lines(300))
    assert done.returncode == 0, done.stderr
    layers, meta, _ = index_state(root)  # before any search
    assert layers == {"L5": 300} and meta == "300"
    first_search_changes_nothing(run, root, WORD)
    second = run("import", "-", "--layer", "L5", root=root, input=b'{"text": "a kumquat line"}\n')
    assert second.returncode == 0, second.stderr
    assert index_state(root)[0] == {"L5": 301}  # an index that exists is refreshed, as before
    first_search_changes_nothing(run, root, "kumquat")


def test_archive_into_a_memory_without_an_index_leaves_it_complete(run, tmp_path):
    folder = make_folder(tmp_path)
    (folder.root / ".memctl").mkdir()
    rng = random.Random(3)
    for number in range(3):
        text = loggen.format_a(datetime(2026, 4, 5 + number, 9, 0), 4, rng).replace("\n", f" {WORD}\n", 3)
        folder.add_log(f"model_responses_{number}.txt", text)
    done = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["new_sessions"] == 3
    layers, _, _ = index_state(folder.root)
    assert layers.get("L4", 0) > 0
    first_search_changes_nothing(run, folder.root, WORD)


def test_learn_into_a_memory_without_an_index_leaves_it_complete(run, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for path in SAMPLES.glob("model_responses_*.txt"):
        shutil.copyfile(path, raw / path.name)
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    assert run("archive", raw, "--min-age", "0s", "--keep-newest", "0", root=root).returncode == 0
    index_path(root).unlink()  # a memory whose index is gone (derived: nothing is lost)
    learned = run("learn", "--json", root=root, env={"MEMCTL_NOW": "2026-12-05T10:00:00"})
    assert learned.returncode == 0, learned.stderr
    assert json.loads(learned.stdout)["learned"] > 0
    entries = [json.loads(line) for line in (root / "long_term.jsonl").read_text().splitlines() if line.strip()]
    assert entries
    layers, _, _ = index_state(root)
    assert layers.get("L5") == len(entries) and layers.get("L4", 0) > 0
    refreshed = run("index", "refresh", root=root)
    assert b"+0 -0 item(s) from 0 changed source(s)" in refreshed.stderr + refreshed.stdout


def test_a_build_killed_half_way_is_repaired_by_the_next_command(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    killed = run("import", "-", "--layer", "L5", root=root, input=import_lines(50),
                 env={"MEMCTL_FAULT_AT": "index-build"})
    assert killed.returncode == -9
    assert len((root / "long_term.jsonl").read_text().splitlines()) == 50  # the import itself is whole
    assert not index_path(root).exists()
    assert list((root / ".memctl").glob(".index.sqlite.*.tmp"))  # the build's half-made file
    found = run("search", WORD, "--json", "-k", "100", root=root)
    assert found.returncode == 0, found.stderr
    assert len(found.stdout.splitlines()) == 50
    assert index_state(root)[0] == {"L5": 50}
    assert not list((root / ".memctl").glob(".index.sqlite.*.tmp"))  # swept by that build


def wait_for_index(root: Path) -> None:
    deadline = time.monotonic() + 120  # bounded: the detached build
    while not index_path(root).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert index_path(root).exists(), "no background build"


def test_remember_into_a_big_memory_without_an_index_builds_it_in_the_background(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    history = root / "L4_raw_sessions" / "all_histories.txt"  # 5 MB: past the default 4 MB
    line = f"[USER]: the deploy of the {WORD} cluster went out on friday afternoon\n"
    history.write_text(line * (5_000_000 // len(line) + 1), encoding="utf-8")
    done = run("remember", "-t", "event", "the canary goes first", root=root)
    assert done.returncode == 0, done.stderr
    wait_for_index(root)
    found = run("search", "canary", "--json", root=root)  # waits for the build's lock if it still holds it
    assert found.returncode == 0, found.stderr
    layers = index_state(root)[0]
    assert layers["L5"] == 1 and layers["L4"] > 0


def test_a_turn_into_a_memory_without_an_index_builds_it_in_the_background(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    with open(root / "memctl.toml", "a", encoding="utf-8") as config:
        config.write("\n[index]\nbackground_build_bytes = 0\n")  # every memory counts as big
    (root / "long_term.jsonl").write_text(json.dumps({"id": "m1", "type": "event", "text": f"the {WORD} goes first",
                                                      "created": "2026-01-01T00:00:00"}) + "\n", encoding="utf-8")
    message = json.dumps({"role": "user", "content": "I moved to Lisbon last spring."}) + "\n"
    done = run("turn", "--session", "s1", root=root, input=message.encode())
    assert done.returncode == 0, done.stderr
    wait_for_index(root)
    found = run("search", WORD, "--json", root=root)
    assert found.returncode == 0, found.stderr
    assert index_state(root)[0]["L5"] >= 1
