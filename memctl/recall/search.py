"""Queries over the index: modes and layers, planning a query, and the ranking stages in order.

A query is tokenized like the documents, except that CJK runs are cut against the index's own
vocabulary (memctl.recall.indexing.vocab), so a Chinese query never loads jieba's 0.7 s dictionary.
A word missing from the index is replaced by its closest written word (memctl.recall.ranking.fuzzy),
which is how a typo still finds its item; when no word of the query matches, a word is taken
as the start or a piece of the written words that hold it (`cert`, `SignatureDoes`). An
identifier the index does not hold whole (`bk-03`, `v2.1`, `ERR_42`) is not searched by its
parts, which would find a different identifier (`bk-02`). The hits say how words were read
(memctl.recall.ranking.hits.Hits).

`Searcher.search` runs the stages, each in its own module and reading the index only through
the store (memctl.recall.indexing.store.SQLiteStore):

1. candidates (memctl.recall.ranking.candidates): the items worth ranking, with their bm25, within the
   date and type filters (memctl.recall.ranking.filters);
2. weighted BM25 (memctl.recall.ranking.rescoring): when the query's terms overlap (Chinese words,
   their pieces and their characters: memctl.recall.indexing.text.query_term_weights), or when the query
   holds sentences around its question (memctl.recall.ranking.focus), the best candidates are scored
   again so that each piece counts for less than its word and each aside for less than the
   question;
3. the expected answer (memctl.recall.ranking.answer_types): for a question that asks when, how old,
   how many, how much or for a phone number, the candidates holding an expression of that
   type are scaled up by answer_type_weight; for a query naming a date (memctl.recall.ranking.dated),
   the candidates dated within it by date_weight;
4. session context (memctl.recall.ranking.context): score = bm25 of the item (normalised to the best
   candidate) + session_weight × bm25 of the item's session as one document (normalised
   likewise), times a small per-layer priority from the mode;
5. session feedback and neighbours (memctl.recall.ranking.context): items of a strong match's session
   that speak of the same things (what the match holds beyond the query, say the person 我上司
   of "我上司的电话是…") and the turns right before and after it share in its score;
6. semantic fusion (memctl.recall.embeddings.semantic), only for a memory with item vectors: the closest
   items by embedding join the lexical ranking (reciprocal-rank or score fusion).

The weights each stage uses are the search's `[ranking]` (memctl.recall.ranking.ranking.Ranking,
defaults in memctl.core.config.DEFAULTS); the internal bounds are in memctl.recall.ranking.tuning.
"""

from __future__ import annotations

import re
import sqlite3
from collections import namedtuple

from memctl.core import clock
from memctl.core.config import Layout
from memctl.core.errors import UsageError
from memctl.longterm.refs import record_used
from memctl.recall.ranking import tuning
from memctl.recall.ranking.answer_types import expected_answer, favour_typed_answers
from memctl.recall.ranking.candidates import candidates
from memctl.recall.ranking.context import blend, session_scores, with_neighbours, with_session_feedback
from memctl.recall.ranking.dated import favour_dated, named_period
from memctl.recall.ranking.filters import Filters, parse_when
from memctl.recall.ranking.focus import aside_terms, searched_focus
from memctl.recall.ranking.fuzzy import COMPLETED_WORDS, Fallback, fall_back, unheld_identifier_parts
from memctl.recall.ranking.hits import Hit, Hits, hydrate
from memctl.recall.indexing.index import IndexOptions, RefreshReport, SearchIndex
from memctl.recall.ranking.layer_order import by_layer_priority
from memctl.recall.ranking.query_terms import by_priority, stop_word_pieces
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.ranking.rescoring import weigh_terms
from memctl.recall.embeddings.semantic import SemanticSignal
from memctl.recall.indexing.sources import linked_layer_files
from memctl.recall.show import Item, find_item
from memctl.recall.indexing.store import SQLiteStore
from memctl.recall.indexing.text import Alias, Tokenizer, expand_aliases, has_cjk, parse_aliases
from memctl.recall.indexing.vocab import VocabSegmenter
from memctl.recall.indexing.writer import LAYER_MARK

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable, Sequence

__all__ = ["Hit", "Item", "SearchRequest", "Searcher", "find_item", "make_snippet", "parse_when",
           "record_references", "request_from_settings", "resolve_layers", "search_once"]

ALL_LAYERS = ("L2", "L3", "L4", "L5", "L6")
DEFAULT_LAYERS = ("L2", "L3", "L4", "L5")
MODES: dict[str, tuple[tuple[str, ...], int]] = {
    "reply": (("L5", "L4", "L2"), 3),
    "deep": (("L5", "L4", "L6"), 5),
    "earlier": (("L4", "L5"), 3),
    "recall": (("L5", "L4"), 3),
}
SNIPPET_CHARS = 160


class SearchRequest(namedtuple("SearchRequest", "query k layers mode since until type fuzzy_threshold",
                               defaults=(None, None, None, None, None, None, 80))):
    """What to look for; every field but the query is optional (k, layers: from the mode)."""

    __slots__ = ()
    query: str
    k: int | None
    layers: tuple[str, ...] | None
    mode: str | None
    since: str | None
    until: str | None
    type: str | None
    fuzzy_threshold: float


class Asked(namedtuple("Asked", "answer period asides common")):
    """What a query asks beyond its terms: the type of its answer (memctl.recall.ranking.answer_types),
    the date it names (memctl.recall.ranking.dated), the terms only in the sentences around its
    question (memctl.recall.ranking.focus), and at scale the terms that score candidates but do not
    gather them (QueryPlan.common)."""

    __slots__ = ()


NOTHING_ASKED = Asked(None, None, frozenset(), frozenset())


class QueryPlan:
    """The terms a query is searched with, with what the words the index does not hold were read
    as (`fallbacks`); at scale, which of them are too common to gather candidates by (they still
    score the candidates the others gather)."""

    __slots__ = ("terms", "fallbacks", "common")

    def __init__(self, terms: list[str]):
        self.terms = terms
        self.fallbacks: dict[str, Fallback] = {}  # typed word -> what it was searched as
        self.common: frozenset[str] = frozenset()

    def fallback_terms(self) -> list[str]:
        return [term for fallback in self.fallbacks.values() for term in fallback.terms]

    def hits(self, found: list[Hit], semantic: str = "") -> Hits:
        """The hits, with how the words the index does not hold were read (and `semantic`: why
        the model did not rank them, when it was expected to)."""
        return Hits(found, corrected={w: f.shown[0] for w, f in self.fallbacks.items() if f.typo},
                    completed={w: f.shown for w, f in self.fallbacks.items() if not f.typo}, semantic=semantic)


# ---------------------------------------------------------------- query side of the tokenizer

def load_aliases(layout: Layout, tokenizer: Tokenizer) -> list[Alias]:
    try:
        text = layout.aliases.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return parse_aliases(text, tokenizer)


# ---------------------------------------------------------------- the searcher

class Searcher:
    """One open index, ready for many queries (a `--queries` batch reuses it)."""

    def __init__(self, layout: Layout, options: IndexOptions | None = None, refresh: bool = True,
                 ranking: Ranking | None = None, query: str | None = None, semantic: SemanticSignal | None = None):
        """`query`: the one query a one-shot search will run, so that its semantic half can start
        at once in a forked helper, before the index is even opened (memctl.recall.embeddings.semantic_helper);
        `semantic`: that signal, opened and its helper started by the caller (with `ranking`)."""
        self.layout = layout
        self.ranking = ranking or Ranking.for_root(layout.root)
        if semantic is None:  # None without item vectors
            semantic = (SemanticSignal.open(layout, self.ranking) if query is None
                        else SemanticSignal.started_for(layout, self.ranking, query))
        self.semantic = semantic
        self.semantic_note: str | None = None  # memctl.recall.embeddings.semantic_status.search_note, once
        try:
            self._open_index(layout, options, refresh)
        except BaseException:
            if self.semantic is not None:
                self.semantic.close()  # the helper reaped
            raise

    def _open_index(self, layout: Layout, options: IndexOptions | None, refresh: bool) -> None:
        self.index = SearchIndex(layout, options)
        self.refresh_report: RefreshReport | None = None
        if refresh or not self.index.exists():
            self.refresh_report = self._refresh_safely()
        self.store = self._open()
        self.tokenizer = Tokenizer(VocabSegmenter(self.store))
        self.aliases = load_aliases(layout, self.tokenizer)

    def _refresh_safely(self) -> RefreshReport:
        try:
            return self.index.ensure_fresh()
        except sqlite3.DatabaseError:
            return self.index.rebuild()

    def _open(self) -> SQLiteStore:
        for attempt in range(2):
            try:
                return self.index.open_store()
            except sqlite3.DatabaseError:
                if attempt:
                    raise
                self.refresh_report = self.index.rebuild()
        raise AssertionError("unreachable")

    def warnings(self) -> list[str]:
        """What a reader of the results should know: sources the refresh could not read, layer
        files left out because they are links, a semantic signal given up."""
        found = [f"index: {error}" for error in (self.refresh_report.errors if self.refresh_report else [])]
        found += [f"{name} is a symlink, so it is not searched; memctl does not follow links in the memory "
                  "(remove the link; `memctl verify` lists them)" for name in linked_layer_files(self.layout)]
        if self.semantic is not None and self.semantic.warning:
            found.append(self.semantic.warning)
        elif self.semantic_note:
            found.append(self.semantic_note)
        return found

    def _semantic_reading(self) -> str:
        """Why the model the user expects did not rank this search, or "" (the stale vectors or
        the missing ones: memctl.recall.embeddings.semantic_status, read once per searcher; the model
        given up: its warning)."""
        if self.semantic_note is None:
            self.semantic_note = ""
            if self.semantic is not None or self.ranking.semantic_option("model"):
                from memctl.recall.embeddings.semantic import vectors_path
                from memctl.recall.embeddings.semantic_status import search_note

                self.semantic_note = search_note(str(self.layout.root), vectors_path(self.layout), self.ranking,
                                                 self.store, self.semantic is not None)
        if self.semantic is not None and self.semantic.warning:
            return self.semantic.warning
        return self.semantic_note

    def close(self) -> None:
        self.store.close()
        if self.semantic is not None:
            self.semantic.close()

    # -- planning

    def plan(self, query: str, fuzzy_threshold: float, asides: frozenset[str] = frozenset()) -> QueryPlan:
        """The query's terms the index holds (aliases expanded; not the characters of its
        Chinese stop words; not the parts of an identifier it does not hold whole), what a word
        it holds none of is read as (`_fall_back`), and at
        scale which terms are too common to gather candidates by. `asides`: the terms only in the sentences
        around the query's question (memctl.recall.ranking.focus), the last a long query keeps."""
        groups = list(self.tokenizer.token_groups(query))
        all_terms = expand_aliases([t for _, terms in groups for t in terms], self.aliases)
        dfs = self.store.document_frequencies(all_terms)
        parts = unheld_identifier_parts(groups, dfs)
        present = [t for t in all_terms if dfs.get(t) and t not in parts]
        pieces = stop_word_pieces(query, present)
        present = [t for t in present if t not in pieces] or present  # a query of stop words alone keeps them
        if len(present) > tuning.MAX_QUERY_TERMS:  # a long query keeps its most telling terms
            kept = set(by_priority(present, dfs, asides)[:tuning.MAX_QUERY_TERMS])
            present = [t for t in present if t in kept]
        plan = QueryPlan(terms=present)
        self._fall_back(plan, [surface for surface, terms in groups if terms and not any(dfs.get(t) for t in terms)],
                        fuzzy_threshold)
        plan.terms = list(dict.fromkeys(plan.terms))
        if self.store.item_count() >= tuning.COMMON_TERM_MIN_ITEMS and len(plan.terms) > 1:
            dfs.update(self.store.document_frequencies(plan.fallback_terms()))
            limit = self.store.item_count() * tuning.COMMON_TERM_SHARE
            common = frozenset(t for t in plan.terms if dfs.get(t, 0) > limit)
            if len(common) < len(plan.terms):  # a query of common terms alone gathers by them
                plan.common = common
        return plan

    def _fall_back(self, plan: QueryPlan, missing: list[str], fuzzy_threshold: float) -> None:
        """The words the index does not hold (`missing`, as typed) read as a typo's closest
        written word; when that leaves the query matching nothing, as the written words they
        begin or are inside (memctl.recall.ranking.fuzzy). Their terms join the plan's."""
        for surface in missing:
            fallback = fall_back(self.store, surface, fuzzy_threshold, completions=False)
            if fallback is not None:
                plan.fallbacks[surface] = fallback
        if not plan.terms and not plan.fallbacks:
            for surface in missing[:COMPLETED_WORDS]:
                fallback = fall_back(self.store, surface, fuzzy_threshold, completions=True)
                if fallback is not None:
                    plan.fallbacks[surface] = fallback
        plan.terms.extend(plan.fallback_terms())

    # -- running

    def search(self, request: SearchRequest) -> Hits:
        layers, k = resolve_layers(request)
        with self.store.search_scope():
            return self._search(request, layers, k)

    def _search(self, request: SearchRequest, layers: tuple[str, ...], k: int) -> Hits:
        focus = searched_focus(request.query, self.ranking.aside_weight)
        asides = aside_terms(focus, self.tokenizer.tokens)
        plan = self.plan(request.query, request.fuzzy_threshold, asides)
        filters = Filters(layers, parse_when(request.since), parse_when(request.until, end_of_day=True), request.type)
        question = focus.question if focus else request.query
        answer = expected_answer(question) if self.ranking.answer_type_weight > 0 else None
        period = named_period(question) if self.ranking.date_weight > 0 else None
        asked = Asked(answer, period, asides, plan.common)
        found = self._lexical(plan.terms, filters, k, asked) if plan.terms else []
        if self.semantic is not None:  # item embeddings ([semantic] extra): memctl.recall.embeddings.semantic
            fused = self.semantic.fuse(found, request.query, self.ranking, self.store,
                                       lambda rows: hydrate(self.store, rows), filters.admits)
            if fused is not found and self.ranking.fused_neighbour_weight > 0:  # fused: a new list
                # the turns next to a close match share in its fused score, as in the lexical stage
                fused = with_neighbours(self.store, fused, filters,
                                        self.ranking._replace(neighbour_weight=self.ranking.fused_neighbour_weight))
            found = fused
        ranked = _best_per_ref(found)
        if request.mode:  # the mode's layer order is a priority among hits that match alike
            ranked = by_layer_priority(self.store, ranked, plan.terms, layers, k)
        hits = plan.hits(ranked[:k], self._semantic_reading())
        self._load_texts(hits)
        for hit in hits:
            hit.snippet = make_snippet(hit.text, request.query, plan.terms)
        return hits

    def _lexical(self, terms: list[str], filters: Filters, k: int, asked: Asked = NOTHING_ASKED) -> list[Hit]:
        """The lexical stages in order (candidates, weighted BM25, the expected answer's type
        and the named date, session context, feedback, neighbours), given what the query asks
        beyond its terms (`asked`)."""
        answer, period, asides, common = asked
        ranking = self.ranking
        weights = ranking.term_weights(terms, asides)
        found, weighted = candidates(self.store, terms, filters, k, weights, common)
        if not found:
            return []
        if not weighted:
            weigh_terms(self.store, found, weights, ranking)
        favour_typed_answers(self.store, found, answer, ranking)
        favour_dated(self.store, found, period, ranking)
        ordered = sorted(found, key=lambda c: -c.score)
        sessions = list(dict.fromkeys(c.session for c in ordered if c.session))
        blend(found, session_scores(self.store, weights, sessions, ranking), filters.layers, ranking)
        found = with_session_feedback(self.store, found, terms, filters, ranking)
        return with_neighbours(self.store, found, filters, ranking)

    def _load_texts(self, hits: list[Hit]) -> None:
        """Texts only for the hits shown: candidates are ranked on their metadata alone."""
        texts = self.store.item_texts([h.rowid for h in hits])
        for hit in hits:
            hit.text = texts.get(hit.rowid, "")


MAX_K = 10_000  # results a search may return; -k past it is a typo, not a wish


def request_from_settings(settings, query: str, k: int | None = None, layers: str | None = None,
                          mode: str | None = None, since: str | None = None, until: str | None = None,
                          type: str | None = None) -> SearchRequest:
    """A request as the command line states it (`--layers L2,L5`), with the root's defaults:
    `[search] k` unless a mode sets it, `[search] fuzzy_threshold`."""
    wanted = tuple(part.strip().upper() for part in (layers or "").split(",") if part.strip()) or None
    if k is None and not mode:
        k = int(settings.get("search", "k"))
    return SearchRequest(query, k=k, layers=wanted, mode=mode, since=since, until=until, type=type,
                         fuzzy_threshold=float(settings.get("search", "fuzzy_threshold")))


def resolve_layers(request: SearchRequest) -> tuple[tuple[str, ...], int]:
    if request.mode and request.mode not in MODES:
        raise UsageError(f"unknown mode {request.mode!r}; choose one of {', '.join(MODES)}")
    mode_layers, mode_k = MODES.get(request.mode or "", (DEFAULT_LAYERS, 5))
    layers = request.layers or mode_layers
    for layer in layers:
        if layer not in ALL_LAYERS:
            raise UsageError(f"unknown layer {layer!r}; layers are {', '.join(ALL_LAYERS)}")
    k = request.k if request.k is not None else mode_k
    if k < 1:
        raise UsageError("-k must be at least 1")
    if k > MAX_K:
        raise UsageError(f"-k must be at most {MAX_K}")
    return tuple(layers), k


def _best_per_ref(hits: Iterable[Hit]) -> list[Hit]:
    best: dict[str, Hit] = {}
    for hit in hits:
        if hit.ref not in best or hit.score > best[hit.ref].score:
            best[hit.ref] = hit
    return sorted(best.values(), key=lambda h: (-h.score, h.ref))


def make_snippet(text: str, query: str, terms: Sequence[str]) -> str:
    """A one-line window of the text around the first place a query word appears."""
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    lowered = flat.lower()
    needles = [w.lower() for w in re.findall(r"\w{3,}", query)] + [t for t in terms if has_cjk(t)]
    needles += [t for t in terms if not t.startswith(LAYER_MARK)]
    positions = [p for p in (lowered.find(n) for n in needles if n) if p >= 0]
    centre = min(positions) if positions else 0
    start = max(0, centre - SNIPPET_CHARS // 3)
    piece = flat[start:start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(flat) else "")


def record_references(layout: Layout, hits: Iterable[Hit], store=None) -> None:
    """One line per L5 hit in .memctl/refs.log: `ISO-time<TAB>entry-id` (lock-free append); on a
    server memory a row per hit in its `refs` table, through the open index `store`."""
    ids = [h.item_id for h in hits if h.layer == "L5" and h.item_id]
    on_server = store.record_refs if getattr(store, "on_server", False) else None
    record_used(layout, ids, clock.iso(), on_server)


def search_once(layout: Layout, request: SearchRequest, options: IndexOptions | None = None,
                refresh: bool = True, on_warning=None, ranking: Ranking | None = None,
                semantic: SemanticSignal | None = None) -> Hits:
    """One search with the index opened and closed around it; L5 hits are recorded as references.
    `on_warning(text)` hears each of `Searcher.warnings`; `ranking` and `semantic` (its helper
    started for this request's query: SemanticSignal.started_for) when the caller has them."""
    searcher = Searcher(layout, options, refresh=refresh, ranking=ranking, query=request.query, semantic=semantic)
    try:
        hits = searcher.search(request)
        record_references(layout, hits, searcher.store)
    finally:
        for warning in searcher.warnings() if on_warning else ():
            on_warning(warning)
        searcher.close()
    return hits
