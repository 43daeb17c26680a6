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


def test_each_line_is_its_own_entry_even_when_lines_would_join_into_other_json():
    """A line leaving an array open and one holding two objects: joined by commas they would
    parse as the same number of values, each row holding another line's entry."""
    from memctl.longterm.entries import parse_rows

    good = [entry_line(Entry(id=f"e{k}", text=f"fact {k}", type="lesson")) for k in range(3)]
    opens = b'{"id": "x1", "text": "swallows the next line", "k": [{"a": 1}\n'
    closes = b'{"q": 2}]}\n'
    doubled = b'{"id": "x2", "text": "first"},{"id": "x3", "text": "second"}\n'
    data = good[0] + opens + closes + good[1] + doubled + good[2]
    rows = parse_rows(data)
    assert [r.raw for r in rows] == data.splitlines(keepends=True)
    assert [r.entry.id if r.entry else None for r in rows] == ["e0", None, None, "e1", None, "e2"]
    per_line = [json.loads(r.raw) if r.entry else None for r in rows]
    assert [r.entry.to_dict() if r.entry else None for r in rows] == \
        [Entry.from_dict(d).to_dict() if d else None for d in per_line]
