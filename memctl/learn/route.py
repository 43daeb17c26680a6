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
from memctl.longterm.policies import STEM, features, match_key, normalize, policy_for
from memctl.longterm.recovery import writing
from memctl.longterm.remember import (SOURCES, ForgottenFact, RememberRequest, at_rest, joined, prepared,
                                      remember_locked)
from memctl.longterm.store import open_store

FIELDS = "fields"
CONFLICTS = "conflicts"
CORRECTS = "corrects"
CORRECTED_SHARE = 0.5
# words (cut as `policies.features` cuts them) that say a sentence corrects, not what it corrects
_CORRECTION_STOP = frozenset(word[:STEM] for word in "no sorry meant mean actually correction 其实 不是 而是 实际 说错 "
                             "纠正 更正".split())
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


TOPIC_FROM_TEXT = 60  # characters of a topicless statement that key it


class Scope:
    """Who a session's writes belong to (memctl serve's keys): `entry_fields`, fields every entry
    written carries (the key, the namespace); `topic_prefix`, put before every topic so that the
    keys of one scope never meet another's (serve's `NS/`). The command line's scope is empty."""

    __slots__ = ("entry_fields", "topic_prefix")

    def __init__(self, entry_fields: dict | None = None, topic_prefix: str = "") -> None:
        self.entry_fields, self.topic_prefix = dict(entry_fields or {}), topic_prefix


def route(settings: Settings, candidates: list[Candidate], now: str, lock_wait: float,
          scope: Scope | None = None) -> list[Routed]:
    """Write the candidates in order, under one hold of the writer lock."""
    if not candidates:
        return []
    router = Router(settings, open_store(settings.layout), now, scope or Scope())
    routed = []
    with writing(settings.layout, lock_wait):
        for candidate in candidates:
            routed.append(router.route(candidate))
            faults.checkpoint("learn: candidate routed")
    return routed


class Router:
    """The writes of one batch (the writer lock held by `route`)."""

    def __init__(self, settings: Settings, store, now: str, scope: Scope) -> None:
        self.settings, self.store, self.now = settings, store, now
        self.entry_fields, self.topic_prefix = scope.entry_fields, scope.topic_prefix

    def route(self, candidate: Candidate) -> Routed:
        cid = candidate_id(candidate)
        try:
            policy = policy_for(self.settings, candidate.type)
        except UsageError as exc:
            return Routed(candidate, cid, SKIPPED, note=str(exc))
        if policy.merges and not candidate.topic.strip():
            # a statement whose subject the rules could not name: keyed by its own words, so it is
            # kept (a merge type refuses an empty topic) and supersedes no other statement
            candidate = _with_topic(candidate, " ".join(candidate.text.split())[:TOPIC_FROM_TEXT])
        if candidate.topic.strip() and self.topic_prefix:
            candidate = _with_topic(candidate, self.topic_prefix + candidate.topic.strip())
        if self.store.active.holds(cid) or self.store.archive.row(cid) is not None:
            return Routed(candidate, cid, DONE, cid)
        try:
            if policy.merges and candidate.topic.strip():
                return self._merge(candidate, cid)
            return _routed(candidate, cid, self._remember(candidate, cid, candidate.text, candidate.confidence, {}))
        except ForgottenFact as exc:
            return Routed(candidate, cid, SKIPPED, note=str(exc))
        except UsageError as exc:  # an empty text, a merge type without a topic: the extractor is at fault
            return Routed(candidate, cid, SKIPPED, note=str(exc))

    def _remember(self, candidate: Candidate, cid: str, text: str, confidence: float, extra: dict):
        extra = {SOURCES: list(candidate.sources), **extra, **self.entry_fields}
        source = f"session:{candidate.sources[0].get('session', '')}" if candidate.sources else "learned"
        request = RememberRequest(text, candidate.type, candidate.topic, min(10.0, max(0.0, confidence)), source,
                                  entry_id=cid, retry=True, extra=extra, speaker=candidate.speaker,
                                  date=candidate.time)
        return remember_locked(self.settings, self.store, prepared(self.settings, request), self.now)

    def _merge(self, candidate: Candidate, cid: str) -> Routed:
        row = self.store.active.current(candidate.type, candidate.topic)
        current = row.entry if row is not None else None
        if current is None and candidate.corrects:
            current = corrected_entry(self.store, candidate, self.topic_prefix)
            if current is not None:  # the correction takes the key of the fact it corrects
                candidate = _with_topic(candidate, current.topic)
        if current is None:
            result = self._remember(candidate, cid, candidate.text, candidate.confidence, _fields(candidate.fields))
            return _routed(candidate, cid, result)
        held = _dict(current.extra.get(FIELDS))
        if _restates(current, held, candidate):  # the same text: `seen` + 1, the sources joined
            return _routed(candidate, cid, self._remember(candidate, cid, current.text, current.confidence, {}))
        clashing = _clashing(held, candidate.fields)
        if candidate.corrects or not clashing or candidate.confidence >= current.confidence:
            return self._supersede(candidate, cid, current, held)
        return self._keep_conflict(candidate, cid, current)

    def _supersede(self, candidate: Candidate, cid: str, current: Entry, held: dict) -> Routed:
        """The new version: the candidate's fields over the held ones, the sources of both, the
        open conflicts; at the higher of the two confidences (it won on confidence, spoke about
        other fields, or corrected the old one)."""
        fields = {**held, **candidate.fields} if candidate.fields else {}
        kept = {k: v for k, v in fields.items() if k not in candidate.fields}
        also = "; ".join(f"{k}: {v}" for k, v in kept.items())
        text = f"{candidate.text} (also {also})" if kept else candidate.text
        extra = _fields(fields)
        extra[SOURCES] = joined(current.extra.get(SOURCES), candidate.sources)
        conflicts = [c if c.get(SETTLED_BY) or _still_open(c, candidate) else {**c, SETTLED_BY: cid}
                     for c in _list(current.extra.get(CONFLICTS))]
        if conflicts:
            extra[CONFLICTS] = conflicts
        if candidate.corrects:
            extra[CORRECTS] = current.id
        result = self._remember(candidate, cid, text, max(candidate.confidence, current.confidence), extra)
        corrected = candidate.corrects and result.action == "superseded"
        return _routed(candidate, cid, result, "corrected" if corrected else "")

    def _keep_conflict(self, candidate: Candidate, cid: str, current: Entry) -> Routed:
        """The lower-confidence statement, kept on the entry it disagrees with: visible, not applied."""
        conflicts = _list(current.extra.get(CONFLICTS))
        if any(c.get("id") == cid for c in conflicts):
            return Routed(candidate, cid, DONE, current.id)
        item = {"id": cid, "text": at_rest(self.settings, candidate.text), "confidence": candidate.confidence,
                SOURCES: list(candidate.sources), "at": self.now}
        if candidate.fields:
            item[FIELDS] = _fields(candidate.fields)[FIELDS]
        if candidate.speaker:
            item["speaker"] = candidate.speaker
        extra = {**current.extra, CONFLICTS: (conflicts + [item])[-MAX_CONFLICTS:]}
        self.store.active.replace(current.id, self.store.row_for(current.replace(updated=self.now, extra=extra)))
        return Routed(candidate, cid, CONFLICT, current.id,
                      note=f"kept as a conflict on {current.id}: confidence {candidate.confidence:g} "
                           f"< {current.confidence:g}")


def _routed(candidate: Candidate, cid: str, result, action: str = "") -> Routed:
    replaces = result.previous.id if result.action == "superseded" and result.previous is not None else ""
    return Routed(candidate, cid, action or result.action, result.entry.id, replaces=replaces)


def _with_topic(candidate: Candidate, topic: str) -> Candidate:
    return Candidate(**{**{name: getattr(candidate, name) for name in Candidate.__slots__}, "topic": topic})


def corrected_entry(store, candidate: Candidate, topic_prefix: str = "") -> Entry | None:
    """The active entry of the type a correction most likely corrects when none has its topic
    (an extractor may name the key differently the second time: "morning briefing", then
    "briefing"; 每天晚上用邮件发…, then 每天早上用钉钉发…): the one sharing the largest share of the
    shorter one's words (Chinese: character pairs), at least `CORRECTED_SHARE`, among those whose
    topic has the scope's prefix. Of the shorter: a correction restates only part of what it
    corrects, or adds to it ("…, not a long email")."""
    wanted = _words(match_key(candidate.text))
    if not wanted:
        return None
    rows = store.active.candidates(candidate.type, candidate.text, 0.0)
    shares = [(_shared(wanted, _words(key)), index) for index, key in enumerate(rows.keys)]
    for share, index in sorted(shares, reverse=True):  # ties to the later entry: the newer statement
        if share < CORRECTED_SHARE:
            break
        found = store.active.row(rows[index].entry_id)
        if found is not None and found.entry.topic.startswith(topic_prefix):
            return found.entry
    return None


def _words(key: str) -> set[str]:
    return features(key)[0] - _CORRECTION_STOP


def _shared(wanted: set[str], held: set[str]) -> float:
    return len(wanted & held) / max(1, min(len(wanted), len(held)))


def _restates(current: Entry, held: dict, candidate: Candidate) -> bool:
    """The same statement again. A correction restates only in the same words: its fields may
    hold no more than the key ("I prefer the daily summary as a short Slack message, not a long
    email": likes "daily summary", as the statement it corrects)."""
    if normalize(current.text) == normalize(candidate.text):
        return True
    return (not candidate.corrects and bool(candidate.fields)
            and all(held.get(k) == v for k, v in candidate.fields.items()))


def _clashing(held: dict, fields: dict) -> list[str]:
    """The fields a statement would change; without fields on either side, the whole statement."""
    if not held or not fields:
        return ["text"]
    return [key for key, value in fields.items() if key in held and held[key] != value]


def _still_open(conflict: dict, candidate: Candidate) -> bool:
    """A kept conflict stays open unless the new statement speaks about every field it spoke
    about; a settled one stays on the entry, marked (`settled_by`), so that a replay of the
    session does not raise it again."""
    fields = _dict(conflict.get(FIELDS))
    return bool(candidate.fields) and bool(fields) and not set(fields) <= set(candidate.fields)


def _fields(fields: dict) -> dict:
    return {FIELDS: {str(k): str(v) for k, v in fields.items()}} if fields else {}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
