"""`remember`: write one fact into L5 under its type's write policy (design.md §6, §8).

merge types supersede the active entry with the same (type, topic) key — the old version is
written to L6 first (reason `superseded`), then L5 is replaced, so a crash in between leaves
a duplicate, never a loss. append types add a line, unless a near-duplicate of the same type
is active, whose `seen` is raised instead. A fact that was forgotten is refused unless
forced, so a deletion sticks. Everything happens under the writer lock, held for one read
and one write of L5 — which is what keeps a `remember` during a dream short.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.longterm.entries import (
    Entry,
    append_entries,
    content_hash,
    entries_with,
    field_bytes,
    new_id,
    parse_rows,
    row_for,
    texts_of_type,
    write_rows,
)
from memctl.core.errors import MemctlError, UsageError
from memctl.core.fsutil import WriterLock
from memctl.longterm.policies import best_match, merge_key, near_duplicate, normalize, policy_for, similarity_threshold

ADDED = "added"
SUPERSEDED = "superseded"
SEEN = "seen"


class ForgottenFact(MemctlError):
    """The fact being remembered was deliberately forgotten before."""


@dataclass
class RememberRequest:
    text: str
    type: str
    topic: str = ""
    confidence: float = 5
    source: str = ""
    force: bool = False
    contradicts: list[str] = field(default_factory=list)  # ids this fact proves wrong; the dream forgets them


@dataclass
class RememberResult:
    action: str  # added | superseded | seen
    entry: Entry
    previous: Entry | None  # the superseded entry, or the near-duplicate before its `seen` rose
    score: float | None
    l5_count: int
    auto_dream_due: bool

    def to_dict(self) -> dict:
        data = {"id": self.entry.id, "action": self.action, "type": self.entry.type, "l5_entries": self.l5_count}
        if self.previous is not None:
            data["previous"] = self.previous.id
        if self.score is not None:
            data["score"] = round(self.score, 1)
        if self.action == SEEN:
            data["seen"] = self.entry.seen
        return data


def validate(settings: Settings, request: RememberRequest) -> None:
    policy = policy_for(settings, request.type)
    if not request.text.strip():
        raise UsageError("nothing to remember: the text is empty")
    if policy.merges and not request.topic.strip():
        raise UsageError(
            f"type {request.type!r} merges by topic: pass --topic (the thing it is about, e.g. --topic editor)"
        )
    if not 0 <= request.confidence <= 10:
        raise UsageError(f"--confidence must be between 0 and 10, got {request.confidence}")


def remember(settings: Settings, request: RememberRequest, now: datetime, lock_wait: float) -> RememberResult:
    validate(settings, request)
    layout = settings.layout
    with WriterLock(layout.lock, wait_seconds=lock_wait):
        data = _read(layout.long_term)
        if not request.force:
            check_not_forgotten(settings, request.text, data)
        result = _write(settings, request, data, now)
    return result


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def check_not_forgotten(settings: Settings, text: str, l5_data: bytes) -> None:
    """Refuse a fact whose last L6 line says forgotten or purged, unless it is active again."""
    l6 = _read(settings.layout.cold_archive)
    last: dict[str, Entry] = {}
    for marker in (field_bytes("reason", "forgotten"), field_bytes("reason", "purged")):
        for entry in entries_with(l6, marker):
            if entry.reason in ("forgotten", "purged"):
                last[entry.id] = entry
    if not last:
        return

    def still_gone(entry: Entry) -> bool:
        """Not restored to L5, and no later L6 line says it left for another reason (checked for hits only)."""
        if field_bytes("id", entry.id) in l5_data:
            return False
        final = l6.rfind(field_bytes("id", entry.id))
        line = l6[l6.rfind(b"\n", 0, final) + 1: l6.find(b"\n", final) if l6.find(b"\n", final) >= 0 else len(l6)]
        return field_bytes("reason", "forgotten") in line or field_bytes("reason", "purged") in line

    digest = content_hash(text)
    for entry in last.values():
        if entry.extra.get("sha256") == digest and still_gone(entry):
            raise ForgottenFact(f"this fact was purged as {entry.id}; pass --force to remember it again")
    candidates = [e for e in last.values() if e.text]
    while candidates:
        hit = near_duplicate(text, candidates, similarity_threshold(settings))
        if hit is None:
            return
        old, _ = hit
        if still_gone(old):
            why = f" ({old.note})" if old.note else ""
            raise ForgottenFact(
                f"this fact was forgotten as {old.id} on {old.left_at or 'an earlier run'}{why}; "
                f"`memctl restore {old.id}` brings it back, or pass --force to remember it anyway"
            )
        candidates = [e for e in candidates if e.id != old.id]


def _write(settings: Settings, request: RememberRequest, data: bytes, now: datetime) -> RememberResult:
    layout = settings.layout
    policy = policy_for(settings, request.type)
    stamp = iso(now)
    entry = Entry(
        id=new_id(), text=request.text, type=request.type, topic=request.topic.strip(),
        confidence=request.confidence, created=stamp, updated=stamp, source=request.source,
    )
    if request.contradicts:
        entry.extra["contradicts"] = list(request.contradicts)
    threshold = auto_trigger(settings)
    count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    if policy.merges:
        # only entries of the same type matter: parse just those lines (short lock holds on a big L5)
        rows = parse_rows(data, field_bytes("type", request.type))
        active = [r.entry for r in rows if r.entry is not None and r.entry.type == request.type]
        key = merge_key(entry)
        current = next((e for e in reversed(active) if merge_key(e) == key), None)
        if current is not None and normalize(current.text) == normalize(entry.text):
            return _raise_seen(layout, rows, current, stamp, None, threshold)
        if current is not None:
            entry.supersedes = [current.id]
            gone = replace(current, left_at=stamp, reason=SUPERSEDED, note=f"superseded by {entry.id}", run="")
            append_entries(layout.cold_archive, [gone])
            kept = [r for r in rows if r.entry is None or r.entry.id != current.id] + [row_for(entry)]
            write_rows(layout.long_term, kept)
            return RememberResult(SUPERSEDED, entry, current, None, len(kept), len(kept) >= threshold)
    else:
        pairs = texts_of_type(data, request.type)
        found = best_match(entry.text, [text for _, text in pairs], similarity_threshold(settings))
        if found is not None:
            rows = parse_rows(data, field_bytes("id", pairs[found[0]][0]))
            existing = next(r.entry for r in rows if r.entry is not None and r.entry.id == pairs[found[0]][0])
            return _raise_seen(layout, rows, existing, stamp, found[1], threshold)
    append_entries(layout.long_term, [entry])
    return RememberResult(ADDED, entry, None, None, count + 1, count + 1 >= threshold)


def _raise_seen(layout, rows, existing: Entry, stamp: str, score: float | None, threshold: int) -> RememberResult:
    bumped = replace(existing, seen=existing.seen + 1, updated=stamp, extra=dict(existing.extra))
    kept = [row_for(bumped) if r.entry is not None and r.entry.id == existing.id else r for r in rows]
    write_rows(layout.long_term, kept)
    return RememberResult(SEEN, bumped, existing, score, len(kept), len(kept) >= threshold)


def auto_trigger(settings: Settings) -> int:
    return int(settings.get("dream", "auto_trigger_entries"))
