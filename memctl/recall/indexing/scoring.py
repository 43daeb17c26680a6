"""BM25 computed in Python, agreeing with SQLite FTS5's own `bm25()`, for large indexes.

FTS5's `bm25()` computes each query term's IDF by walking every row that contains the term,
once per statement. For a word in 40% of 1.4 million items that walk alone costs ~90 ms, and
it grows with the memory — the one cost of a query that is not flat in corpus size. Here the
IDF comes from the index's own document frequencies (the `vocab` table), and the term
frequencies and lengths from the candidates' indexed bodies (space-separated terms), so the
cost follows the number of candidates, not the size of the memory.

Same formula and constants as FTS5 (fts5_aux.c): k1 = 1.2, b = 0.75,
idf = log((N - df + 0.5) / (df + 0.5)) floored at 1e-6, length = terms in the row.
"""

from __future__ import annotations

import math
import sqlite3

TYPE_CHECKING = False  # typing costs ~7 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable, Mapping, Sequence

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6


def idf_weights(dfs: Mapping[str, int], rows: int) -> dict[str, float]:
    weights = {}
    for term, df in dfs.items():
        if df:
            ratio = (rows - df + 0.5) / (df + 0.5)
            weights[term] = max(math.log(ratio), MIN_IDF) if ratio > 0 else MIN_IDF
    return weights


def score_bodies(bodies: Iterable[tuple[object, str]], idf: Mapping[str, float],
                 average_length: float, covers: Mapping[str, Sequence[str]] | None = None) -> dict[object, float]:
    """{key: bm25} for each (key, body) matching at least one term; body = terms joined by spaces.
    `covers`: term -> the longer query terms that hold it; the term counts only in a body that
    holds none of them (a piece backs off to its word: memctl.recall.indexing.text.piece_covers)."""
    covers = covers or {}
    needles = [(f" {term} ", f" {term} {term} ", weight, [f" {c} " for c in covers.get(term, ())])
               for term, weight in idf.items()]
    average_length = average_length or 1.0
    scores: dict[object, float] = {}
    for key, body in bodies:
        if not body:
            continue
        padded = f" {body} "
        norm = K1 * (1 - B + B * (body.count(" ") + 1) / average_length)
        score = 0.0
        for needle, repeated, weight, wholes in needles:
            if wholes and any(whole in padded for whole in wholes):
                continue
            tf = padded.count(needle)
            if tf and repeated in padded:  # str.count does not overlap: "a a" holds " a " once
                tf = padded.split().count(needle.strip())
            if tf:
                score += weight * tf * (K1 + 1) / (tf + norm)
        if score:
            scores[key] = score
    return scores


def fts_totals(db: sqlite3.Connection, table: str) -> tuple[int, int]:
    """(rows, terms) of an FTS5 table, read from its averages record (the numbers its bm25()
    uses); (0, 0) if the record cannot be read."""
    try:
        row = db.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    except sqlite3.DatabaseError:
        return 0, 0
    if not row or not row[0]:
        return 0, 0
    block = bytes(row[0])
    rows, at = _varint(block, 0)
    terms, _ = _varint(block, at)
    return rows, terms


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint: big-endian 7-bit groups, high bit = more follows; a 9th byte has 8 bits."""
    value = 0
    for i in range(8):
        if at + i >= len(data):
            return value, len(data)
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    if at + 8 < len(data):
        value = (value << 8) | data[at + 8]
    return value, at + 9



class TermWeights(dict):
    """term -> how much it counts (Ranking.term_weights), and `covers`: the query's Chinese
    pieces that back off to the longer query words holding them (memctl.recall.indexing.text.piece_covers;
    empty when [ranking] piece_backoff is off), and `asides`: the terms only in the sentences
    around the query's question (memctl.recall.ranking.focus), which a cut of the terms keeps last."""

    def __init__(self, weights: Mapping[str, float], covers: Mapping[str, Sequence[str]] | None = None,
                 asides: frozenset[str] = frozenset()):
        super().__init__(weights)
        self.covers = dict(covers or {})
        self.asides = asides
