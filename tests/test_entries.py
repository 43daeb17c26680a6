"""The stored form of an entry: field order and omissions exactly as before (dream --undo and
byte-for-byte exports rely on it)."""

from __future__ import annotations

import json
import random
from dataclasses import asdict

from memctl.longterm.entries import Entry, entry_line


def reference_dict(entry: Entry) -> dict:
    """The historical definition: every field in declaration order, empty ones left out, the
    extra keys after them, id/type/text always present."""
    data = {k: v for k, v in asdict(entry).items() if k != "extra" and v not in ("", [], None)}
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
