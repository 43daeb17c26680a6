"""The SQLite file of the derived index: its schema, connections and the meta table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = "5"
FTS_TOKENIZE = "unicode61 remove_diacritics 0 tokenchars '-_.'"
LAYER_MARK = "\ue000"  # a private-use char: FTS5 keeps it in a token, memctl's tokenizer never emits it

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sources(key TEXT PRIMARY KEY, kind TEXT, size INTEGER, mtime_ns INTEGER,
    tail TEXT, state TEXT);
CREATE TABLE IF NOT EXISTS items(rowid INTEGER PRIMARY KEY, source TEXT, ref TEXT, layer TEXT, date TEXT,
    type TEXT, item_id TEXT, session TEXT, ctx INTEGER, text TEXT);
CREATE INDEX IF NOT EXISTS items_source ON items(source);
CREATE INDEX IF NOT EXISTS sources_kind ON sources(kind);
CREATE INDEX IF NOT EXISTS items_session ON items(session) WHERE ctx = 1;
CREATE INDEX IF NOT EXISTS items_item_id ON items(item_id) WHERE item_id != '';
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, tokenize="{FTS_TOKENIZE}");
CREATE TABLE IF NOT EXISTS sessions(rowid INTEGER PRIMARY KEY, key TEXT UNIQUE);
CREATE VIRTUAL TABLE IF NOT EXISTS sfts USING fts5(body, tokenize="{FTS_TOKENIZE}");
CREATE TABLE IF NOT EXISTS vocab(term TEXT PRIMARY KEY, df INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS surface(word TEXT PRIMARY KEY, term TEXT) WITHOUT ROWID;
"""


def connect(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    return db


def meta_get(db: sqlite3.Connection, key: str, default: str = "") -> str:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else default


def meta_set(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
               (key, value))


def layer_token(layer: str) -> str:
    return f"{LAYER_MARK}{layer.lower()}"
