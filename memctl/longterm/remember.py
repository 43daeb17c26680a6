"""`remember`: write one fact into L5 under its type's write policy (design.md §6, §8).

aggregate types add a dated fact to the active entry with the same (type, topic) key, or start
it. merge types supersede the active entry with the same (type, topic) key — the old version is
written to L6 first (reason `superseded`), then L5 is replaced, so a crash in between leaves
a duplicate, never a loss. append types add a line, unless a near-duplicate of the same type
is active, whose `seen` is raised instead. A fact that was forgotten is refused unless
forced, so a deletion sticks. Everything happens under the writer lock, held for a few
lookups and one write — which is what keeps a `remember` during a dream short, and its cost
flat as the memory grows (the store answers from `.memctl/lookups.sqlite`).
"""

from __future__ import annotations

from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.core.fsutil import synced_after_unlock
from memctl.longterm.entries import Entry, content_hash, new_id
from memctl.core.errors import MemctlError, UsageError
from memctl.longterm.policies import best_key_match, near_duplicate, normalize, policy_for, similarity_threshold
from memctl.longterm.recovery import journaled_rewrite, writing
from memctl.longterm.store import JsonlEntryStore, open_store

TYPE_CHECKING = False  # datetime is only an annotation here
if TYPE_CHECKING:
    from datetime import datetime

ADDED = "added"
SUPERSEDED = "superseded"
SEEN = "seen"
NAMESPACE = "namespace"  # an entry field: the namespace of the key that wrote it (memctl serve)
AGGREGATED = "aggregated"
SOURCES = "sources"  # an entry field: [{"session": ID, "message": MESSAGE_ID}, …], where it was learned
FACTS = "facts"  # an aggregate entry's dated facts
MAX_FACTS = 100
SEEN_BY = "seen_by"  # an entry field: the id of the resident writer's request that last raised `seen`


class ForgottenFact(MemctlError):
    """The fact being remembered was deliberately forgotten before."""


class RememberRequest:
    """What to remember (plain classes here, not dataclasses: see `entries.Entry`)."""

    __slots__ = ("text", "type", "topic", "confidence", "source", "force", "contradicts", "entry_id", "retry",
                 "speaker", "extra", "date")

    def __init__(self, text: str, type: str, topic: str = "", confidence: float = 5, source: str = "",
                 force: bool = False, contradicts: list[str] | None = None, entry_id: str | None = None,
                 retry: bool = False, speaker: str = "", extra: dict | None = None, date: str = "") -> None:
        self.text, self.type, self.topic, self.confidence = text, type, topic, confidence
        self.source, self.force = source, force
        self.contradicts = [] if contradicts is None else contradicts  # ids this fact proves wrong; the dream forgets them
        # the id a new entry gets (None: a new one); `retry`: this request may have been written
        # already, under that id, by a resident writer that died before it replied
        self.entry_id, self.retry = entry_id, retry
        # who said it, and fields the entry keeps as they are (`sources`: [{"session", "message"}],
        # `fields`, `conflicts`: the write link's); `date`: when an aggregated fact happened
        self.speaker, self.date = speaker, date
        self.extra = {} if extra is None else extra


class RememberResult:
    __slots__ = ("action", "entry", "previous", "score", "l5_count", "auto_dream_due")

    def __init__(self, action: str, entry: Entry, previous: Entry | None, score: float | None, l5_count: int,
                 auto_dream_due: bool) -> None:
        self.action = action  # added | superseded | seen | aggregated
        self.entry = entry
        self.previous = previous  # the superseded entry, or the near-duplicate before its `seen` rose
        self.score, self.l5_count, self.auto_dream_due = score, l5_count, auto_dream_due

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
    if policy.keyed and not request.topic.strip():
        raise UsageError(
            f"type {request.type!r} {policy.policy}s by topic: pass --topic "
            "(the thing it is about, e.g. --topic editor)"
        )
    if not 0 <= request.confidence <= 10:
        raise UsageError(f"--confidence must be between 0 and 10, got {request.confidence}")
    limit = settings.get("writes", "max_fact_bytes")
    if len(request.text.encode("utf-8", "surrogatepass")) > limit:
        raise UsageError(f"the text is more than {limit} bytes, the most one fact holds ([writes] max_fact_bytes); "
                         "keep a long document as a file in the memory folder and remember where it is")


def remember(settings: Settings, request: RememberRequest, now: datetime | str, lock_wait: float) -> RememberResult:
    """Remember one fact; `now`: a datetime or its stamp (`clock.stamp()`: no datetime import)."""
    request = prepared(settings, request)
    layout = settings.layout
    store = open_store(layout)
    with writing(layout, lock_wait):
        result = remember_locked(settings, store, request, now)
    return result


def prepared(settings: Settings, request: RememberRequest) -> RememberRequest:
    """The request checked, its text as L5 keeps it (before the lock: nothing here reads L5)."""
    validate(settings, request)
    return RememberRequest(at_rest(settings, request.text), request.type, request.topic, request.confidence,
                           request.source, request.force, request.contradicts, request.entry_id, request.retry,
                           request.speaker, request.extra, request.date)


def remember_locked(settings: Settings, store: JsonlEntryStore, request: RememberRequest,
                    now: datetime | str) -> RememberResult:
    """The write of a `prepared` request, the writer lock held: by `remember`, and by the
    resident writer for each request of a batch under one lock hold (memctl.residents.writer)."""
    store.lock_types([request.type])  # the merge and near-duplicate checks below see every earlier write
    if request.retry and request.entry_id:
        done = _written_before(store, request.entry_id)
        if done is not None:
            return done
    if not request.force:
        check_not_forgotten(settings, store, request.text, request)
    return _write(settings, store, request, now)


def _written_before(store: JsonlEntryStore, entry_id: str) -> RememberResult | None:
    """The result of a request a resident writer wrote but did not acknowledge, its line now
    synced; None when L5 lacks the id (the writer died before writing it, or its torn line was
    set aside): it is written now."""
    row = store.active.row(entry_id)
    if row is None:
        return None
    store.active.sync()
    entry = row.entry
    previous = store.archive.row(entry.supersedes[0]) if entry.supersedes else None
    count = store.active.count()
    if previous is not None:
        return RememberResult(SUPERSEDED, entry, previous.entry, None, count, False)
    return RememberResult(ADDED, entry, None, None, count, False)


def at_rest(settings: Settings, text: str) -> str:
    """The text as L5 keeps it: secrets redacted, as `import` and `task save` do, unless
    `[redaction] keep_secrets_at_rest` is set."""
    if settings.get("redaction", "keep_secrets_at_rest"):
        return text
    from memctl.core.secret_gate import may_hold_secret

    if not settings.get("redaction", "extra_patterns") and not may_hold_secret(text):
        return text
    from memctl.core.redact import redactor_for

    return redactor_for(settings)(text)


def check_not_forgotten(settings: Settings, store: JsonlEntryStore, text: str,
                        request: RememberRequest | None = None) -> None:
    """Refuse a fact whose last L6 line says forgotten or purged, unless it is active again
    (a near-duplicate only within the request's namespace)."""
    cutoff = similarity_threshold(settings)
    gone = store.gone_for_good(text, cutoff)
    digest = content_hash(text)
    for entry in gone:
        if entry.extra.get("sha256") == digest:
            raise ForgottenFact(f"this fact was purged as {entry.id}; pass --force to remember it again")
    hit = near_duplicate(text, [e for e in gone if e.text and same_namespace(e, request)], cutoff)
    if hit is not None:
        old, _ = hit
        why = f" ({old.note})" if old.note else ""
        raise ForgottenFact(
            f"this fact was forgotten as {old.id} on {old.left_at or 'an earlier run'}{why}; "
            f"`memctl restore {old.id}` brings it back, or pass --force to remember it anyway"
        )


def _write(settings: Settings, store: JsonlEntryStore, request: RememberRequest, now: datetime | str) -> RememberResult:
    policy = policy_for(settings, request.type)
    stamp = iso(now)
    entry = Entry(
        id=request.entry_id or new_id(), text=request.text, type=request.type, topic=request.topic.strip(),
        confidence=request.confidence, created=stamp, updated=stamp, source=request.source,
        speaker=request.speaker, extra=dict(request.extra),
    )
    if request.contradicts:
        entry.extra["contradicts"] = list(request.contradicts)
    threshold = auto_trigger(settings)
    count = store.active.count()
    if policy.aggregates:
        return add_fact(settings, store, entry, request, stamp, count, threshold)
    if policy.merges:
        row = store.active.current(entry.type, entry.topic)
        current = row.entry if row is not None else None
        if current is not None and normalize(current.text) == normalize(entry.text):
            return _raise_seen(store, current, request, stamp, None, count, threshold)
        if current is not None:
            supersede(settings, store, current, entry, stamp)
            return RememberResult(SUPERSEDED, entry, current, None, count, count >= threshold)
    else:
        cutoff = similarity_threshold(settings)
        rows = store.active.candidates(entry.type, entry.text, cutoff)
        found = best_key_match(entry.text, rows.keys, cutoff)
        existing = store.active.row(rows[found[0]].entry_id) if found is not None else None
        if existing is not None and same_namespace(existing.entry, request):
            return _raise_seen(store, existing.entry, request, stamp, found[1], count, threshold)
    with synced_after_unlock():  # group commit: the fsync waits for the lock's release, the exit for the fsync
        store.active.append([entry])
    return RememberResult(ADDED, entry, None, None, count + 1, count + 1 >= threshold)


def supersede(settings: Settings, store: JsonlEntryStore, current: Entry, entry: Entry, stamp: str) -> None:
    """`entry` takes the place of `current` in L5; `current` goes to L6 first (journaled)."""
    entry.supersedes = [current.id]
    gone = current.replace(left_at=stamp, reason=SUPERSEDED, note=f"superseded by {entry.id}", run="")
    with journaled_rewrite(settings.layout, store, "supersede", entry.id, l5_has=[entry.id], l5_lacks=[current.id]):
        store.archive.append([gone])
        store.active.replace(current.id, store.row_for(entry), at_end=True)


def same_namespace(entry: Entry, request: RememberRequest | None) -> bool:
    """Whether an entry is in the namespace a request writes to (memctl serve's namespace keys:
    one namespace's fact never raises `seen` on another's, nor is refused as another's forgotten)."""
    wanted = request.extra.get(NAMESPACE, "") if request is not None else ""
    return entry.extra.get(NAMESPACE, "") == wanted


def _raise_seen(store: JsonlEntryStore, existing: Entry, request: RememberRequest, stamp: str,
                score: float | None, count: int, threshold: int) -> RememberResult:
    """`seen` + 1, the bump marked with the request's id (`seen_by`: the id a new entry would
    have had), so that the retry of a request whose resident writer died before replying finds
    its bump done instead of counting the fact seen twice."""
    sources = request.extra.get(SOURCES) or []
    done = existing.extra.get(SEEN_BY) == request.entry_id or _has_all(existing.extra.get(SOURCES), sources)
    if request.retry and request.entry_id and done:
        store.active.sync()  # written but unacknowledged: synced and reported, not bumped again
        return RememberResult(SEEN, existing, existing, score, count, False)
    extra = {**existing.extra, SEEN_BY: request.entry_id or new_id()}
    if sources:
        extra[SOURCES] = joined(existing.extra.get(SOURCES), sources)
    bumped = existing.replace(seen=existing.seen + 1, updated=stamp, extra=extra)
    store.active.replace(existing.id, store.row_for(bumped))
    return RememberResult(SEEN, bumped, existing, score, count, count >= threshold)


def _has_all(held, wanted: list) -> bool:
    return bool(wanted) and isinstance(held, list) and all(item in held for item in wanted)


def joined(held, more: list) -> list:
    """`held` (a list, or nothing usable) with the items of `more` it lacks, in order."""
    out = list(held) if isinstance(held, list) else []
    out += [item for item in more if item not in out]
    return out


def add_fact(settings: Settings, store: JsonlEntryStore, entry: Entry, request: RememberRequest, stamp: str,
             count: int, threshold: int) -> RememberResult:
    """aggregate: the fact joins the active entry of its (type, topic) — its `facts`, each with its
    date, text and sources, in date order, and its text, which lists them — or starts one. A
    fact already there (its id, or the same date and text) changes nothing: a retry is harmless.
    Past `MAX_FACTS` the entry is superseded by one holding the newest: the whole history stays
    in L6, and the entry a search returns stays readable."""
    fact = {"date": (request.date or stamp)[:10], "text": entry.text, "id": entry.id}
    if request.extra.get(SOURCES):
        fact[SOURCES] = list(request.extra[SOURCES])
    row = store.active.current(entry.type, entry.topic)
    if row is None:
        entry.extra[FACTS] = [fact]
        entry.text = aggregate_text(entry.topic, [fact])
        with synced_after_unlock():
            store.active.append([entry])
        return RememberResult(ADDED, entry, None, None, count + 1, count + 1 >= threshold)
    current = row.entry
    facts = [f for f in current.extra.get(FACTS) or [] if isinstance(f, dict)]
    if any(f.get("id") == fact["id"] or (f.get("date"), f.get("text")) == (fact["date"], fact["text"]) for f in facts):
        return RememberResult(SEEN, current, current, None, count, False)
    facts = sorted(facts + [fact], key=lambda f: str(f.get("date", "")))
    sources = joined(current.extra.get(SOURCES), fact.get(SOURCES, []))
    extra = {**current.extra, FACTS: facts[-MAX_FACTS:], SOURCES: sources}
    grown = current.replace(text=aggregate_text(current.topic, facts[-MAX_FACTS:]), updated=stamp,
                            seen=current.seen + 1, confidence=max(current.confidence, entry.confidence), extra=extra)
    if len(facts) > MAX_FACTS:
        grown = grown.replace(id=entry.id, created=stamp)
        supersede(settings, store, current, grown, stamp)
        return RememberResult(SUPERSEDED, grown, current, None, count, count >= threshold)
    store.active.replace(current.id, store.row_for(grown))
    return RememberResult(AGGREGATED, grown, current, None, count, count >= threshold)


def aggregate_text(topic: str, facts: list[dict]) -> str:
    """What search finds an aggregate entry by: its topic, then every fact with its date."""
    return f"{topic}: " + "; ".join(f"{f.get('date', '')} {f.get('text', '')}".strip() for f in facts)


def auto_trigger(settings: Settings) -> int:
    return int(settings.get("dream", "auto_trigger_entries"))
