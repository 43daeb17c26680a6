"""After a purge on a team memory: the other machines' rows of the shared index that hold a
purged string, removed at once (issue #14).

The purging machine scrubs its own files and refreshes its own rows; every other machine
applies the purge's order to its files before it uploads anything again
(memctl.longterm.purge_orders). Until it does, its rows on the server (items, the compressed
session texts `show` serves) would still hold the string for every machine's searches. So
the purge removes them now, as a refresh removes a source (vocabulary and totals kept
exact), and marks their sources changed: the owner indexes them again, scrubbed, at its
next refresh. Imported only for that backend.
"""

from __future__ import annotations

import zlib

from memctl.core import pg
from memctl.longterm.pg_store import translated
from memctl.recall.indexing.pg_index import open_store
from memctl.recall.indexing.pg_store import SERVER_PREFIX
from memctl.recall.indexing.writer import IndexWriter

MIN_NEEDLE = 4  # as the L4 purge: a shorter string would match ordinary words


def scrub_other_machines(index, needles: list[bytes]) -> int:
    """Remove every other machine's index sources whose items or session text hold a needle;
    returns how many sources went."""
    texts = sorted({n.decode("utf-8", "replace") for n in needles if len(n) >= MIN_NEEDLE})
    if not texts:
        return 0
    store = open_store(index)  # the tables brought to this version first
    try:
        with translated(store.where), store.transaction():
            keys = _sources_holding(store, texts, [t.encode("utf-8", "surrogateescape") for t in texts])
            if keys:
                _remove(store, index, keys)
            return len(keys)
    finally:
        store.close()


def _sources_holding(store, texts: list[str], raw: list[bytes]) -> list[str]:
    others = "NOT starts_with(source, %s) AND NOT starts_with(source, %s)"
    found = {key for (key,) in store.db.execute(
        f"SELECT DISTINCT source FROM {store.schema}.index_items WHERE {others} AND "
        "EXISTS (SELECT 1 FROM unnest(%s::text[]) AS n WHERE strpos(text, n) > 0)",
        (store.prefix, SERVER_PREFIX, texts)).fetchall()}
    for source, data in pg.rows(store.db, f"SELECT source, data FROM {store.schema}.session_texts WHERE {others}",
                                (store.prefix, SERVER_PREFIX)):
        text = zlib.decompress(bytes(data))
        if any(n in text for n in raw):
            found.add(source)
    return sorted(found)


def _remove(store, index, keys: list[str]) -> None:
    writer = store.writer(None, index.options)  # removes only: nothing to tokenize
    try:
        for key in keys:
            IndexWriter.remove_source(writer, key)  # the key as stored: another machine's, unprefixed
        writer.finish()
    finally:
        writer.close()
    store.db.execute(f"DELETE FROM {store.schema}.session_texts WHERE source = ANY(%s)", (keys,))
    store.set_meta("items", str(int(store.meta("items", "0") or 0) - writer.removed))
    # the owner reads them again at its next refresh: a zip member by its signature, the rest by size
    zips = sorted({key.partition("!")[0] for key in keys if "!" in key})
    store.db.execute(f"UPDATE {store.schema}.index_sources SET size = -1, mtime_ns = -1, tail = '' "
                     "WHERE key = ANY(%s)", (keys + zips,))
