"""A ranked item as the stages pass it along, and how one is read from the store."""

from __future__ import annotations

import heapq

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.indexing.store import SQLiteStore


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



class Hits(list):
    """One search's hits, best first, and how it read the words the memory does not hold:
    `corrected`, a typed word -> the written word searched instead (a typo); `completed`, a
    typed word -> the written words it begins or is inside (nothing else matched); `semantic`,
    why the embedding model the user expects did not rank these (memctl.recall.embeddings.semantic_status)."""

    def __init__(self, hits=(), corrected: dict[str, str] | None = None,
                 completed: dict[str, list[str]] | None = None, semantic: str = ""):
        super().__init__(hits)
        self.corrected = corrected or {}
        self.completed = completed or {}
        self.semantic = semantic

    def readings(self) -> dict:
        """The JSON fields a hit line carries beside its own: only those that say something."""
        return {name: value for name, value in (("corrected", self.corrected), ("completed", self.completed),
                                                ("semantic", self.semantic)) if value}

    def hit_json(self, hit: Hit) -> dict:
        return {**hit.to_json(), **self.readings()}

    def note(self) -> str:
        """`showing results for …` when a word was read as another, else ''."""
        read = [f"{shown} (for {typed})" for typed, shown in self.corrected.items()]
        read += [f"{' / '.join(shown)} (for {typed})" for typed, shown in self.completed.items()]
        return f"showing results for {', '.join(read)}" if read and self else ""


def hydrate(store: SQLiteStore, rows: Sequence[tuple[int, float]], context_only: bool = False) -> list[Hit]:
    """Hits for (rowid, rank) rows, scored -rank, without their texts (loaded for the hits shown
    only); with context_only, only the items that are part of a session's context document."""
    if not rows:
        return []
    scores = {rowid: -rank for rowid, rank in rows}
    return [Hit(ref, layer, scores[rowid], date or "", type_ or "", "", item_id or "", session or "",
                rowid=rowid, in_context=bool(ctx))
            for rowid, ref, layer, date, type_, item_id, session, ctx in
            store.item_rows(list(scores), context_only=context_only)]


def scale_where_text(store: SQLiteStore, candidates: list[Hit], matches, factor: float, among: int) -> None:
    """The best `among` candidates whose text `matches` (a str -> bool), their scores times
    `factor` (in place; the others keep theirs): one read of those texts, not of thousands."""
    top = heapq.nlargest(among, candidates, key=lambda h: h.score)
    texts = store.item_texts([h.rowid for h in top])
    for hit in top:
        if matches(texts.get(hit.rowid) or ""):
            hit.score *= factor
