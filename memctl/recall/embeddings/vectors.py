"""The item vectors of the [semantic] extra: `.memctl/vectors.sqlite`, derived like the index.

- `cache(hash, vec)`: one float16 vector per distinct item text (blake2b of the text), so a
  rebuilt index, whose rowids all change, costs no embedding at all.
- `items(rowid, hash, list)`: which vector each index row has, and its IVF list.
- `context(rowid, hash)`: the vector of the item read after the turn before it in its session
  (memctl.recall.embeddings.semantic.context_text), in the same cache: a reply ("Yes, twice last year")
  means what the turn it answers asked. A search takes each row's cosine as a mix of the two
  (`[ranking] semantic_context`).
- `centroids(list, vec)`: k-means centroids over the vectors, trained once the memory holds more
  than `[semantic] scan_below` of them (and again when it has doubled since). A search then
  compares the query with the centroids and reads only the `probe_lists` closest lists: bounded
  work however large the memory; below that size it compares every vector.
- `probe(list, rowid, hash, vec, inctx)`: what a search reads, each row's own and in-context
  vectors clustered by IVF list (primary key (list, rowid), WITHOUT ROWID), so the lists a query
  probes are a few contiguous runs of pages, not one random lookup into `cache` per row (at 1.37M
  vectors: 56-71 ms for 8 lists instead of 452-509). Derived from items/context/cache: every
  writer below re-lays the rows it touches (`_relay`), and `cache` stays the store of record,
  keyed by text, so that a rebuilt index whose rowids all change still costs no embedding (the
  price: each row's vectors are on disk twice).
- `meta`: the model the vectors came from (another model means starting over) and the store's
  FORMAT. Format 2 (no `probe`) is read the old way until an embedding pass has laid it out
  (`lay_out`: list by list, committed as it goes, so a killed pass loses nothing and the next
  continues at `laid_lists`); format 1 has its rows assigned again (the cached vectors are kept).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np

from memctl.core import faults
from memctl.recall.embeddings.text_hashing import text_hash  # noqa: F401 -- the store's key, imported from here by the pass and benches

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS cache(hash BLOB PRIMARY KEY, vec BLOB) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS items(rowid INTEGER PRIMARY KEY, hash BLOB, list INTEGER);
CREATE INDEX IF NOT EXISTS items_list ON items(list);
CREATE TABLE IF NOT EXISTS centroids(list INTEGER PRIMARY KEY, vec BLOB);
CREATE TABLE IF NOT EXISTS context(rowid INTEGER PRIMARY KEY, hash BLOB);
CREATE TABLE IF NOT EXISTS probe(list INTEGER, rowid INTEGER, hash BLOB, vec BLOB, inctx BLOB,
                                 PRIMARY KEY(list, rowid)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS probe_rowid ON probe(rowid);
"""
FORMAT = "3"  # 2: rows have in-context vectors too (`context`); 3: the `probe` table, clustered by list
LAID_OUT_FROM = "2"  # the format `lay_out` turns into FORMAT (older ones are assigned again)
_ROWS = ("SELECT items.rowid, items.hash, cache.vec, inctx.vec FROM items JOIN cache USING(hash) "
         "LEFT JOIN context ON context.rowid = items.rowid LEFT JOIN cache AS inctx ON inctx.hash = context.hash")
_LAID = "SELECT rowid, hash, vec, inctx FROM probe"
_RELAY = f"INSERT OR REPLACE INTO probe SELECT items.list, {_ROWS.removeprefix('SELECT ')}"
MAPPED_BYTES = 1 << 40  # a one-query reader maps the whole file (only the probed lists' pages are read)
LAY_OUT_LISTS = 64  # lists re-laid per transaction by `lay_out` (~75,000 rows at 1.37M vectors)
KMEANS_SAMPLE = 50_000
KMEANS_ROUNDS = 8


def as_blob(vector: np.ndarray) -> bytes:
    return vector.astype(np.float16).tobytes()


def from_blobs(blobs: list[bytes], dim: int) -> np.ndarray:
    return np.frombuffer(b"".join(blobs), dtype=np.float16).reshape(len(blobs), dim).astype(np.float32)


def model_identity(encoder) -> str:
    """What a store's vectors were made with: the encoder's own name for a packaged model (so a
    new venv or a moved install reuses them), else its model folder."""
    return getattr(encoder, "identity", "") or str(encoder.model_dir)


def same_model(stored: str, identity: str) -> bool:
    """`stored` names the model `identity` names; a store written before identities were names
    kept the packaged model's install path, whose last part is the identity."""
    if stored == identity:
        return True
    return "/" not in identity and "\\" not in identity and stored.replace("\\", "/").rsplit("/", 1)[-1] == identity


class VectorStore:
    """One memory's vectors; opened by the embedding pass (writes) and by a search (reads)."""

    def __init__(self, path: Path, readonly: bool = False, one_query: bool = False):
        """`one_query`: a reader that probes once and exits (the forked helper of a one-shot
        search) reads a laid-out store's pages mapped, not copied (~10 ms of CPU less a probe at
        1.37M vectors). Not a reader of many queries: every list it ever probed would stay mapped
        in its RSS (and the old format's random lookups mapped 1.2-1.7 GB of readahead)."""
        self.path = Path(path)
        uri = f"file:{self.path}?mode=ro" if readonly else str(self.path)
        self.db = sqlite3.connect(uri, uri=readonly, timeout=5.0, isolation_level=None)
        if readonly and one_query and self.laid_out:
            self.db.execute(f"PRAGMA mmap_size = {MAPPED_BYTES}")
        self._scanned = None  # a small store's every vector, read once per open store
        self.readonly = readonly
        self._centroids: list = []  # a search's: the centroids, read once per open store (as `_scanned`)
        if not readonly:
            self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    def meta(self, key: str, default: str = "") -> str:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, value))

    @property
    def dim(self) -> int:
        return int(self.meta("dim", "0") or 0)

    def count(self) -> int:
        return self.db.execute("SELECT count(*) FROM items").fetchone()[0]

    def count_below(self, rowid: int) -> int:
        """Rows with a vector whose rowid is under `rowid` (what a pass stopped early has not reached)."""
        return self.db.execute("SELECT count(*) FROM items WHERE rowid < ?", (rowid,)).fetchone()[0]

    def reset_for(self, model: str, dim: int) -> None:
        """Vectors of another model are useless: start over when the model changes. A store of
        an older FORMAT keeps its cached vectors and has every row assigned again."""
        if same_model(self.meta("model"), model) and self.meta("model") != model:
            self.set_meta("model", model)  # named by its install path before: the same model
        if self.meta("model") != model or self.dim != dim:
            self.db.executescript("DELETE FROM cache; DELETE FROM items; DELETE FROM context; DELETE FROM probe; "
                                  "DELETE FROM centroids; DELETE FROM meta;")
            self.set_meta("model", model)
            self.set_meta("dim", str(dim))
            self.set_meta("format", FORMAT)
        elif self.meta("format", "1") not in (FORMAT, LAID_OUT_FROM):
            self.db.executescript("DELETE FROM items; DELETE FROM context; DELETE FROM probe; DELETE FROM centroids; "
                                  "DELETE FROM meta WHERE key IN ('trained_at', 'laid_lists');")
            self.set_meta("format", FORMAT)

    @property
    def laid_out(self) -> bool:
        """Whether `probe` holds every row (format 3); a format-2 store is read by the old join."""
        return self.meta("format", "1") == FORMAT

    def lay_out(self, deadline: float | None = None) -> bool:
        """A format-2 store's `probe`, from its items, contexts and cache, LAY_OUT_LISTS lists a
        transaction in list order (appends to the clustered table), until done or `deadline`
        (time.monotonic) has passed after a step; the next call continues after `laid_lists`. Writes meanwhile
        re-lay their own rows, which the pass's INSERT OR REPLACE makes again the same. True once
        the store is format 3."""
        if self.laid_out:
            return True
        last = self.db.execute("SELECT max(list) FROM items").fetchone()[0]
        done = started = int(self.meta("laid_lists", "-1"))
        while last is not None and done < last:
            if deadline is not None and done > started and time.monotonic() >= deadline:
                return False  # after one step at least: every bounded pass makes progress
            self.db.execute("BEGIN")
            self.db.execute(f"{_RELAY} WHERE items.list BETWEEN ? AND ? ORDER BY items.list, items.rowid",
                            (done + 1, done + LAY_OUT_LISTS))
            done += LAY_OUT_LISTS
            self.set_meta("laid_lists", str(done))
            faults.checkpoint("vectors-lay-out")  # a kill test: this step's lists are laid again by the next pass
            self.db.execute("COMMIT")
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM meta WHERE key = 'laid_lists'")
        self.set_meta("format", FORMAT)
        self.db.execute("COMMIT")
        return True

    def _relay(self, rowids: list[int]) -> None:
        """`probe` made again for these rows from items, context and cache (gone rows: removed)."""
        for start in range(0, len(rowids), 900):
            part = rowids[start:start + 900]
            marks = ",".join("?" * len(part))
            self.db.execute(f"DELETE FROM probe WHERE rowid IN ({marks})", part)
            self.db.execute(f"{_RELAY} WHERE items.rowid IN ({marks})", part)

    # -- writing (the embedding pass)

    def known_hashes(self, hashes: list[bytes]) -> set[bytes]:
        found: set[bytes] = set()
        for start in range(0, len(hashes), 900):
            part = hashes[start:start + 900]
            found.update(h for (h,) in self.db.execute(
                f"SELECT hash FROM cache WHERE hash IN ({','.join('?' * len(part))})", part))
        return found

    def rows_between(self, low: int, high: int) -> dict[int, bytes]:
        return dict(self.db.execute("SELECT rowid, hash FROM items WHERE rowid BETWEEN ? AND ?", (low, high)))

    def add_cached(self, pairs: list[tuple[bytes, np.ndarray]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO cache(hash, vec) VALUES(?, ?)",
                            [(h, as_blob(v)) for h, v in pairs])

    def assign(self, rows: list[tuple[int, bytes]], relay: bool = True) -> None:
        """Index rows -> their vectors' hashes, each put in the list of its nearest centroid."""
        centroids = self.centroids()
        lists = [0] * len(rows)
        if centroids is not None and rows:
            vectors = self.vectors_of_hashes([h for _, h in rows])
            lists = [int(i) for i in np.argmax(vectors @ centroids.T, axis=1)]
        self.db.executemany("INSERT OR REPLACE INTO items(rowid, hash, list) VALUES(?, ?, ?)",
                            [(rowid, h, lst) for (rowid, h), lst in zip(rows, lists)])
        if relay:
            self._relay([rowid for rowid, _ in rows])

    def drop_rows(self, rowids: list[int]) -> None:
        self.db.executemany("DELETE FROM items WHERE rowid = ?", ((r,) for r in rowids))
        self.drop_context(rowids)

    def context_rows_between(self, low: int, high: int) -> dict[int, bytes]:
        return dict(self.db.execute("SELECT rowid, hash FROM context WHERE rowid BETWEEN ? AND ?", (low, high)))

    def context_hashes(self, rowids: list[int]) -> dict[int, bytes]:
        """rowid -> the hash of the text its in-context vector was made of, for those that have one."""
        found: dict[int, bytes] = {}
        for start in range(0, len(rowids), 900):
            part = rowids[start:start + 900]
            found.update(self.db.execute(f"SELECT rowid, hash FROM context WHERE rowid IN ({','.join('?' * len(part))})",
                                         part))
        return found

    def assign_context(self, rows: list[tuple[int, bytes]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO context(rowid, hash) VALUES(?, ?)", rows)
        self._relay([rowid for rowid, _ in rows])

    def drop_context(self, rowids: list[int]) -> None:
        self.db.executemany("DELETE FROM context WHERE rowid = ?", ((r,) for r in rowids))
        self._relay(list(rowids))

    def vectors_of_hashes(self, hashes: list[bytes]) -> np.ndarray:
        by_hash: dict[bytes, bytes] = {}
        for start in range(0, len(hashes), 900):
            part = hashes[start:start + 900]
            by_hash.update(self.db.execute(f"SELECT hash, vec FROM cache WHERE hash IN ({','.join('?' * len(part))})",
                                           part))
        return from_blobs([by_hash[h] for h in hashes], self.dim)

    def train_lists(self, scan_below: int) -> bool:
        """k-means centroids once the store is large (again when it has doubled); True if trained."""
        total = self.count()
        trained_at = int(self.meta("trained_at", "0") or 0)
        if total <= scan_below or (trained_at and total < 2 * trained_at):
            return False
        sample = [v for (v,) in self.db.execute(
            "SELECT vec FROM cache JOIN items USING(hash) ORDER BY random() LIMIT ?", (KMEANS_SAMPLE,))]
        centroids = kmeans(from_blobs(sample, self.dim), lists=max(16, int(total ** 0.5)))
        self.db.execute("DELETE FROM centroids")
        self.db.executemany("INSERT INTO centroids(list, vec) VALUES(?, ?)",
                            [(i, as_blob(c)) for i, c in enumerate(centroids)])
        rows = self.db.execute("SELECT rowid, hash FROM items").fetchall()
        for start in range(0, len(rows), 20_000):
            self.assign(rows[start:start + 20_000], relay=False)
        # every row may have moved: `probe` laid again whole, in list order (appends, not a random
        # insert a row), in the caller's transaction; a format-2 store is laid out here too
        self.db.execute("DELETE FROM probe")
        self.db.execute(f"{_RELAY} ORDER BY items.list, items.rowid")
        self.db.execute("DELETE FROM meta WHERE key = 'laid_lists'")
        self.set_meta("format", FORMAT)
        self.set_meta("trained_at", str(total))
        return True

    # -- reading (a search)

    def centroids(self) -> np.ndarray | None:
        if self._centroids:
            return self._centroids[0]
        blobs = [v for (v,) in self.db.execute("SELECT vec FROM centroids ORDER BY list")]
        centroids = from_blobs(blobs, self.dim) if blobs else None
        if self.readonly:
            self._centroids.append(centroids)
        return centroids

    def nearest(self, query: np.ndarray, limit: int, probe_lists: int,
                context: float = 0.0) -> list[tuple[int, bytes, float]]:
        """(rowid, text hash, cosine) of the closest vectors: every vector of a small store, the
        `probe_lists` lists closest to the query in a large one. `context` (0-1): each row's
        cosine is (1 - context) × its own vector's + context × its in-context vector's."""
        centroids = self.centroids()
        rows_of, by_list = (_LAID, "list") if self.laid_out else (_ROWS, "items.list")
        if centroids is None:
            if self._scanned is None:
                rows = self.db.execute(rows_of).fetchall()
                self._scanned = (rows, self._matrices(rows))
            return self._top(*self._scanned, query, limit, context)
        lists = [int(i) for i in np.argsort(-(centroids @ query))[:probe_lists]]
        rows = self.db.execute(f"{rows_of} WHERE {by_list} IN ({','.join('?' * len(lists))})", lists).fetchall()
        return self._top(rows, _blob_columns(rows), query, limit, context)

    def similarities(self, rowids: list[int], query: np.ndarray, context: float = 0.0) -> list[tuple[int, bytes, float]]:
        rows_of, by_rowid = (_LAID, "rowid") if self.laid_out else (_ROWS, "items.rowid")
        rows = []
        for start in range(0, len(rowids), 900):
            part = rowids[start:start + 900]
            rows += self.db.execute(f"{rows_of} WHERE {by_rowid} IN ({','.join('?' * len(part))})", part).fetchall()
        return self._top(rows, _blob_columns(rows), query, len(rows), context)

    def _matrices(self, rows) -> tuple | None:
        """The rows' own vectors, and the in-context vectors of the rows that have one with their
        positions (a row without one mixes its own cosine with itself: only these change)."""
        if not rows:
            return None
        own = from_blobs([own for _, _, own, _ in rows], self.dim)
        placed = [i for i, row in enumerate(rows) if row[3]]
        in_context = from_blobs([rows[i][3] for i in placed], self.dim) if placed else None
        return own, np.array(placed, dtype=np.intp), in_context

    def _top(self, rows, matrices, query: np.ndarray, limit: int, context: float) -> list[tuple[int, bytes, float]]:
        """`matrices`: (own, placed, in_context) as `_matrices` or `_blob_columns` make them."""
        if not rows:
            return []
        own, placed, in_context = matrices
        scores = _products(own, query, self.dim)
        if context and in_context is not None:
            scores[placed] = (1.0 - context) * scores[placed] + context * _products(in_context, query, self.dim)
        best = np.argsort(-scores)[:limit]
        return [(rows[i][0], rows[i][1], float(scores[i])) for i in best]


PRODUCT_ROWS = 1024  # float16 rows made float32 at a time for a probe's products


def _blob_columns(rows) -> tuple | None:
    """As VectorStore._matrices, with the vectors left as their float16 blobs (see _products)."""
    if not rows:
        return None
    placed = [i for i, row in enumerate(rows) if row[3]]
    return ([row[2] for row in rows], np.array(placed, dtype=np.intp),
            [rows[i][3] for i in placed] if placed else None)


def _products(vectors, query: np.ndarray, dim: int) -> np.ndarray:
    """vectors @ query, for a float32 matrix or a list of float16 blobs. Blobs are converted
    PRODUCT_ROWS at a time into one reused buffer: a one-shot search converting a probe's ~9,400
    rows into a fresh 14 MB matrix spent most of that step faulting its pages in (measured)."""
    if isinstance(vectors, np.ndarray):
        return vectors @ query
    scores = np.empty(len(vectors), dtype=np.float32)
    buffer = np.empty((min(PRODUCT_ROWS, len(vectors)), dim), dtype=np.float32)
    for start in range(0, len(vectors), PRODUCT_ROWS):
        part = vectors[start:start + PRODUCT_ROWS]
        block = buffer[:len(part)]
        block[...] = np.frombuffer(b"".join(part), dtype=np.float16).reshape(len(part), dim)
        np.matmul(block, query, out=scores[start:start + len(part)])
    return scores


def kmeans(vectors: np.ndarray, lists: int, rounds: int = KMEANS_ROUNDS, seed: int = 7) -> np.ndarray:
    """Spherical k-means (unit vectors, cosine): `lists` centroids of unit length."""
    rng = np.random.default_rng(seed)
    lists = min(lists, len(vectors))
    centroids = vectors[rng.choice(len(vectors), lists, replace=False)].copy()
    for _ in range(rounds):
        nearest = np.argmax(vectors @ centroids.T, axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, vectors)
        empty = np.linalg.norm(sums, axis=1) == 0
        sums[empty] = vectors[rng.choice(len(vectors), int(empty.sum()))]
        centroids = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    return centroids
