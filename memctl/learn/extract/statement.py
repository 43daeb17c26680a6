"""What a language's rules say one sentence holds, before it becomes a `Candidate`."""

from __future__ import annotations

from collections import namedtuple


class Statement(namedtuple("Statement", "type topic fields confidence corrects attributed",
                                 defaults=(False, False))):
    """`type` an entry type; `topic` the merge key ("" for append types); `fields` what a merge
    replaces ({"sister's name": "Ana"}); `confidence` 0–10, lower when hedged; `corrects` the
    sentence corrects an earlier statement; `attributed`: the sentence is not about its speaker
    ("It's a map of Middle-earth"), kept as their words ("Tim: It's a map of Middle-earth")."""

    __slots__ = ()


class Cues(namedtuple("Cues", "decision lesson plan past")):
    """A language's patterns of what a statement about oneself tells, strongest first."""

    __slots__ = ()

    def kind(self, sentence: str) -> Statement:
        """A decision, a lesson, a plan, a happening, or else another statement (an event at a
        lower confidence)."""
        if self.decision.search(sentence):
            return Statement("decision", "", {}, 7)
        if self.lesson.search(sentence):
            return Statement("lesson", "", {}, 6)
        if self.plan.search(sentence):
            return Statement("event", "", {"kind": "plan"}, 6)
        if self.past.search(sentence):
            return Statement("event", "", {}, 6)
        return Statement("event", "", {}, 5)
