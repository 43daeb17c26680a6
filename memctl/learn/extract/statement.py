"""What a language's rules say one sentence holds, before it becomes a `Candidate`."""

from __future__ import annotations

from collections import namedtuple


class Statement(namedtuple("Statement", "type topic fields confidence corrects", defaults=(False,))):
    """`type` an entry type; `topic` the merge key ("" for append types); `fields` what a merge
    replaces ({"sister's name": "Ana"}); `confidence` 0–10, lower when hedged; `corrects` the
    sentence corrects an earlier statement."""

    __slots__ = ()
