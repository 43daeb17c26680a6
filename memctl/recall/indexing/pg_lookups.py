"""One search's lookups on the server, answered from as few statements as possible.

The ranking stages ask the store for the same things more than once in one search (the
document frequencies of the query's terms: planning, candidates, the layer tokens; the rows of
items: candidates, then their session neighbours, then the turns next to the best ones) and
each question was a round trip. Inside `PostgresIndexStore.search_scope()` each row and each
document frequency is fetched once, together with what the next stage is known to ask for:

- the layer tokens' frequencies with the query's (the candidates' bm25 needs both);
- with the candidates' rows, the rows right before and after each (the neighbours stage);
- the feedback sources' session neighbourhoods in one statement, with the rows' bodies and
  the frequencies of the terms in the sources' bodies (the feedback stage's next two lookups).

What a stage gets is what the statements it used to run would return, in the same order
(rowid order, terms by bytes: the scores add floats up in that order), so scores stay equal to
the bit. Outside a scope every lookup asks the server, as before.

What was fetched is kept for the next searches of the same store (a `--queries` batch, an
agent's long-lived searcher) while the index is unchanged: every index write transaction bumps
`index_generation` (memctl.recall.indexing.pg_store.PostgresIndexStore.transaction), and each search's
first statement reads it with what it fetches; a new generation drops everything kept (and the
store's meta, read with the generation it belongs to), as SQLite drops its page cache when the
file's change counter moved.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Callable, Sequence

ITEM_COLUMNS = "rowid, ref, layer, date, type, item_id, session, ctx"

NEAR_WITH_FREQUENCIES = f"""
WITH near AS (SELECT {ITEM_COLUMNS}, body FROM {{s}}.index_items WHERE rowid = ANY(%s::bigint[]))
SELECT {ITEM_COLUMNS}, body, NULL::text, NULL::integer FROM near
UNION ALL
SELECT NULL::bigint, NULL, NULL, NULL, NULL, NULL, NULL, NULL::integer, NULL, term, df FROM {{s}}.index_vocab
 WHERE term = ANY(ARRAY(SELECT DISTINCT unnest(string_to_array(body, ' ')) FROM {{s}}.index_items
                         WHERE rowid = ANY(%s::bigint[])))
"""


def id_array(rowids: Sequence[int]) -> str:
    """Rowids as one text parameter for `ANY(%s::bigint[])`: psycopg adapts a list element by
    element (~0.5 ms of CPU for 300 rowids, more than the statement's own time on the server)."""
    return "{" + ",".join(map(str, rowids)) + "}"


def in_context(row: tuple) -> bool:
    """Part of a session's context document (SQL: ctx = 1 AND session <> '')."""
    return row[7] == 1 and row[6] != ""


MAX_KEPT = 100_000  # rows, bodies, texts and frequencies kept between searches (then dropped)

FREQUENCIES_AND_GENERATION = """
SELECT term, df::bigint FROM {s}.index_vocab WHERE term = ANY(%s)
UNION ALL
SELECT NULL, value FROM {s}.index_generation
"""


class SearchLookups:
    """What the searches of one store fetched, while the index's generation is the one read by
    the current search's first statement: rows of items (None: no such rowid), bodies, texts,
    document frequencies (None: a term the index does not hold)."""

    __slots__ = ("rows", "bodies", "texts", "dfs", "run", "read_generation", "generation", "checked", "seen")

    def __init__(self, run: Callable[[str, Sequence], list[tuple]], read_generation: Callable[[int], None]):
        self.run = run  # the store's statement runner (errors become memctl's one line)
        self.read_generation = read_generation  # the store checks what it keeps itself (its meta)
        self.generation: int | None = None
        self.checked = False  # the generation read in this search
        self.seen: set[int] = set()  # rowids this search fetched (their neighbours are asked for next)
        self.rows: dict[int, tuple | None] = {}
        self.bodies: dict[int, str | None] = {}
        self.texts: dict[int, str | None] = {}
        self.dfs: dict[str, int | None] = {}

    def start_search(self) -> None:
        self.checked = False
        self.seen = set()
        if len(self.rows) + len(self.bodies) + len(self.texts) + len(self.dfs) > MAX_KEPT:
            self._drop()

    def _drop(self) -> None:
        for kept in (self.rows, self.bodies, self.texts, self.dfs):
            kept.clear()

    def _current(self) -> None:
        """Before an answer from what is kept: this search has read the index's generation."""
        if not self.checked:
            self._fetch_frequencies([])

    # -- document frequencies

    def document_frequencies(self, terms: list[str], also: Sequence[str] = ()) -> dict[str, int]:
        """As PostgresIndexStore.document_frequencies answers (terms by bytes); the terms in
        `also` are fetched with the first missing ones, for a later question."""
        missing = [t for t in terms if t not in self.dfs or not self.checked]
        if missing:
            self._fetch_frequencies([*missing, *(t for t in also if t not in self.dfs and t not in missing)])
        return {t: self.dfs[t] for t in sorted(terms) if self.dfs[t] is not None}

    def _fetch_frequencies(self, terms: list[str]) -> None:
        if self.checked:
            found = dict(self.run("SELECT term, df FROM {s}.index_vocab WHERE term = ANY(%s)", (terms,)))
        else:  # the search's first statement: the generation with the frequencies
            found = dict(self.run(FREQUENCIES_AND_GENERATION, (terms,)))
            generation = found.pop(None)
            if generation != self.generation:
                self._drop()
                self.generation = generation
            self.read_generation(generation)
            self.checked = True
        for term in terms:
            self.dfs[term] = found.get(term)

    # -- rows of items

    def item_rows(self, rowids: Sequence[int], context_only: bool) -> list[tuple]:
        """As PostgresIndexStore.item_rows answers (rowid order); rows not fetched yet come
        with the rows right before and after them (what the neighbours stage asks for)."""
        self._current()
        wanted = sorted(set(rowids))
        self.seen.update(wanted)
        missing = [r for r in wanted if r not in self.rows]
        if missing:
            around = {r + step for r in missing for step in (-1, 0, 1)}
            self._fetch_rows(sorted(r for r in around if r not in self.rows))
        rows = [row for row in (self.rows[r] for r in wanted) if row is not None]
        return [row for row in rows if in_context(row)] if context_only else rows

    def remember_rows(self, rows) -> None:
        """Rows of items fetched by another statement (the ranked candidates)."""
        self._current()
        for row in rows:
            self.rows[row[0]] = tuple(row)
            self.seen.add(row[0])

    def _fetch_rows(self, rowids: list[int]) -> None:
        sql = f"SELECT {ITEM_COLUMNS} FROM {{s}}.index_items WHERE rowid = ANY(%s::bigint[])"
        for row in self.run(sql, (id_array(rowids),)):
            self.rows[row[0]] = row
        for rowid in rowids:
            self.rows.setdefault(rowid, None)
        self.seen.update(rowids)

    def item_bodies(self, rowids: Sequence[int]) -> dict[int, str]:
        return self._column("body", self.bodies, rowids)

    def item_texts(self, rowids: Sequence[int]) -> dict[int, str]:
        return self._column("text", self.texts, rowids)

    def _column(self, column: str, kept: dict[int, str | None], rowids: Sequence[int]) -> dict[int, str]:
        """{rowid: value} of index_items' `column` (body or text), in rowid order."""
        self._current()
        wanted = sorted(set(rowids))
        missing = [r for r in wanted if r not in kept]
        if missing:
            found = dict(self.run(f"SELECT rowid, {column} FROM {{s}}.index_items WHERE rowid = ANY(%s::bigint[])",
                                  (id_array(missing),)))
            for rowid in missing:
                kept[rowid] = found.get(rowid)
        return {r: kept[r] for r in wanted if kept[r] is not None}

    # -- session neighbourhoods (the feedback stage)

    def context_item_ids_near_each(self, centres: Sequence[tuple[str, int]], span: int) -> list[list[int]]:
        """For each (session, rowid): the rowids within `span` of it in that session's context
        document, in order. One statement fetches every row of the spans with its body, and the
        document frequencies of the centres' terms."""
        self._current()
        spans = [range(rowid - span, rowid + span + 1) for _, rowid in centres]
        needed = {r for rows in spans for r in rows if r not in self.bodies or r not in self.rows}
        if needed:  # and the rows next to the ones known: the neighbours stage asks for them next
            known = [r for r in self.seen if self.rows[r] is not None]
            needed.update(r + step for r in known for step in (-1, 1) if r + step not in self.rows)
            self._fetch_near(sorted(needed), sorted({rowid for _, rowid in centres}))
        found = []
        for (session, _), rows in zip(centres, spans):
            found.append([r for r in rows if (row := self.rows[r]) is not None and row[6] == session
                          and row[7] == 1])
        return found

    def _fetch_near(self, rowids: list[int], centres: list[int]) -> None:
        frequencies = {}
        for *row, body, term, df in self.run(NEAR_WITH_FREQUENCIES, (id_array(rowids), id_array(centres))):
            if term is None:
                self.rows[row[0]] = tuple(row)
                self.bodies[row[0]] = body
            else:
                frequencies[term] = df
        for rowid in rowids:
            self.rows.setdefault(rowid, None)
            self.bodies.setdefault(rowid, None)
        self.seen.update(rowids)
        terms = {t for r in centres if self.bodies[r] for t in self.bodies[r].split()}
        for term in terms:
            self.dfs.setdefault(term, frequencies.get(term))
