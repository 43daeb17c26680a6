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
