"""`turn`, `compact`, `dispose`: a session's lifecycle, callable without the command line (design.md §9a).

- `turn(settings, session_id, items)` checks every message first (all or nothing), appends the
  new ones to the session's buffer in one durable write (a retried message is left out), and
  extracts and routes the unprocessed ones when they reach `[learn] turns` or `bytes` (if that
  fails — the writer lock busy, a full disk — the messages stay buffered and unprocessed, a
  note says why, and the next call extracts them: buffering is what `turn` promises).
- `compact(settings, session_id, budget)` extracts and routes what is unprocessed and returns
  the session's summary within `budget` tokens, with what was learned.
- `dispose(settings, session_id)` does the same, leaves the summary (within `[learn]
  short_term_bytes`) and tags in L2 short-term, and closes the session: a later `turn` with a
  new message is refused; a retried one, or a second `dispose`, changes nothing.

Order, for crash safety: messages are appended (fsynced) before anything reads them; entries
are routed before the state says they were (a kill in between routes them again, which writes
nothing twice: `route.candidate_id`); the short-term record is written before the state says
closed. The session lock is held throughout, the writer lock only while routing.
"""

from __future__ import annotations

import os

from memctl.core import clock, faults
from memctl.core.config import Settings
from memctl.core.errors import MemctlError, NotFound, UsageError
from memctl.core.tokens import estimate_tokens
from memctl.learn import buffer, short_term, summary
from memctl.learn.buffer import SessionFiles
from memctl.learn.candidates import Candidate, Message
from memctl.learn.route import SKIPPED, Routed, Scope, route
from memctl.longterm.remember import at_rest

LOCK_WAIT = 30.0  # seconds: a model extractor may hold a session's lock for its timeout
LEARNED_KEPT = 200  # what the state remembers having learned, for the summary


class Outcome:
    """What one call did: messages received and newly buffered, what was learned (this call's
    routing), notes (one line each), and for compact/dispose the summary and everything the
    session taught so far (`session_learned`)."""

    __slots__ = ("session", "received", "buffered", "messages", "processed", "routed", "notes", "summary",
                 "tokens", "tags", "closed", "session_learned")

    def __init__(self, session: str) -> None:
        self.session = session
        self.received = self.buffered = self.messages = self.processed = self.tokens = 0
        self.routed: list[Routed] = []
        self.notes: list[str] = []
        self.summary, self.tags, self.closed = "", [], ""
        self.session_learned: list[dict] = []

    def learned(self) -> list[dict]:
        return [r.to_dict() for r in self.routed if r.action != SKIPPED]

    def to_dict(self) -> dict:
        data = {"session": self.session, "received": self.received, "buffered": self.buffered,
                "messages": self.messages, "processed": self.processed, "learned": self.learned(),
                "notes": self.notes}
        if self.summary or self.closed:
            data.update(summary=self.summary, tokens=self.tokens, tags=self.tags, session_learned=self.session_learned)
        if self.closed:
            data["closed"] = self.closed
        return data


def turn(settings: Settings, session_id: str, items: list, lock_wait: float = LOCK_WAIT,
         extract=None, scope: Scope | None = None) -> Outcome:
    """Buffer a batch of messages (dicts as `turn` reads them); extract at the threshold."""
    checked = buffer.check_messages(items, int(settings.get("learn", "max_message_bytes")))
    call = _Call(settings, session_id, lock_wait, extract, scope)
    outcome = Outcome(session_id)
    outcome.received = len(checked)
    with call.files.locked(lock_wait):
        state = buffer.read_state(call.files)
        fresh, held = buffer.new_lines(call.files, session_id, checked)
        if fresh and state.get("closed"):
            raise UsageError(f"session {session_id[:60]!r} was disposed at {state['closed']}; "
                             "send new messages under a new session id")
        for line in fresh:
            line["content"] = at_rest(settings, line["content"])  # a pasted secret never rests in sessions/
        buffer.append(settings.layout, call.files, fresh, int(settings.get("learn", "max_session_bytes")))
        faults.checkpoint("learn: buffered")
        messages = held + [Message.from_dict(line) for line in fresh]
        outcome.buffered, outcome.messages = len(fresh), len(messages)
        if _due(settings, messages[state["processed"]:]):
            try:
                call.flush(state, messages, outcome)
            except MemctlError as exc:  # the messages are on disk: what turn promises; the next call extracts
                outcome.notes.append(f"extraction deferred: {exc}")
        outcome.processed = state["processed"]
    return outcome


def compact(settings: Settings, session_id: str, budget: int, lock_wait: float = LOCK_WAIT,
            extract=None, scope: Scope | None = None) -> Outcome:
    """Extract and route the rest; the summary so far within `budget` tokens."""
    if budget < 1:
        raise UsageError(f"--budget must be at least 1 token, got {budget}")
    call = _Call(settings, session_id, lock_wait, extract, scope)
    with call.existing_locked():
        outcome, state, messages = call.settled()
    outcome.summary = summary.summary_text(session_id, messages, state.get("learned", []),
                                           summary.within_tokens(budget))
    outcome.tokens = estimate_tokens(outcome.summary)
    return outcome


def dispose(settings: Settings, session_id: str, lock_wait: float = LOCK_WAIT, extract=None,
            scope: Scope | None = None) -> Outcome:
    """Extract and route the rest, leave the summary in L2 short-term, close the session."""
    call = _Call(settings, session_id, lock_wait, extract, scope)
    with call.existing_locked():
        outcome, state, messages = call.settled()
        learned = state.get("learned", [])
        outcome.summary = summary.summary_text(session_id, messages, learned, summary.within_bytes(
            int(settings.get("learn", "short_term_bytes"))))
        outcome.tokens = estimate_tokens(outcome.summary)
        outcome.tags = summary.tags(messages, learned)
        if state.get("closed"):
            outcome.closed = state["closed"]
            return outcome
        now = clock.now()
        outcome.closed = clock.iso(now)
        record = {"session": session_id, "start": messages[0].time, "end": messages[-1].time,
                  "closed": outcome.closed, "messages": len(messages), "summary": outcome.summary,
                  "tags": outcome.tags, "learned": [item["id"] for item in learned if item.get("id")]}
        short_term.keep(settings, record, now, lock_wait)
        faults.checkpoint("learn: short-term kept")
        state["closed"] = outcome.closed
        buffer.write_state(call.files, state)
    return outcome


def _due(settings: Settings, pending: list[Message]) -> bool:
    if len(pending) >= int(settings.get("learn", "turns")):
        return True
    return sum(len(m.content.encode("utf-8", "surrogatepass")) for m in pending) >= int(settings.get("learn", "bytes"))


class _Call:
    """One call's session and options: the work `turn`, `compact` and `dispose` share (the
    session lock held)."""

    __slots__ = ("settings", "files", "lock_wait", "extract", "scope")

    def __init__(self, settings: Settings, session_id: str, lock_wait: float, extract, scope: Scope | None) -> None:
        self.settings, self.files, self.lock_wait = settings, SessionFiles(settings.layout, session_id), lock_wait
        self.extract, self.scope = extract or _extractor, scope

    def existing_locked(self):
        """The session's lock, for a session that has a buffer: asking for one that never had
        any (a typo in `compact --session`) leaves no lock file behind."""
        if not os.path.lexists(self.files.messages):
            self.missing()
        return self.files.locked(self.lock_wait)

    def missing(self):
        raise NotFound(f"no session {self.files.session[:60]!r}: send its messages with `memctl turn` first")

    def settled(self) -> tuple[Outcome, dict, list[Message]]:
        """Every buffered message extracted and routed."""
        messages = buffer.read_messages(self.files)
        if not messages:
            self.missing()
        state = buffer.read_state(self.files)
        outcome = Outcome(self.files.session)
        outcome.messages = len(messages)
        self.flush(state, messages, outcome)
        outcome.processed = state["processed"]
        outcome.session_learned = list(state.get("learned", []))
        return outcome, state, messages

    def flush(self, state: dict, messages: list[Message], outcome: Outcome) -> None:
        """Extract the unprocessed messages, route what was found, then record them as processed."""
        pending = messages[state["processed"]:]
        if not pending:
            return
        candidates, notes = extracted(self.settings, pending, self.extract)
        outcome.notes += notes
        faults.checkpoint("learn: extracted")
        outcome.routed = route(self.settings, candidates, clock.iso(), self.lock_wait, self.scope)
        faults.checkpoint("learn: routed")
        outcome.notes += [r.note for r in outcome.routed if r.note]
        learned = [item for item in state.get("learned", []) if isinstance(item, dict)]
        known = {item.get("id") for item in learned}
        learned += [item for item in outcome.learned() if item["id"] not in known]
        state["processed"], state["learned"] = len(messages), learned[-LEARNED_KEPT:]
        buffer.write_state(self.files, state)


def extracted(settings: Settings, messages: list[Message], extract=None) -> tuple[list[Candidate], list[str]]:
    """The candidates found in these messages, each with its provenance, and the extractor's
    notes: the one step a live session and `memctl learn` over an archived one share."""
    if not messages:
        return [], []
    candidates, notes = (extract or _extractor)(settings, messages)
    return [_with_sources(candidate, messages) for candidate in candidates], notes


def _with_sources(candidate: Candidate, pending: list[Message]) -> Candidate:
    """The candidate's sources as {"session", "message"} strings; one the extractor gave none
    (or none of that shape: a model's answer) is credited to the messages it was found in."""
    candidate.sources = [{"session": str(s.get("session", "")), "message": str(s.get("message", ""))}
                         for s in candidate.sources if isinstance(s, dict)]
    if not candidate.sources:
        candidate.sources = [message.source() for message in pending]
    return candidate


def _extractor(settings: Settings, messages: list[Message]):
    from memctl.learn.extract import extract_candidates

    return extract_candidates(settings, messages)

