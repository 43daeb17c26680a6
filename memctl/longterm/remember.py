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
from memctl.longterm.entries import Entry, content_hash, new_id
from memctl.core.errors import MemctlError, UsageError
from memctl.longterm.policies import best_match, merge_key, near_duplicate, normalize, policy_for, similarity_threshold
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import StoreRead, JsonlEntryStore, open_store, refuse_duplicates

ADDED = "added"
GONE_FOR_GOOD = ("forgotten", "purged")  # L6 reasons a remember must not silently undo
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
    request = replace(request, text=at_rest(settings, request.text))
    layout = settings.layout
    store = open_store(layout)
    with writing(layout, lock_wait):
        store.lock_types([request.type])  # the merge and near-duplicate checks below see every earlier write
        active = store.active.read()
        if not request.force:
            check_not_forgotten(settings, store, request.text, active)
        result = _write(settings, store, request, active, now)
    return result


def at_rest(settings: Settings, text: str) -> str:
    """The text as L5 keeps it: secrets redacted, as `import` and `task save` do, unless
    `[redaction] keep_secrets_at_rest` is set."""
    if settings.get("redaction", "keep_secrets_at_rest"):
        return text
    from memctl.core.redact import redactor_for

    return redactor_for(settings)(text)


def check_not_forgotten(settings: Settings, store: JsonlEntryStore, text: str, active: StoreRead) -> None:
    """Refuse a fact whose last L6 line says forgotten or purged, unless it is active again."""
    archive = store.archive.read()
    last = archive.last_left_as(GONE_FOR_GOOD)
    if not last:
        return

    def still_gone(entry: Entry) -> bool:
        """Not restored to L5, and no later L6 line says it left for another reason (checked for hits only)."""
        return not active.holds(entry.id) and archive.last_line_gives(entry.id, GONE_FOR_GOOD)

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


def _write(settings: Settings, store: JsonlEntryStore, request: RememberRequest, active: StoreRead,
           now: datetime) -> RememberResult:
    policy = policy_for(settings, request.type)
    stamp = iso(now)
    entry = Entry(
        id=new_id(), text=request.text, type=request.type, topic=request.topic.strip(),
        confidence=request.confidence, created=stamp, updated=stamp, source=request.source,
    )
    if request.contradicts:
        entry.extra["contradicts"] = list(request.contradicts)
    threshold = auto_trigger(settings)
    count = active.count()
    if policy.merges:
        # only entries of the same type matter: parse just those lines (short lock holds on a big L5)
        rows = active.rows_of_type(request.type)
        same_type = [r.entry for r in rows if r.entry is not None and r.entry.type == request.type]
        key = merge_key(entry)
        current = next((e for e in reversed(same_type) if merge_key(e) == key), None)
        if current is not None:
            refuse_duplicates(rows, [current.id], "L5")
        if current is not None and normalize(current.text) == normalize(entry.text):
            return _raise_seen(store, rows, current, stamp, None, threshold)
        if current is not None:
            entry.supersedes = [current.id]
            gone = replace(current, left_at=stamp, reason=SUPERSEDED, note=f"superseded by {entry.id}", run="")
            kept = [r for r in rows if r.entry is None or r.entry.id != current.id] + [store.row_for(entry)]
            with journaled_rewrite(settings.layout, store, "supersede", entry.id, kept):
                store.archive.append([gone])
                store.active.rewrite(kept)
            return RememberResult(SUPERSEDED, entry, current, None, len(kept), len(kept) >= threshold)
    else:
        pairs = active.texts_of_type(request.type)
        found = best_match(entry.text, [text for _, text in pairs], similarity_threshold(settings))
        if found is not None:
            rows = active.rows_around(pairs[found[0]][0])
            refuse_duplicates(rows, [pairs[found[0]][0]], "L5")
            existing = next(r.entry for r in rows if r.entry is not None and r.entry.id == pairs[found[0]][0])
            return _raise_seen(store, rows, existing, stamp, found[1], threshold)
    store.active.append([entry])
    return RememberResult(ADDED, entry, None, None, count + 1, count + 1 >= threshold)


def _raise_seen(store: JsonlEntryStore, rows, existing: Entry, stamp: str, score: float | None, threshold: int) -> RememberResult:
    bumped = replace(existing, seen=existing.seen + 1, updated=stamp, extra=dict(existing.extra))
    kept = [store.row_for(bumped) if r.entry is not None and r.entry.id == existing.id else r for r in rows]
    store.active.rewrite(kept)
    return RememberResult(SEEN, bumped, existing, score, len(kept), len(kept) >= threshold)


def auto_trigger(settings: Settings) -> int:
    return int(settings.get("dream", "auto_trigger_entries"))
