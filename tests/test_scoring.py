"""bm25 computed in Python (the large-memory path) agrees with FTS5's own bm25(), and a large
memory's search ranks items as a small memory's does."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from memctl.recall.ranking import tuning as search  # the ranking's numbers, read by every stage
from memctl.core.config import Layout, init_root
from memctl.recall.indexing.index import FTS_TOKENIZE
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.indexing.scoring import fts_totals, idf_weights, score_bodies
from memctl.recall.search import SearchRequest, Searcher

WORDS = [f"w{i}" for i in range(60)] + ["部署", "证书", "bk-02", "v3"]


def random_bodies(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    bodies = []
    for _ in range(count):
        vocabulary = WORDS[: rng.randint(4, len(WORDS))]
        tokens = [rng.choice(vocabulary) for _ in range(rng.randint(1, 60))]
        if rng.random() < 0.2:  # adjacent repeats: the case a plain substring count gets wrong
            tokens[0:0] = [tokens[0]] * rng.randint(1, 3)
        bodies.append(" ".join(tokens))
    return bodies


def fts_table(bodies: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute(f'CREATE VIRTUAL TABLE fts USING fts5(body, tokenize="{FTS_TOKENIZE}")')
    db.executemany("INSERT INTO fts(rowid, body) VALUES(?, ?)", list(enumerate(bodies, 1)))
    return db


@pytest.mark.parametrize("query", [["w1"], ["w1", "w7", "w30"], ["部署", "bk-02"], ["w0", "w2", "v3", "w59"]])
def test_python_bm25_equals_fts5_bm25(query):
    bodies = random_bodies(7, 800)
    db = fts_table(bodies)
    expected = dict(db.execute("SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ?",
                               (" OR ".join(f'"{t}"' for t in query),)).fetchall())
    rows, terms = fts_totals(db, "fts")
    assert (rows, terms) == (len(bodies), sum(len(b.split()) for b in bodies))
    dfs = {t: sum(1 for b in bodies if t in b.split()) for t in query}
    got = score_bodies(list(enumerate(bodies, 1)), idf_weights(dfs, rows), terms / rows)
    assert expected and set(got) == set(expected)
    assert max(abs(got[r] - expected[r]) for r in expected) < 1e-9


def test_totals_of_a_missing_or_empty_table_are_zero():
    db = sqlite3.connect(":memory:")
    assert fts_totals(db, "nothing") == (0, 0)
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(body)")
    assert fts_totals(db, "fts") == (0, 0)
    assert score_bodies([(1, "")], {"a": 1.0}, 0.0) == {}


@pytest.fixture()
def memory(tmp_path: Path) -> Layout:
    """600 L5 entries in 60 sessions: a few hold a rare word, most a common one."""
    layout = Layout(tmp_path / "memory")
    init_root(layout.root)
    rng = random.Random(3)
    common = ["deploy", "server", "cluster", "backup", "restore", "proxy", "cache", "queue"]
    lines = []
    for i in range(600):
        words = rng.sample(common, 3) + [f"filler{rng.randint(0, 40)}" for _ in range(rng.randint(2, 12))]
        if i % 97 == 5:
            words.append("zanzibar")
        lines.append({"id": f"e{i:03d}", "type": "lesson", "text": " ".join(words), "session": f"s{i // 10}",
                      "date": f"2026-0{1 + i % 9}-01T00:00:00"})
    layout.long_term.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return layout


def ranked(layout: Layout, query: str, k: int = 10, **weights: float) -> list[tuple[str, float]]:
    searcher = Searcher(layout, ranking=Ranking(**weights))
    try:
        return [(h.item_id, h.score) for h in searcher.search(SearchRequest(query, k=k, layers=("L5",)))]
    finally:
        searcher.close()


def large_memory_path(monkeypatch, newest: int = 10_000) -> None:
    """Make a 600-item memory take the path a memory of millions takes."""
    monkeypatch.setattr(search, "SMALL_INDEX_ITEMS", 0)
    monkeypatch.setattr(search, "RANK_ALL_LIMIT", 10)  # "zanzibar" (7 items) is rare, the rest common
    monkeypatch.setattr(search, "SMALL_SESSION_DOCS", 0)
    monkeypatch.setattr(search, "NEWEST_MATCHES", newest)


@pytest.mark.parametrize("query", ["zanzibar", "deploy zanzibar", "backup restore proxy", "filler7 cache"])
def test_large_memory_path_ranks_items_as_the_small_path(memory, monkeypatch, query):
    items_only = {"session_weight": 0.0, "session_prior": 0.0, "neighbour_weight": 0.0,
                  "feedback_weight": 0.0}  # sessions differ at scale
    small = ranked(memory, query, **items_only)
    large_memory_path(monkeypatch)
    large = ranked(memory, query, **items_only)
    assert small and [i for i, _ in large] == [i for i, _ in small]
    assert all(abs(a[1] - b[1]) < 1e-9 for a, b in zip(large, small))


def test_large_memory_path_finds_every_rare_match_and_the_newest_common_ones(memory, monkeypatch):
    large_memory_path(monkeypatch, newest=3)
    rare = {f"e{i:03d}" for i in range(600) if i % 97 == 5}
    # only the candidates: no neighbouring turns, no items lifted by their session's best match
    found = [i for i, _ in ranked(memory, "deploy zanzibar", k=50, neighbour_weight=0.0, feedback_weight=0.0)]
    assert set(found[:len(rare)]) == rare  # every item with the rare word, ranked first
    others = found[len(rare):]
    assert others and len(others) <= 3 and all(int(i[1:]) >= 550 for i in others)  # the newest common matches
