"""The stored form of an entry: field order and omissions exactly as before (dream --undo and
byte-for-byte exports rely on it)."""

from __future__ import annotations

import json
import random
from memctl.longterm.entries import Entry, entry_line


def reference_dict(entry: Entry) -> dict:
    """The historical definition: every field in declaration order, empty ones left out, the
    extra keys after them, id/type/text always present."""
    fields = {name: getattr(entry, name) for name in Entry.__slots__}  # declaration order
    data = {k: v for k, v in fields.items() if k != "extra" and v not in ("", [], None)}
    data.update(entry.extra)
    for required in ("id", "type", "text"):
        data[required] = getattr(entry, required)
    return data


def test_to_dict_matches_the_reference_on_random_entries():
    rng = random.Random(7)
    for number in range(3000):
        entry = Entry(
            id=f"m{number}", text=rng.choice(["", "hello", "缓存 令牌", "x" * 50]), type=rng.choice(["event", ""]),
            topic=rng.choice(["", "editor"]), confidence=rng.choice([0, 5, 7.5]), refs=rng.choice([0, 3]),
            supersedes=rng.choice([[], ["a", "b"]]), reason=rng.choice(["", "archived"]),
            extra=rng.choice([{}, {"sha256": "x", "nested": {"a": [1]}}, {"id": "shadowed"}]))
        assert json.dumps(entry.to_dict(), ensure_ascii=False) == json.dumps(reference_dict(entry), ensure_ascii=False)
        assert entry_line(entry) == (json.dumps(reference_dict(entry), ensure_ascii=False) + "\n").encode()


def test_to_dict_copies_lists_so_a_caller_cannot_change_the_entry():
    entry = Entry(id="m1", text="t", supersedes=["a"])
    entry.to_dict()["supersedes"].append("b")
    assert entry.supersedes == ["a"]


# the dataclass's field order, which fixes the key order of every stored line
HISTORICAL_FIELDS = ("id", "text", "type", "topic", "confidence", "refs", "last_ref", "created", "updated", "source",
                     "seen", "date", "session", "speaker", "supersedes", "merged_from", "consolidated_from",
                     "left_at", "reason", "run", "note", "extra")


def test_entry_keeps_the_dataclass_field_order_defaults_equality_and_replace():
    assert Entry.__slots__ == HISTORICAL_FIELDS
    entry = Entry("m1", "text")
    assert (entry.type, entry.confidence, entry.seen, entry.supersedes, entry.extra) == ("event", 5, 1, [], {})
    assert Entry("m1", "text").supersedes is not entry.supersedes  # a fresh list each
    changed = entry.replace(reason="forgotten", seen=2)
    assert (changed.reason, changed.seen, changed.text, entry.reason) == ("forgotten", 2, "text", "")
    assert changed != entry and changed.replace(reason="", seen=1) == entry
    assert entry != "m1" and Entry("m1", "text", extra={"a": 1}) != entry
    assert "reason='forgotten'" in repr(changed)
