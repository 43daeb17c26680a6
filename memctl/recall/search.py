"""Queries over the index: modes, filters, fuzzy fallback, session context, ranking.

A query is tokenized like the documents, except that CJK runs are cut against the index's own
vocabulary (a jieba-style best route over the terms the index holds), so a Chinese query
never loads jieba's 0.7 s dictionary. Terms missing from the index are replaced by their
closest index terms (rapidfuzz), which is how a typo still finds its item.

Score = bm25 of the item (normalised to the best candidate) + session_weight × bm25 of the
item's session as one document (normalised likewise), times a small per-layer priority from
the mode. An item whose session as a whole matches the query therefore ranks higher.

The item's bm25 is computed again in Python for the best candidates when the query's terms
overlap (Chinese words, their pieces and their characters: memctl.recall.text.query_term_weights),
so that each piece counts for less than the word it belongs to; session documents weigh their
terms the same way (one FTS5 statement per weight). Then two kinds of context share in a
strong match's score: items of its session that speak of the same things (session feedback:
what the match holds beyond the query, say the person 我上司 of "我上司的电话是…", marks the
other items about that person) and the turns right before and after it (the answer often
follows the turn that asks).
"""

from __future__ import annotations

import re
import sqlite3
from collections import namedtuple
from datetime import datetime, timedelta

from memctl.core import clock
from memctl.core.config import Layout
from memctl.core.errors import UsageError
from memctl.recall.index import (LAYER_MARK, IndexOptions, RefreshReport, SearchIndex, VocabSegmenter, connect,
                          layer_token, meta_get)
from memctl.longterm.refs import record_refs
from memctl.recall.ranking import Ranking
from memctl.recall.semantic import SemanticSignal
from memctl.recall.scoring import fts_totals, idf_weights, score_bodies
from memctl.recall.text import Alias, Tokenizer, expand_aliases, has_cjk, parse_aliases, query_term_weights

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterable, Sequence

ALL_LAYERS = ("L2", "L3", "L4", "L5", "L6")
DEFAULT_LAYERS = ("L2", "L3", "L4", "L5")
MODES: dict[str, tuple[tuple[str, ...], int]] = {
    "reply": (("L5", "L4", "L2"), 3),
    "deep": (("L5", "L4", "L6"), 5),
    "earlier": (("L4", "L5"), 3),
    "recall": (("L5", "L4"), 3),
}
LAYER_PRIORITY_STEP = 0.05  # a mode's first layer wins ties over its second, and so on
MIN_CANDIDATES = 200
MAX_CANDIDATES = 20_000
COMMON_TERM_SHARE = 0.1  # at scale, terms in more than this share of items carry almost no signal
COMMON_TERM_MIN_ITEMS = 50_000
MAX_QUERY_TERMS = 64
SMALL_INDEX_ITEMS = 20_000  # below this, every match is ranked
RANK_ALL_LIMIT = 2_000  # above this many expected matches, bound the ranking work
NEWEST_MATCHES = 500
SMALL_SESSION_DOCS = 500  # up to this many session documents, rank them all (FTS5 bm25, one statement per weight)
SESSIONS_SCORED = 30  # beyond it, score the sessions of the best candidates only
SNIPPET_CHARS = 160
# the weights (session, neighbours, feedback, term pieces, fusion): memctl.recall.ranking, [ranking] in memctl.toml


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


class Hit:
    """One ranked item (text and snippet are loaded for the hits shown only)."""

    __slots__ = ("ref", "layer", "score", "date", "type", "text", "item_id", "session", "snippet", "rowid",
                 "in_context")

    def __init__(self, ref: str, layer: str, score: float, date: str, type: str, text: str, item_id: str,
                 session: str, snippet: str = "", rowid: int = 0, in_context: bool = True):
        self.ref, self.layer, self.score, self.date, self.type = ref, layer, score, date, type
        self.text, self.item_id, self.session, self.snippet = text, item_id, session, snippet
        self.rowid = rowid
        self.in_context = in_context  # part of its session's context document

    def __repr__(self) -> str:
        return f"Hit({self.ref!r}, {self.layer!r}, score={self.score:.4f})"

    def tsv_line(self) -> str:
        """The plain output line (stdout not a terminal): ref, layer, score, snippet on one line."""
        return f"{self.ref}\t{self.layer}\t{self.score:.3f}\t{' '.join(self.snippet.split())}"

    def to_json(self) -> dict:
        data = {"ref": self.ref, "layer": self.layer, "score": round(self.score, 4), "date": self.date,
                "type": self.type, "text": self.text}
        if self.item_id:
            data["id"] = self.item_id
        if self.session:
            data["session"] = self.session
        return data


class QueryPlan:
    __slots__ = ("terms", "fuzzy", "dropped_common")

    def __init__(self, terms: list[str]):
        self.terms = terms
        self.fuzzy: dict[str, str] = {}  # typed term -> index term used instead
        self.dropped_common: list[str] = []


# ---------------------------------------------------------------- dates

def parse_when(text: str | None, end_of_day: bool = False) -> str | None:
    """ISO dates, or python-dateutil phrases, or `3 days ago` / `last week` / `yesterday`."""
    if not text:
        return None
    raw = text.strip()
    now = clock.now()
    relative = _relative_date(raw.lower(), now)
    if relative is not None:
        return relative.isoformat(timespec="seconds")
    try:
        value = datetime.fromisoformat(raw)
        date_only = len(raw) <= 10
    except ValueError:
        from dateutil import parser as date_parser

        try:
            value = date_parser.parse(raw, default=now.replace(hour=0, minute=0, second=0, microsecond=0))
        except (ValueError, OverflowError):
            raise UsageError(f"cannot read the date {text!r}: use ISO (2026-04-05) or e.g. '3 days ago'") from None
        date_only = value.hour == value.minute == value.second == 0
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    if end_of_day and date_only:
        value = value.replace(hour=23, minute=59, second=59)
    return value.isoformat(timespec="seconds")


_AGO = re.compile(r"^(\d+)\s*(minute|hour|day|week|month|year)s?\s+ago$")


def _relative_date(raw: str, now: datetime) -> datetime | None:
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"today": midnight, "yesterday": midnight - timedelta(days=1), "now": now,
             "last week": midnight - timedelta(days=7), "last month": midnight - timedelta(days=30),
             "last year": midnight - timedelta(days=365)}
    if raw in named:
        return named[raw]
    match = _AGO.match(raw)
    if not match:
        return None
    from dateutil.relativedelta import relativedelta

    count, unit = int(match.group(1)), match.group(2)
    return now - relativedelta(**{f"{unit}s": count})


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
                 ranking: Ranking | None = None):
        self.layout = layout
        self.ranking = ranking or Ranking.for_root(layout.root)
        self.semantic = SemanticSignal.open(layout, self.ranking)  # None without item vectors
        self.index = SearchIndex(layout, options)
        self.refresh_report: RefreshReport | None = None
        if refresh or not self.index.path.exists():
            self.refresh_report = self._refresh_safely()
        self.db = self._open()
        self.tokenizer = Tokenizer(VocabSegmenter(self.db))
        self.aliases = load_aliases(layout, self.tokenizer)
        self.item_count = int(meta_get(self.db, "items", "0") or 0)
        self._totals: dict[str, tuple[int, int]] = {}  # FTS5 table -> (rows, terms), for bm25 in Python

    def _refresh_safely(self) -> RefreshReport:
        try:
            return self.index.ensure_fresh()
        except sqlite3.DatabaseError:
            return self.index.rebuild()

    def _open(self) -> sqlite3.Connection:
        for attempt in range(2):
            try:
                db = connect(self.index.path)
                db.execute("SELECT count(*) FROM meta").fetchone()
                return db
            except sqlite3.DatabaseError:
                if attempt:
                    raise
                self.refresh_report = self.index.rebuild()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.db.close()
        if self.semantic is not None:
            self.semantic.close()

    # -- planning

    def plan(self, query: str, fuzzy_threshold: float) -> QueryPlan:
        groups = list(self.tokenizer.token_groups(query))
        all_terms = expand_aliases([t for _, terms in groups for t in terms], self.aliases)
        dfs = self._document_frequencies(all_terms)
        present = [t for t in all_terms if dfs.get(t)]
        if len(present) > MAX_QUERY_TERMS:  # a long query keeps its most telling (rarest) terms
            rarest = set(sorted(present, key=lambda t: dfs[t])[:MAX_QUERY_TERMS])
            present = [t for t in present if t in rarest]
        plan = QueryPlan(terms=present)
        for surface, terms in groups:
            if terms and not any(dfs.get(t) for t in terms):
                replacement = self._closest_term(surface.lower(), fuzzy_threshold)
                if replacement:
                    plan.fuzzy[surface] = replacement
                    plan.terms.append(replacement)
        plan.terms = list(dict.fromkeys(plan.terms))
        if self.item_count >= COMMON_TERM_MIN_ITEMS and len(plan.terms) > 1:
            dfs.update(self._document_frequencies(list(plan.fuzzy.values())))
            limit = self.item_count * COMMON_TERM_SHARE
            rare = [t for t in plan.terms if dfs.get(t, 0) <= limit]
            if rare:
                plan.dropped_common = [t for t in plan.terms if t not in rare]
                plan.terms = rare
        return plan

    def _document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        terms = list(dict.fromkeys(terms))
        for start in range(0, len(terms), 500):
            part = terms[start:start + 500]
            marks = ",".join("?" * len(part))
            found.update(self.db.execute(f"SELECT term, df FROM vocab WHERE term IN ({marks})", part).fetchall())
        return found

    def _closest_term(self, word: str, threshold: float) -> str | None:
        """The index term of the surface word closest to a word the index does not hold (a typo)."""
        if len(word) < 4 or has_cjk(word) or not word.isalpha():
            return None
        from rapidfuzz import fuzz, process

        upper = chr(ord(word[0]) + 1)
        rows = self.db.execute("SELECT word, term FROM surface WHERE word >= ? AND word < ? LIMIT 300000",
                               (word[0], upper)).fetchall()
        terms = {w: t for w, t in rows if abs(len(w) - len(word)) <= 2}
        best = process.extractOne(word, list(terms), scorer=fuzz.ratio, score_cutoff=threshold)
        if not best:
            return None
        term = terms[best[0]]
        return term if self._document_frequencies([term]).get(term) else None

    # -- running

    def search(self, request: SearchRequest) -> list[Hit]:
        layers, k = resolve_layers(request)
        plan = self.plan(request.query, request.fuzzy_threshold)
        since = parse_when(request.since)
        until = parse_when(request.until, end_of_day=True)
        candidates = self._lexical(plan.terms, layers, since, until, request.type, k) if plan.terms else []
        if self.semantic is not None:  # item embeddings ([semantic] extra): memctl.recall.semantic
            candidates = self.semantic.fuse(candidates, request.query, self.ranking, self.db, self._hydrate,
                                            lambda h: h.layer in layers and _passes(h, since, until, request.type))
        hits = _best_per_ref(candidates)[:k]
        self._load_texts(hits)
        for hit in hits:
            hit.snippet = make_snippet(hit.text, request.query, plan.terms)
        return hits

    def _lexical(self, terms: list[str], layers, since, until, type_, k) -> list[Hit]:
        candidates, weighted = self._candidates(terms, layers, since, until, type_, k)
        if not candidates:
            return []
        if not weighted:
            self._weigh_terms(candidates, terms)
        ordered = sorted(candidates, key=lambda c: -c.score)
        session_scores = self._session_scores(terms, list(dict.fromkeys(c.session for c in ordered if c.session))
                                              ) if self.ranking.session_weight else {}
        priority = {layer: 1.0 - LAYER_PRIORITY_STEP * i for i, layer in enumerate(layers)}
        best_item = max(c.score for c in candidates) or 1.0
        for hit in candidates:
            item_part = hit.score / best_item
            session_part = session_scores.get(hit.session, 0.0)
            if not hit.session or not hit.in_context:  # it is (also) its own one-item session
                session_part = max(session_part, item_part)
            hit.score = (item_part + self.ranking.session_weight * session_part) * priority.get(hit.layer, 1.0)
        candidates = self._with_session_feedback(candidates, terms, layers, since, until, type_)
        return self._with_neighbours(candidates, layers, since, until, type_)

    def _load_texts(self, hits: list[Hit]) -> None:
        """Texts only for the hits shown: candidates are ranked on their metadata alone."""
        marks = ",".join("?" * len(hits))
        texts = dict(self.db.execute(f"SELECT rowid, text FROM items WHERE rowid IN ({marks})",
                                     [h.rowid for h in hits]).fetchall()) if hits else {}
        for hit in hits:
            hit.text = texts.get(hit.rowid, "")

    def _candidates(self, terms, layers, since, until, type_, k) -> tuple[list[Hit], bool]:
        """The items worth ranking, scored, and whether the query's term weights are in the
        scores already (the large-memory path scores in Python with them)."""
        match = " OR ".join(f'"{t}"' for t in terms)
        layer_clause = ""
        present_layers = self._present_layers()
        if not set(present_layers) <= set(layers):
            wanted = [layer_token(layer) for layer in layers if layer in present_layers]
            if not wanted:
                return [], True
            layer_clause = " OR ".join(f'"{w}"' for w in wanted)
            match = f"({match}) AND ({layer_clause})"
        limit = max(MIN_CANDIDATES, k * 20)
        rankable = self._rankable_terms(terms)
        if rankable is not None:
            return self._bounded_candidates(terms, rankable, layer_clause, limit, since, until, type_), True
        while True:
            rows = self.db.execute("SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                                   (match, limit)).fetchall()
            hits = self._hydrate(rows)
            kept = [h for h in hits if _passes(h, since, until, type_)]
            enough = len({h.ref for h in kept}) >= k
            if enough or len(rows) < limit or limit >= MAX_CANDIDATES:
                return kept, False
            limit *= 4

    def _weigh_terms(self, candidates: list[Hit], terms: Sequence[str]) -> None:
        """The best candidates' bm25 again, in Python, each query term's IDF scaled by its weight
        (query_term_weights); the others keep their order below them. Nothing to do when every
        weight is 1 (an English query)."""
        weights = self._term_weights(terms)
        if all(w == 1.0 for w in weights.values()):
            return
        top = sorted(candidates, key=lambda h: -h.score)[:self.ranking.items_rescored]
        bodies = self._bodies([h.rowid for h in top])
        rows, total_terms = self._fts_totals("fts")
        if not rows or len(bodies) < len(top):
            return  # the index does not give what the formula needs: the scores so far stand
        scores = score_bodies(bodies.items(), self._idf(terms, weights), total_terms / rows)
        factor = 1.0
        for hit in top:
            old = hit.score
            hit.score = scores.get(hit.rowid, 0.0)
            if old > 0:
                factor = min(factor, hit.score / old)
        rescored = {h.rowid for h in top}
        for hit in candidates:
            if hit.rowid not in rescored:
                hit.score *= factor

    def _bodies(self, rowids: Sequence[int], table: str = "fts") -> dict[int, str]:
        """The indexed bodies of the given rows of `fts` (the layer token, then the terms) or of
        `sfts` (a session's terms), space-separated. Read from FTS5's own content table
        (`<table>_content`, columns id and c0: its on-disk format), a plain b-tree lookup that
        costs half of going through the virtual table."""
        found: dict[int, str] = {}
        for start in range(0, len(rowids), 900):
            part = list(rowids[start:start + 900])
            marks = ",".join("?" * len(part))
            try:
                rows = self.db.execute(f"SELECT id, c0 FROM {table}_content WHERE id IN ({marks})", part).fetchall()
            except sqlite3.DatabaseError:
                rows = self.db.execute(f"SELECT rowid, body FROM {table} WHERE rowid IN ({marks})", part).fetchall()
            found.update((rowid, body) for rowid, body in rows if body is not None)
        return found

    def _idf(self, terms: Sequence[str], weights: dict[str, float] | None = None) -> dict[str, float]:
        """Each term's IDF over the items (the index's own counts), times its query weight."""
        idf = idf_weights(self._document_frequencies(list(terms)), self.item_count)
        return {t: w * weights.get(t, 1.0) for t, w in idf.items()} if weights else idf

    def _with_session_feedback(self, candidates: list[Hit], terms: Sequence[str], layers, since, until,
                               type_) -> list[Hit]:
        """Items of a strong match's session that share what the match holds beyond the query
        share in its score: asked "the one whose phone is 136…, what are their hobbies?", the
        match "我上司的电话是136…" lends its score to "我的上司喜欢攀岩" (both about 我上司), which
        holds no query word, and not to the rest of the session. The share is the IDF-weighted
        part of the match's other terms the item also has. Only the best feedback_sources
        matches lend, to the items within feedback_span rows of them: bounded work."""
        if self.ranking.feedback_weight <= 0:
            return candidates
        by_rowid = {h.rowid: h for h in candidates}
        sources = sorted((h for h in candidates if h.session and h.in_context), key=lambda h: -h.score)
        sources = sources[:self.ranking.feedback_sources]
        related: dict[int, list[Hit]] = {}
        for source in sources:
            for (rowid,) in self.db.execute(
                    "SELECT rowid FROM items WHERE session = ? AND ctx = 1 AND rowid BETWEEN ? AND ?",
                    (source.session, source.rowid - self.ranking.feedback_span,
                     source.rowid + self.ranking.feedback_span)):
                if rowid != source.rowid:
                    related.setdefault(rowid, []).append(source)
        if not related:
            return candidates
        for hit in self._hydrate([(r, 0.0) for r in related if r not in by_rowid], context_only=True):
            if hit.layer in layers and _passes(hit, since, until, type_):
                hit.score = 0.0
                by_rowid[hit.rowid] = hit
        bodies = {r: set(b.split()[1:]) for r, b in self._bodies([*related, *(s.rowid for s in sources)]).items()}
        query = set(terms)
        beyond = {s.rowid: bodies.get(s.rowid, set()) - query for s in sources}
        dfs = self._document_frequencies(sorted(set().union(*beyond.values())))
        idf = idf_weights(dfs, self.item_count)
        lent = {s.rowid: s.score for s in sources}
        for rowid, lenders in related.items():
            hit = by_rowid.get(rowid)
            if hit is None:
                continue
            best = 0.0
            for source in lenders:
                own = beyond[source.rowid]
                whole = sum(idf.get(t, 0.0) for t in own)
                if whole > 0:
                    shared = sum(idf.get(t, 0.0) for t in own & bodies.get(rowid, set()))
                    best = max(best, lent[source.rowid] * shared / whole)
            hit.score += self.ranking.feedback_weight * best
        return [h for h in by_rowid.values() if h.score > 0]

    def _with_neighbours(self, candidates: list[Hit], layers, since, until, type_) -> list[Hit]:
        """Conversation turns next to a strong match share in its score (the answer often
        follows the turn that asks); adjacent means the next or previous item of the same session."""
        if self.ranking.neighbour_weight <= 0:
            return candidates
        by_rowid = {h.rowid: h for h in candidates}
        top = sorted((h for h in candidates if h.session), key=lambda h: -h.score)[:self.ranking.neighbour_sources]
        wanted = {r: h.session for h in top for r in (h.rowid - 1, h.rowid + 1)}
        missing = [(r, 0.0) for r in wanted if r not in by_rowid]
        for hit in self._hydrate(missing, context_only=True):
            if hit.session == wanted[hit.rowid] and hit.layer in layers and _passes(hit, since, until, type_):
                hit.score = 0.0
                by_rowid[hit.rowid] = hit
        base = {rowid: h.score for rowid, h in by_rowid.items()}
        for rowid, hit in by_rowid.items():
            if not hit.session:
                continue
            near = [base[r] for r in (rowid - 1, rowid + 1) if r in by_rowid and by_rowid[r].session == hit.session]
            if near:
                hit.score += self.ranking.neighbour_weight * max(near)
        return [h for h in by_rowid.values() if h.score > 0]

    def _term_weights(self, terms: Sequence[str]) -> dict[str, float]:
        return query_term_weights(terms, self.ranking.cjk_char_weight, self.ranking.cjk_part_weight)

    @staticmethod
    def _match(terms: Sequence[str], layer_clause: str) -> str:
        match = " OR ".join(f'"{t}"' for t in terms)
        return f"({match}) AND ({layer_clause})" if layer_clause else match

    def _rankable_terms(self, terms: Sequence[str]) -> list[str] | None:
        """None when every match can be ranked (small memory, or rare words only); else the
        rarest terms whose matches together stay within the ranking budget."""
        if self.item_count <= SMALL_INDEX_ITEMS:
            return None
        dfs = self._document_frequencies(list(terms))
        if sum(dfs.values()) <= RANK_ALL_LIMIT:
            return None
        rankable, total = [], 0
        for term in sorted(terms, key=lambda t: dfs.get(t, 0)):
            total += dfs.get(term, 0)
            if total > RANK_ALL_LIMIT:
                break
            rankable.append(term)
        return rankable

    def _bounded_candidates(self, terms, rankable, layer_clause, limit, since, until, type_) -> list[Hit]:
        """Cost flat in memory size: every item with a rare query word, and the newest items
        with the common ones, are scored by the whole query in Python (memctl.recall.scoring), each
        term weighted as query_term_weights says — FTS5's bm25() would first walk every match
        of every query word."""
        rowids: set[int] = set()
        if rankable:
            rowids.update(r for (r,) in self.db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?", (self._match(rankable, layer_clause), MAX_CANDIDATES)))
        # single CJK characters are a small memory's fallback; at this size the words suffice
        words = [t for t in terms if not (len(t) == 1 and has_cjk(t))] or list(terms)
        if len(rowids) < limit:  # else items with common words only could not reach the top anyway
            rowids.update(r for (r,) in self.db.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?",
                (self._match(words, layer_clause), NEWEST_MATCHES)))
        scores = self._python_bm25("fts", words, sorted(rowids), self._term_weights(terms))
        rows = sorted(scores.items(), key=lambda r: -r[1])[:limit]
        return [h for h in self._hydrate([(rowid, -score) for rowid, score in rows]) if _passes(h, since, until, type_)]

    def _python_bm25(self, table: str, terms: Sequence[str], rowids: Sequence[int],
                     weights: dict[str, float] | None = None) -> dict[int, float]:
        """bm25 of the given rows of `fts` or `sfts`, as FTS5 would score them (memctl.recall.scoring),
        with the items' IDF for both tables."""
        if not rowids:
            return {}
        rows, total_terms = self._fts_totals(table)
        return score_bodies(self._bodies(rowids, table).items(), self._idf(terms, weights),
                            total_terms / rows if rows else 0.0)

    def _fts_totals(self, table: str) -> tuple[int, int]:
        if table not in self._totals:
            self._totals[table] = fts_totals(self.db, table)
        return self._totals[table]

    def _present_layers(self) -> tuple[str, ...]:
        if not hasattr(self, "_layers_cache"):
            # a layer that lost all its items may still be listed: that only costs a redundant filter
            self._layers_cache = tuple(filter(None, meta_get(self.db, "layers").split(",")))
        return self._layers_cache

    def _hydrate(self, rows, context_only: bool = False) -> list[Hit]:
        if not rows:
            return []
        scores = {rowid: -rank for rowid, rank in rows}
        hits = []
        ids = list(scores)
        only_context = " AND ctx = 1 AND session != ''" if context_only else ""
        for start in range(0, len(ids), 900):
            part = ids[start:start + 900]
            marks = ",".join("?" * len(part))
            for rowid, ref, layer, date, type_, item_id, session, ctx in self.db.execute(
                    f"SELECT rowid, ref, layer, date, type, item_id, session, ctx FROM items "
                    f"WHERE rowid IN ({marks}){only_context}", part):
                hits.append(Hit(ref, layer, scores[rowid], date or "", type_ or "", "", item_id or "", session or "",
                                rowid=rowid, in_context=bool(ctx)))
        return hits

    def _weighted_session_rows(self, terms: list[str]) -> list[tuple[str, float]]:
        """The best session documents' bm25, each query term weighted as for items
        (query_term_weights). FTS5's bm25 is a sum over the query's terms, so one statement per
        weight (one for an English query, up to three for a Chinese one) adds up to it."""
        weights = self._term_weights(terms)
        groups: dict[float, list[str]] = {}
        for term in terms:
            groups.setdefault(weights[term], []).append(term)
        totals: dict[str, float] = {}
        for weight, group in groups.items():
            for key, score in self.db.execute(
                    "SELECT sessions.key, -sfts.rank FROM sfts JOIN sessions ON sessions.rowid = sfts.rowid "
                    "WHERE sfts MATCH ? ORDER BY sfts.rank LIMIT 200", (" OR ".join(f'"{t}"' for t in group),)):
                totals[key] = totals.get(key, 0.0) + weight * score
        return list(totals.items())

    def _session_scores(self, terms: list[str], sessions: list[str]) -> dict[str, float]:
        """bm25 of each candidate's session as one document, relative to the best session."""
        if not sessions:
            return {}
        session_docs = self.db.execute("SELECT max(rowid) FROM sessions").fetchone()[0] or 0
        if session_docs <= SMALL_SESSION_DOCS:
            rows = self._weighted_session_rows(terms)
        else:  # many sessions: score only the candidates' own, in Python (see _bounded_candidates)
            wanted = list(sessions)[:SESSIONS_SCORED]
            keys = dict(self.db.execute(f"SELECT rowid, key FROM sessions WHERE key IN ({','.join('?' * len(wanted))})",
                                        wanted).fetchall())
            rows = [(keys[rowid], score) for rowid, score in
                    self._python_bm25("sfts", terms, sorted(keys), self._term_weights(terms)).items()]
        if not rows:
            return {}
        best = max(score for _, score in rows) or 1.0
        return {key: score / best for key, score in rows}


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
    return tuple(layers), k


def _passes(hit: Hit, since: str | None, until: str | None, type_: str | None) -> bool:
    if type_ and hit.type != type_:
        return False
    if since and (not hit.date or hit.date < since):
        return False
    if until and (not hit.date or hit.date > until):
        return False
    return True


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


def record_references(layout: Layout, hits: Iterable[Hit]) -> None:
    """One line per L5 hit in .memctl/refs.log: `ISO-time<TAB>entry-id` (lock-free append)."""
    ids = [h.item_id for h in hits if h.layer == "L5" and h.item_id]
    if not ids or not layout.state_dir.is_dir():
        return
    try:
        record_refs(layout.refs_log, ids, clock.iso())
    except OSError:
        pass  # a reference count is a hint; a read-only memory must still be searchable


def search_once(layout: Layout, request: SearchRequest, options: IndexOptions | None = None,
                refresh: bool = True, on_warning=None) -> list[Hit]:
    """One search with the index opened and closed around it; L5 hits are recorded as references.
    `on_warning(text)` hears of a semantic signal given up (a missing model: lexical results)."""
    searcher = Searcher(layout, options, refresh=refresh)
    try:
        hits = searcher.search(request)
    finally:
        if on_warning and searcher.semantic is not None and searcher.semantic.warning:
            on_warning(searcher.semantic.warning)
        searcher.close()
    record_references(layout, hits)
    return hits


# ---------------------------------------------------------------- show: the whole item a ref names

class Item(namedtuple("Item", "layer key text", defaults=("",))):
    """layer: L2 L3 L4 L5 L6, or "L4-session" for an archived session (shown by the L4 module)."""

    __slots__ = ()


def find_item(layout: Layout, ref: str) -> Item | None:
    """The item a search ref names; None when it is not one of L2/L3/L5/L6 or a history line
    (then it may be a session name, which the L4 module resolves)."""
    import json

    from memctl.longterm.entries import iter_entries
    from memctl.core.errors import NotFound
    from memctl.core.redact import redact

    layer, _, key = ref.partition(":")
    if layer in ("L5", "L6") or not key:
        stores = {"L5": [layout.long_term], "L6": [layout.cold_archive]}.get(layer, [layout.long_term,
                                                                                   layout.cold_archive])
        wanted = key if key else ref
        for number, path in enumerate(stores):
            found = None
            for entry in iter_entries(path):
                if entry.id == wanted:
                    found = entry  # L6 may hold an id more than once: its last line is its state
            if found is not None:
                name = layer if key else ("L5" if path == layout.long_term else "L6")
                return Item(name, wanted, json.dumps(found.to_dict(), ensure_ascii=False))
        if key:
            raise NotFound(f"no entry {wanted!r} in {layer}")
        return None
    if layer == "L2":
        from memctl.recall.index import l2_docs

        text = _read_text(layout.global_mem)
        for doc in l2_docs(text):
            if doc.ref == ref:
                return Item("L2", key, doc.text)
        raise NotFound(f"no section [{key}] in {layout.global_mem.name}")
    if layer == "L3":
        path_part = key.rsplit(":", 1)[0] if re.search(r":\d+$", key) else key
        path = (layout.root / path_part).resolve()
        if layout.root.resolve() not in path.parents or not path.is_file():
            raise NotFound(f"no L3 file {path_part!r} in the memory")
        return Item("L3", path_part, redact(_read_text(path)))
    if layer == "L4":
        session, _, line = key.partition("#h")
        if line.isdigit():
            lines = _read_text(layout.histories).splitlines()
            number = int(line)
            if 1 <= number <= len(lines):
                return Item("L4", key, redact(lines[number - 1]))
            raise NotFound(f"no line {number} in {layout.histories.name}")
        return Item("L4-session", session)
    return None


def _read_text(path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
