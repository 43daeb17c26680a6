"""The policy router: each candidate memory written into L5 by its type's policy (design.md §9a).

Every write goes through `longterm.remember.remember_locked`, under one hold of the writer lock
for a batch:

- **merge** (one entry per type and topic): a newer statement replaces the fields it speaks
  about (`Candidate.fields`, kept on the entry as `fields`) and keeps the rest; the new version
  supersedes the old one, which goes to L6. A statement of lower confidence that disagrees
  never silently wins: it is kept on the entry as a `conflicts` item (text, confidence, fields,
  sources) for a person or a later correction to settle. A correction (`Candidate.corrects`)
  supersedes at any confidence and records the id it corrects (`corrects`).
- **aggregate**: the candidate is a dated fact of its key's entry (`remember.add_fact`).
- **append**: a new entry, or `seen` + 1 of a near-duplicate.

Idempotent: a candidate's entry id is derived from its session, messages, type, topic and text
(`candidate_id`), and a candidate whose id is already in L5 or L6, among an entry's conflicts
or facts, or whose sources an entry already holds, writes nothing again. So a batch cut off
by a kill is simply routed again.
"""

from __future__ import annotations

import hashlib

from memctl.core import faults
from memctl.core.config import Settings
from memctl.core.errors import UsageError
from memctl.learn.candidates import Candidate
from memctl.longterm.entries import Entry
from memctl.longterm.policies import match_key, normalize, policy_for
from memctl.longterm.recovery import writing
from memctl.longterm.remember import (SOURCES, ForgottenFact, RememberRequest, at_rest, joined, prepared,
                                      remember_locked)
from memctl.longterm.store import open_store

FIELDS = "fields"
CONFLICTS = "conflicts"
CORRECTS = "corrects"
CORRECTED_SHARE = 0.5
_CORRECTION_STOP = frozenset("the a an of to in on and or is are was be for with it this that at by as from not "
                             "actually no sorry meant mean correction".split())
MAX_CONFLICTS = 20  # the oldest leave first: an entry a chatty session keeps disagreeing with stays readable
SETTLED_BY = "settled_by"
CONFLICT = "conflict"  # an action of its own: the candidate was kept on the entry, which did not change
DONE = "done"  # written by an earlier run
SKIPPED = "skipped"


class Routed:
    """What became of one candidate: the action (remember's, or conflict | done | skipped), the
    entry it concerns, and a one-line note when it was skipped."""

    __slots__ = ("candidate", "candidate_id", "action", "entry_id", "note", "replaces")

    def __init__(self, candidate: Candidate, candidate_id: str, action: str, entry_id: str = "", note: str = "",
                 replaces: str = "") -> None:
        self.candidate, self.candidate_id, self.action = candidate, candidate_id, action
        self.entry_id, self.note, self.replaces = entry_id, note, replaces  # replaces: the entry it superseded

    def to_dict(self) -> dict:
        data = {"id": self.entry_id or self.candidate_id, "action": self.action, "type": self.candidate.type,
                "topic": self.candidate.topic, "text": self.candidate.text, "confidence": self.candidate.confidence,
                "sources": self.candidate.sources}
        if self.note:
            data["note"] = self.note
        if self.replaces:
            data["replaces"] = self.replaces
        return data


def candidate_id(candidate: Candidate) -> str:
    """The entry id a candidate's write gets: the same candidate from the same messages, the same id."""
    sources = "\0".join(f"{s.get('session', '')}\1{s.get('message', '')}" for s in candidate.sources)
    key = "\0".join((sources, candidate.type, " ".join(candidate.topic.lower().split()), candidate.text))
    return "m" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def route(settings: Settings, candidates: list[Candidate], now: str, lock_wait: float) -> list[Routed]:
    """Write the candidates in order, under one hold of the writer lock."""
    if not candidates:
        return []
    store = open_store(settings.layout)
    routed = []
    with writing(settings.layout, lock_wait):
        for candidate in candidates:
            routed.append(route_locked(settings, store, candidate, now))
            faults.checkpoint("learn: candidate routed")
    return routed


def route_locked(settings: Settings, store, candidate: Candidate, now: str) -> Routed:
    cid = candidate_id(candidate)
    try:
        policy = policy_for(settings, candidate.type)
    except UsageError as exc:
        return Routed(candidate, cid, SKIPPED, note=str(exc))
    if store.active.holds(cid) or store.archive.row(cid) is not None:
        return Routed(candidate, cid, DONE, cid)
    try:
        if policy.merges and candidate.topic.strip():
            return _merge(settings, store, candidate, cid, now)
        request = _request(settings, candidate, cid, candidate.text, candidate.confidence, {})
        result = remember_locked(settings, store, request, now)
    except ForgottenFact as exc:
        return Routed(candidate, cid, SKIPPED, note=str(exc))
    except UsageError as exc:  # an empty text, a merge type without a topic: the extractor's, not the session's fault
        return Routed(candidate, cid, SKIPPED, note=str(exc))
    return _routed(candidate, cid, result)


def _routed(candidate: Candidate, cid: str, result, action: str = "") -> Routed:
    replaces = result.previous.id if result.action == "superseded" and result.previous is not None else ""
    return Routed(candidate, cid, action or result.action, result.entry.id, replaces=replaces)


def _request(settings: Settings, candidate: Candidate, cid: str, text: str, confidence: float,
             extra: dict) -> RememberRequest:
    extra = {SOURCES: list(candidate.sources), **extra}
    source = f"session:{candidate.sources[0].get('session', '')}" if candidate.sources else "learned"
    request = RememberRequest(text, candidate.type, candidate.topic, min(10.0, max(0.0, confidence)), source,
                              entry_id=cid, retry=True, speaker=candidate.speaker, extra=extra,
                              date=candidate.time)
    return prepared(settings, request)


def _merge(settings: Settings, store, candidate: Candidate, cid: str, now: str) -> Routed:
    row = store.active.current(candidate.type, candidate.topic)
    current = row.entry if row is not None else None
    if current is None and candidate.corrects:
        current = corrected_entry(store, candidate)
        if current is not None:  # the correction takes the key of the fact it corrects
            candidate = Candidate(**{**{n: getattr(candidate, n) for n in Candidate.__slots__}, "topic": current.topic})
    if current is None:
        request = _request(settings, candidate, cid, candidate.text, candidate.confidence, _fields(candidate.fields))
        return Routed(candidate, cid, remember_locked(settings, store, request, now).action, cid)
    held = _dict(current.extra.get(FIELDS))
    if _restates(current, held, candidate):
        request = _request(settings, candidate, cid, current.text, current.confidence, {})
        result = remember_locked(settings, store, request, now)  # the same text: `seen` + 1, the sources joined
        return Routed(candidate, cid, result.action, result.entry.id)
    clashing = _clashing(held, candidate.fields)
    if candidate.corrects or not clashing or candidate.confidence >= current.confidence:
        return _supersede(settings, store, candidate, cid, current, held, now)
    return _keep_conflict(settings, store, candidate, cid, current, now)


def corrected_entry(store, candidate: Candidate) -> Entry | None:
    """The active entry of the type a correction most likely corrects when none has its topic
    (an extractor may name the key differently the second time: "morning briefing", then
    "briefing"): the one holding the largest share of its words, at least `CORRECTED_SHARE`."""
    wanted = _words(match_key(candidate.text))
    if not wanted:
        return None
    rows = store.active.candidates(candidate.type, candidate.text, 0.0)
    best, best_share = None, CORRECTED_SHARE
    for index, key in enumerate(rows.keys):
        share = len(wanted & _words(key)) / len(wanted)
        if share >= best_share:  # ties to the later entry: the newer statement
            best, best_share = index, share
    if best is None:
        return None
    found = store.active.row(rows[best].entry_id)
    return found.entry if found is not None else None


def _words(key: str) -> set[str]:
    return {word for word in key.split() if len(word) > 1 and word not in _CORRECTION_STOP}


def _restates(current: Entry, held: dict, candidate: Candidate) -> bool:
    if normalize(current.text) == normalize(candidate.text):
        return True
    return bool(candidate.fields) and all(held.get(k) == v for k, v in candidate.fields.items())


def _clashing(held: dict, fields: dict) -> list[str]:
    """The fields a statement would change; without fields on either side, the whole statement."""
    if not held or not fields:
        return ["text"]
    return [key for key, value in fields.items() if key in held and held[key] != value]


def _supersede(settings: Settings, store, candidate: Candidate, cid: str, current: Entry, held: dict,
               now: str) -> Routed:
    """The new version: the candidate's fields over the held ones, the sources of both, the open
    conflicts; at the higher of the two confidences (it won on confidence, spoke about other
    fields, or corrected the old one)."""
    fields = {**held, **candidate.fields} if candidate.fields else {}
    kept = {k: v for k, v in fields.items() if k not in candidate.fields}
    text = candidate.text if not kept else f"{candidate.text} (also {'; '.join(f'{k}: {v}' for k, v in kept.items())})"
    confidence = max(candidate.confidence, current.confidence)
    extra = _fields(fields)
    extra[SOURCES] = joined(current.extra.get(SOURCES), candidate.sources)
    conflicts = [c if c.get(SETTLED_BY) or _still_open(c, candidate) else {**c, SETTLED_BY: cid}
                 for c in _list(current.extra.get(CONFLICTS))]
    if conflicts:
        extra[CONFLICTS] = conflicts
    if candidate.corrects:
        extra[CORRECTS] = current.id
    request = _request(settings, candidate, cid, text, confidence, extra)
    result = remember_locked(settings, store, request, now)
    return _routed(candidate, cid, result, "corrected" if candidate.corrects and result.action == "superseded" else "")


def _still_open(conflict: dict, candidate: Candidate) -> bool:
    """A kept conflict stays open unless the new statement speaks about every field it spoke
    about; a settled one stays on the entry, marked (`settled_by`), so that a replay of the
    session does not raise it again."""
    fields = _dict(conflict.get(FIELDS))
    return bool(candidate.fields) and bool(fields) and not set(fields) <= set(candidate.fields)


def _keep_conflict(settings: Settings, store, candidate: Candidate, cid: str, current: Entry, now: str) -> Routed:
    """The lower-confidence statement, kept on the entry it disagrees with: visible, not applied."""
    conflicts = _list(current.extra.get(CONFLICTS))
    if any(c.get("id") == cid for c in conflicts):
        return Routed(candidate, cid, DONE, current.id)
    item = {"id": cid, "text": at_rest(settings, candidate.text), "confidence": candidate.confidence,
            SOURCES: list(candidate.sources), "at": now}
    if candidate.fields:
        item[FIELDS] = _fields(candidate.fields)[FIELDS]
    if candidate.speaker:
        item["speaker"] = candidate.speaker
    extra = {**current.extra, CONFLICTS: (conflicts + [item])[-MAX_CONFLICTS:]}
    store.active.replace(current.id, store.row_for(current.replace(updated=now, extra=extra)))
    return Routed(candidate, cid, CONFLICT, current.id,
                  note=f"kept as a conflict on {current.id}: confidence {candidate.confidence:g} "
                       f"< {current.confidence:g}")


def _fields(fields: dict) -> dict:
    return {FIELDS: {str(k): str(v) for k, v in fields.items()}} if fields else {}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
