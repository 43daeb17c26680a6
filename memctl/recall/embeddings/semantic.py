"""The optional semantic signal (the `[semantic]` extra): item embeddings fused with
the lexical ranking.

Index time (`memctl index embed`, and `memctl index refresh` of a memory that has vectors):
the index's rows are compared with `.memctl/vectors.sqlite` (memctl.recall.embeddings.vectors) in rowid
ranges, the highest (the last indexed) first, and only texts never embedded before are run
through the model, in batches, committed at least every COMMIT_SECONDS. `index embed --for`
stops at the first batch past its time and reports the rows left; the next pass continues. A
search never embeds anything but its query: it uses the vectors that exist.

Query time: `SemanticSignal.open` is cheap and imports no numpy when the memory has no
vectors or fusion is off; the model is loaded only when a query is fused. The closest items
(every vector of a small memory, a few IVF lists of a large one) join the lexical candidates:
reciprocal-rank fusion (`rrf`: 1/(k + lexical rank) + weight/(k + semantic rank)) or score
fusion (`score`: the lexical score over the best one + weight × the cosine rescaled over the
semantic candidates: z-scores, or min-max with `semantic_normalisation = "minmax"`), chosen in
`[ranking] fusion` (bench/retrieval.py --cv reports both).
A missing or broken model is one warning and lexical results.
"""

from __future__ import annotations

import os
import re

from memctl.core.errors import MemctlError

EMBED_RANGE = 5_000  # index rows compared with the store at a time: bounded memory at any size
COMMIT_SECONDS = 60.0  # of the model's work at most per transaction: a killed pass loses no more (a range of
# long items takes the multilingual model half an hour)
LEXICAL_COMPARED = 100  # the best lexical candidates also get their cosine (score fusion needs it)


VECTORS_NAME = "vectors.sqlite"


def vectors_path(layout):
    """Beside the index (memctl.core.config.Layout.derived_dir: `.memctl/` when it can be
    written, else the cache dir), so a read-only memory gets its vectors where its index is; a
    read-only memory that carries vectors of its own is read from them until it has its own."""
    beside_index = layout.derived_dir / VECTORS_NAME
    carried = layout.state_dir / VECTORS_NAME
    if beside_index != carried and not beside_index.exists() and carried.is_file():
        return carried
    return beside_index


def has_vectors(layout) -> bool:
    return vectors_path(layout).is_file()


def _cjk(text: str) -> bool:
    from memctl.recall.indexing.text import has_cjk

    return has_cjk(text)


_ASCII_LETTERS = re.compile("[A-Za-z]+")


def _mostly_cjk(text: str) -> bool:
    """More CJK characters than Latin letters (ASCII ones)."""
    if text.isascii():
        return False
    from memctl.recall.indexing.text import CJK_RUN

    cjk = sum(map(len, CJK_RUN.findall(text)))
    return cjk > 0 and cjk >= sum(map(len, _ASCII_LETTERS.findall(text)))


def _mostly_cjk_rows(index, high: int) -> int:
    """How many index rows up to `high` hold mostly-Chinese text (read range by range)."""
    return sum(1 for low in range(1, high + 1, EMBED_RANGE)
               for _, _, text in index.item_turns_between(low, min(high, low + EMBED_RANGE - 1))
               if _mostly_cjk(text or ""))


def reads_chinese(ranking) -> bool:
    """Whether the model embeds Chinese: `[semantic] cjk_queries` for a model directory; the
    multilingual model (memctl.recall.embeddings.e5, named or the one installed) always does. Known without
    loading the model."""
    from memctl.recall.embeddings.e5 import NAME
    from memctl.recall.embeddings.semantic_status import model_in_use

    return bool(ranking.semantic_option("cjk_queries")) or model_in_use(ranking) == NAME


def locked(layout):
    """The embedding pass's own lock, one pass at a time (searches never take it; LockBusy if held)."""
    from memctl.core.fsutil import WriterLock

    return WriterLock(layout.derived_dir / "vectors.lock")


# ---------------------------------------------------------------- index time

class EmbedReport:
    __slots__ = ("rows", "embedded", "reused", "dropped", "trained", "seconds", "model", "left")

    def __init__(self):
        self.rows = self.embedded = self.reused = self.dropped = 0
        self.left = 0  # rows not reached (or reached and cut) by a pass whose time ran out, without a vector
        self.trained = False
        self.seconds = 0.0
        self.model = ""

    def summary(self) -> str:
        lists = "; IVF lists trained" if self.trained else ""
        left = f"; time up: {self.left} rows left without vectors (run it again to continue)" if self.left else ""
        return (f"{self.rows} rows have vectors: {self.embedded} texts embedded, {self.reused} reused, "
                f"{self.dropped} dropped ({self.seconds:.1f}s, {self.model}){lists}{left}")


def embed_missing(layout, ranking, batch_size: int | None = None, budget: float | None = None) -> EmbedReport:
    """Vectors for every index row that has none (or whose text changed), the highest rowids
    (the last indexed) first. With `budget` (seconds), no new range or batch is started once it
    has passed: what was embedded is committed, `report.left` says how many rows still have no
    vector, and the next pass continues. Raises MemctlError when the extra or its model is missing."""
    import time

    from memctl.recall.indexing.store import SQLiteStore

    started = time.monotonic()
    deadline = None if budget is None else started + budget
    _single_threaded_blas()  # a background pass on a shared machine: one core
    encoder = _encoder(ranking, batch_pass=True)  # first: without the extra this is the one clear error
    from memctl.recall.embeddings.semantic_status import EMBEDDED_THROUGH
    from memctl.recall.embeddings.vectors import VectorStore, model_identity

    report = EmbedReport()
    report.model = encoder.name
    if not layout.index.exists():
        from memctl.core.extras import install_hint

        raise MemctlError("no search index yet: run `memctl index rebuild` first")
    index = SQLiteStore.at(layout.index)
    store = VectorStore(layout.derived_dir / VECTORS_NAME)  # written beside the index, never into a read-only memory
    batch = int(batch_size or ranking.semantic_option("batch_size"))
    cjk_model = reads_chinese(ranking)
    in_context = bool(ranking.semantic_option("context_vectors"))
    try:
        store.reset_for(model_identity(encoder), encoder.dim)
        store.lay_out(deadline)  # a store of the previous format: read the old way until this is done
        top = index.last_item_id()
        stored_top = store.db.execute("SELECT max(rowid) FROM items").fetchone()[0] or 0
        visited = 0  # index rows of the ranges done
        for low in reversed(range(1, max(top, stored_top) + 1, EMBED_RANGE)):
            high = low + EMBED_RANGE - 1
            if deadline is not None and visited and time.monotonic() >= deadline:
                report.left += (index.item_count() - visited) - store.count_below(high + 1)
                if not cjk_model:  # rows it never embeds are not left for the next pass
                    report.left -= _mostly_cjk_rows(index, high)
                break
            rows, left = _embed_range_in_steps(index, store, encoder, (low, high), batch, report,
                                               (cjk_model, in_context), deadline)
            visited += rows
            report.left += left
        store.db.execute("BEGIN")
        report.trained = store.train_lists(int(ranking.semantic_option("scan_below")))
        if not report.left:  # a search tells the rows indexed after this from those the model never reads
            store.set_meta(EMBEDDED_THROUGH, str(top))
        store.db.execute("COMMIT")
        report.rows = store.count()
    finally:
        store.close()
        index.close()
    report.left = max(0, report.left)
    report.seconds = time.monotonic() - started
    return report


AFTER_REFRESH_SECONDS = 60.0  # a refresh of a memory embedded only in part must not become days of embedding


def embed_if_opted_in(settings) -> str:
    """After a refresh or rebuild: the missing vectors of a memory that has vectors already
    (`memctl index embed` opts a memory in), for at most AFTER_REFRESH_SECONDS (the report says
    what is left to `memctl index embed`). Returns the report's line, or a warning's, or ""."""
    from memctl.recall.ranking.ranking import Ranking

    ranking = Ranking.from_settings(settings)
    if not ranking.semantic_option("enabled") or not has_vectors(settings.layout):
        return ""
    try:
        with locked(settings.layout):
            return embed_missing(settings.layout, ranking, budget=AFTER_REFRESH_SECONDS).summary()
    except MemctlError as exc:
        return f"item vectors not updated: {exc}"


def embed_in_background(settings) -> str:
    """After a write (import, archive) to a memory that has vectors: the new items' vectors by
    a detached pass (memctl.recall.embeddings.semantic_status.start_embedding). Returns a warning line when
    it could not start, or ""."""
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.embeddings.semantic_status import start_embedding

    ranking = Ranking.from_settings(settings)
    if not (ranking.semantic_option("enabled") and ranking.semantic_option("embed_after_writes")
            and has_vectors(settings.layout)):
        return ""
    return start_embedding(str(settings.layout.root))


def _embed_range_in_steps(index, store, encoder, bounds: tuple[int, int], batch: int, report: EmbedReport,
                          model_reads: tuple[bool, bool], deadline: float | None) -> tuple[int, int]:
    """A range in transactions of at most COMMIT_SECONDS of the model's work, until it is done or
    `deadline` has passed. Returns (index rows in the range, rows of it left without their vectors)."""
    import time

    while True:
        step = time.monotonic() + COMMIT_SECONDS
        rows, left = _embed_range(index, store, encoder, *bounds, batch, report, *model_reads,
                                  step if deadline is None else min(step, deadline))
        if not left or (deadline is not None and time.monotonic() >= deadline):
            return rows, left


def _embed_range(index, store, encoder, low: int, high: int, batch: int, report: EmbedReport,
                 cjk_model: bool, in_context: bool, deadline: float) -> tuple[int, int]:
    """One range of index rows: drop the vectors of rows gone, embed the texts never seen (each
    item alone and, with `in_context`, read after the turn before it), in one transaction.
    Past `deadline` no further batch is started and only the rows whose vectors are done are
    assigned. Returns (index rows in the range, rows of it left without their vectors)."""
    from memctl.core import faults
    from memctl.recall.embeddings.vectors import text_hash

    turns = index.item_turns_between(max(1, low - 1), high)  # the row before the range: its first row's context
    rows = sum(1 for rowid, _, _ in turns if rowid >= low)
    if not cjk_model:  # a model that does not read Chinese is never asked about mostly-Chinese text
        turns = [(rowid, session, text) for rowid, session, text in turns if not _mostly_cjk(text or "")]
    alone = {rowid: text or "" for rowid, _, text in turns if rowid >= low}
    contexts = _context_texts(turns, low) if in_context else {}
    current, current_context = ({r: text_hash(t) for r, t in texts.items()} for texts in (alone, contexts))
    stored, stored_context = store.rows_between(low, high), store.context_rows_between(low, high)
    changed = [(r, h) for r, h in current.items() if stored.get(r) != h]
    changed_context = [(r, h) for r, h in current_context.items() if stored_context.get(r) != h]
    wanted = _texts_by_row(changed, changed_context, alone, contexts)
    texts = {h: text for pairs in wanted.values() for h, text in pairs}
    known = store.known_hashes(list(texts))
    new = [h for h in texts if h not in known]
    vectors = _encode_until(encoder, [texts[h] for h in new], batch, deadline)
    ready = known | set(new[:len(vectors)])
    left = sum(1 for pairs in wanted.values() if any(h not in ready for h, _ in pairs))
    changed = [(r, h) for r, h in changed if h in ready]
    changed_context = [(r, h) for r, h in changed_context if h in ready]
    store.db.execute("BEGIN")  # after the model's work: a search reading the store never waits for it
    store.add_cached(list(zip(new, vectors)))
    store.drop_rows([r for r in stored if r not in current])
    store.drop_context([r for r in stored_context if r not in current_context])
    store.assign(changed)
    store.assign_context(changed_context)
    faults.checkpoint("embed-step")  # a kill test: the step's transaction dies whole
    store.db.execute("COMMIT")
    report.embedded += len(vectors)
    report.reused += sum(1 for _, h in changed if h in known)
    report.dropped += sum(1 for r in stored if r not in current)
    return rows, left


def _texts_by_row(changed, changed_context, alone, contexts) -> dict[int, list[tuple[bytes, str]]]:
    """rowid -> the (hash, text) its vectors need, the highest rowid first and each row's own text
    before its text in context: a pass cut short leaves whole rows done, the last indexed first."""
    wanted: dict[int, list[tuple[bytes, str]]] = {}
    for r, h in changed:
        wanted.setdefault(r, []).append((h, alone[r]))
    for r, h in changed_context:
        wanted.setdefault(r, []).append((h, contexts[r]))
    return {r: wanted[r] for r in sorted(wanted, reverse=True)}


def _encode_until(encoder, texts: list[str], batch: int, deadline: float) -> list:
    """The texts' vectors, in order, batch by batch until `deadline` has passed (the first batch
    always, so that every step makes progress)."""
    import time

    vectors: list = []
    for start in range(0, len(texts), batch):
        if vectors and time.monotonic() >= deadline:
            break
        vectors.extend(encoder.encode([encodable(text) for text in texts[start:start + batch]], batch))
    return vectors


def encodable(text: str) -> str:
    """`text` as the model's tokenizer takes it: an argument or a file's bytes that were not
    UTF-8 come as lone surrogates, which it refuses; they become U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


PREVIOUS_CHARS = 200  # of the turn before: its end, which is what the item answers


def context_text(previous: str, text: str) -> str:
    """What an item's in-context vector is made of: the end of the turn before it, then the item
    (whose own words stay within the token cap however long the turn before was)."""
    return f"{previous[-PREVIOUS_CHARS:]}\n{text}"


def _context_texts(turns: list[tuple[int, str, str]], low: int) -> dict[int, str]:
    """rowid -> its in-context text, for the rows from `low` whose previous row is the turn
    before them in the same session (rows are a session's turns in order, as the neighbour
    rule reads them: memctl.recall.ranking.context.with_neighbours)."""
    by_rowid = {rowid: (session, text or "") for rowid, session, text in turns}
    found = {rowid: _in_context(by_rowid, rowid) for rowid in by_rowid if rowid >= low}
    return {rowid: text for rowid, text in found.items() if text is not None}


def _in_context(by_rowid: dict[int, tuple[str, str]], rowid: int) -> str | None:
    """The row's in-context text, or None when the row before it is not the turn before it in the
    same session (or is empty). `by_rowid`: rowid -> (session, text)."""
    session, text = by_rowid[rowid]
    before = by_rowid.get(rowid - 1)
    if not session or not before or before[0] != session or not before[1]:
        return None
    return context_text(before[1], text)


def _encoder(ranking, batch_pass: bool = False):
    """The model; a query's is always the numpy pass (torch would cost seconds to import)."""
    try:
        from memctl.recall.embeddings.encoder import load_encoder
    except ImportError as exc:
        raise MemctlError(f"the [semantic] extra is not installed ({exc.name} is missing): "
                          f"{install_hint('semantic')}") from None
    backend = str(ranking.semantic_option("backend")) if batch_pass else "numpy"
    if backend == "auto":
        import importlib.util

        backend = "torch" if importlib.util.find_spec("torch") else "numpy"
    from memctl.recall.embeddings.semantic_status import model_in_use

    return load_encoder(model_in_use(ranking), int(ranking.semantic_option("max_tokens")), backend)


# ---------------------------------------------------------------- query time

def embedded_text(query: str, ranking) -> str:
    """What of a query is embedded: its question alone when it has sentences around it and
    their terms count for less (aside_weight below 1: memctl.recall.ranking.focus), else all of it."""
    from memctl.recall.ranking.focus import searched_focus

    focus = searched_focus(query, ranking.aside_weight)
    return focus.question if focus else query


class SemanticSignal:
    """The vectors of one memory, opened for the searches of one Searcher."""

    def __init__(self, layout, ranking):
        self.layout, self.ranking = layout, ranking  # the Searcher's; fuse() is handed the current one
        self.vectors = None  # memctl.recall.embeddings.vectors.VectorStore, opened on the first fused query
        self.encoder = None
        self.warning = ""  # set once when the signal had to be given up; the CLI prints it
        self.helper = None  # semantic_helper.SemanticHelper (a forked child) or ResidentHelper (the resident searcher)
        self.wants_resident = False  # none served this search: start one for the next
        self.model_checked = False  # the open store's model is the encoder's
        self.one_query = False  # set in that child: it probes once (memctl.recall.embeddings.vectors.VectorStore one_query)

    @classmethod
    def open(cls, layout, ranking) -> "SemanticSignal | None":
        """None (and no numpy) when the memory has no vectors or [semantic] enabled is false."""
        if not ranking.semantic_option("enabled") or not has_vectors(layout):
            return None
        return cls(layout, ranking)

    @classmethod
    def started_for(cls, layout, ranking, query: str) -> "SemanticSignal | None":
        """`open`, with the helper of a one-shot search started for `query` (a caller that has
        not imported the lexical search yet starts it sooner: memctl.cli.lean)."""
        signal = cls.open(layout, ranking)
        if signal is not None:
            signal.start_helper(query)
        return signal

    def start_helper(self, query: str) -> None:
        """A one-shot search that will fuse `query`: the model, the query's vector and the probe in
        a forked child from now on, while the lexical search runs (memctl.recall.embeddings.semantic_helper)."""
        from memctl.recall.embeddings import semantic_helper

        query = embedded_text(query, self.ranking)
        if not self.wanted(query):
            return
        if semantic_helper.resident_wanted(self.ranking):
            self.helper = semantic_helper.ResidentHelper.start(self.root(), self.ranking, query)
            self.wants_resident = self.helper is None
        if self.helper is None and semantic_helper.available(self.ranking):
            try:
                self.helper = semantic_helper.SemanticHelper.start(self, query)
            except OSError:  # no process to be had (a limit, no memory): the same work in this one
                self.helper = None

    def root(self) -> str:
        return os.path.abspath(self.layout.root)

    def wanted(self, query: str) -> bool:
        if self.warning or self.ranking.fusion == "none":
            return False
        return reads_chinese(self.ranking) or not _cjk(query)

    def fuse(self, candidates: list, query: str, ranking, store, hydrate, keep) -> list:
        """candidates (lexical scores) -> candidates with fused scores, semantic matches added;
        `store` is the open index (memctl.recall.indexing.store.SQLiteStore), `hydrate(rows)` makes hits of its rows, `keep(hit)` applies the
        search's layer, date and type filters. A query that is not fused gets `candidates`
        itself back (the same list), a fused one a new list."""
        self.ranking = ranking
        query = embedded_text(query, ranking)
        if not self.wanted(query):
            return candidates
        try:
            return self._fuse(candidates, query, store, hydrate, keep)
        except Exception as exc:  # a missing or broken model or store must never fail a search
            from memctl.recall.embeddings.semantic_helper import one_line

            self.warning = f"semantic search skipped: {one_line(exc)}"
        return candidates

    def _fuse(self, candidates: list, query: str, store, hydrate, keep) -> list:
        lexical = [h.rowid for h in sorted(candidates, key=lambda h: -h.score)[:LEXICAL_COMPARED]]
        found = self._cosines(query, lexical)
        if found is None:
            return candidates
        nearest, compared, contexts = found
        cosine = _verified(store, {r: (h, c) for r, h, c in [*compared, *nearest]}, contexts)
        by_rowid = {h.rowid: h for h in candidates}
        for hit in hydrate([(r, 0.0) for r in cosine if r not in by_rowid]):
            if keep(hit):
                hit.score = 0.0
                by_rowid[hit.rowid] = hit
        cosine = {r: c for r, c in cosine.items() if r in by_rowid}
        if self.ranking.fusion == "rrf":
            _reciprocal_rank_fusion(list(by_rowid.values()), cosine, self.ranking)
        else:
            _score_fusion(list(by_rowid.values()), cosine, self.ranking)
        return list(by_rowid.values())

    def _cosines(self, query: str, lexical: list[int]) -> tuple[list, list, dict] | None:
        """(nearest rows, the lexical candidates' rows, context hashes): (rowid, text hash, cosine)
        each and `context_hashes` of them, from the helper forked for this query, the resident
        searcher or this process; None for a store without vectors."""
        helper, self.helper = self.helper, None
        if helper is not None and helper.query != query:
            helper.close()
        elif helper is not None:
            from memctl.recall.embeddings.semantic_helper import Unserved

            try:
                return helper.cosines(lexical)
            except Unserved:  # the resident searcher declined or vanished: this process does it
                self.wants_resident = True
        found = self.nearest_rows(query)
        if found is None:
            return None
        compared = self.compared_rows(found[0], lexical)
        return found[1], compared, self.context_hashes([*found[1], *compared])

    def nearest_rows(self, query: str) -> tuple | None:
        """(the query's vector, the closest rows), or None for a store without vectors."""
        vector = self._query_vector(query)
        if vector is None:
            return None
        probe = int(self.ranking.semantic_option("probe_lists"))
        return vector, self.vectors.nearest(vector, int(self.ranking.semantic_candidates), probe,
                                            float(self.ranking.semantic_context))

    def compared_rows(self, vector, rowids: list[int]) -> list:
        return self.vectors.similarities(rowids, vector, float(self.ranking.semantic_context))

    def context_hashes(self, rows: list) -> dict[int, bytes]:
        """What the in-context vectors mixed into these rows' cosines were made of (none when the
        ranking mixes none in): a row's context can change while its own text does not."""
        if not float(self.ranking.semantic_context):
            return {}
        return self.vectors.context_hashes(list({rowid for rowid, _, _ in rows}))

    def _query_vector(self, query: str):
        _single_threaded_blas()
        from memctl.recall.embeddings.vectors import VectorStore, model_identity, same_model

        if self.vectors is None:
            self.vectors = VectorStore(vectors_path(self.layout), readonly=True, one_query=self.one_query)
            self.model_checked = False
        if not self.vectors.dim:
            return None
        if self.encoder is None:
            self.encoder = _encoder(self.ranking)  # loaded here, on the first query that is fused
        if not self.model_checked:  # once per opened store (the resident searcher reopens a changed one)
            if not same_model(self.vectors.meta("model"), model_identity(self.encoder)):
                raise MemctlError("the vectors come from another model: run `memctl index embed`")
            self.model_checked = True
        return self.encoder.encode_query(encodable(query))

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        if self.wants_resident:
            from memctl.recall.embeddings.semantic_helper import start_resident

            self.wants_resident = False
            start_resident(self.root(), self.ranking)


def _single_threaded_blas() -> None:
    """One BLAS thread for a query's small products: with the cores busy elsewhere, OpenBLAS's
    threads wait on each other and one short query took 1.5 s instead of 0.15 s (measured). It
    only works before numpy is first imported, which in a search process is here."""
    import os
    import sys

    if "numpy" not in sys.modules:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")


def _verified(store, found: dict, contexts: dict[int, bytes]) -> dict[int, float]:
    """rowid -> cosine, for the rows whose text is still the one embedded (rowids can be reused)
    and, for a row whose cosine mixes in its in-context vector (`contexts`: rowid -> the hash of
    that vector's text), whose turn before is still the one read with it."""
    from memctl.recall.embeddings.text_hashing import text_hash

    rowids = sorted({*found, *(r - 1 for r in found if r in contexts)})  # one lookup: the rows and their turns before
    turns: dict[int, tuple[str, str]] = {}
    for start in range(0, len(rowids), 900):
        turns.update((r, (session, text or "")) for r, (session, text) in store.item_turns(rowids[start:start + 900]).items())
    return {r: c for r, (h, c) in found.items() if r in turns and text_hash(turns[r][1]) == h
            and (r not in contexts or _hash_of(_in_context(turns, r)) == contexts[r])}


def _hash_of(text: str | None) -> bytes | None:
    from memctl.recall.embeddings.text_hashing import text_hash

    return None if text is None else text_hash(text)


def _reciprocal_rank_fusion(hits: list, cosine: dict[int, float], ranking) -> None:
    k = float(ranking.rrf_k)
    lexical = {h.rowid: n for n, h in enumerate(sorted((h for h in hits if h.score > 0), key=lambda h: -h.score), 1)}
    semantic = {r: n for n, r in enumerate(sorted(cosine, key=lambda r: -cosine[r]), 1)}
    for hit in hits:
        score = 1.0 / (k + lexical[hit.rowid]) if hit.rowid in lexical else 0.0
        if hit.rowid in semantic:
            score += ranking.semantic_weight / (k + semantic[hit.rowid])
        hit.score = score


def _score_fusion(hits: list, cosine: dict[int, float], ranking) -> None:
    best = max((h.score for h in hits), default=0.0) or 1.0
    similarity = _rescaled(cosine, ranking.semantic_normalisation)
    for hit in hits:
        hit.score = hit.score / best + ranking.semantic_weight * similarity.get(hit.rowid, 0.0)


Z_SPREAD = 3.0  # z-scores are divided by this: three deviations above the mean weigh as the lexical best


def _rescaled(cosine: dict[int, float], normalisation: str) -> dict[int, float]:
    """The query's cosines on the lexical scale. "minmax": 0 at the lowest candidate, 1 at the
    best, so the spread of one query's cosines counts for nothing; "zscore": deviations from the
    candidates' mean in units of their spread (below the mean: negative, a lexical match that
    means something else loses), so a query whose best match stands out lends it more."""
    if not cosine:
        return {}
    values = list(cosine.values())
    if normalisation == "zscore":
        mean = sum(values) / len(values)
        spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 * Z_SPREAD or 1.0
        return {r: (c - mean) / spread for r, c in cosine.items()}
    low = min(values)
    span = (max(values) - low) or 1.0
    return {r: (c - low) / span for r, c in cosine.items()}
