"""The write path's queries answered by reading a whole L5 or L6 file: the reference answers.

`memctl.longterm.store` asks the derived lookups (`memctl.longterm.lookups`) first and falls
back to these when the lookups cannot answer (missing, being rebuilt, a failed SQLite), or
when `MEMCTL_LOOKUPS=0` asks for the full scan (the tests compare both). Every function takes
the file's bytes; none writes.
"""

from __future__ import annotations

from memctl.core.errors import UsageError
from memctl.core.jsonl import split_torn
from memctl.longterm.entries import Entry, Row, entries_with, field_bytes, parse_rows
from memctl.longterm.policies import match_key, normalize_topic, reachable_lengths

GONE_FOR_GOOD = ("forgotten", "purged")  # L6 reasons a remember must not silently undo


def duplicate_error(entry_id: str, what: str) -> UsageError:
    """A duplicate id is never resolved by dropping one of its texts: refuse, naming it."""
    return UsageError(f"{entry_id} is on more than one line of {what}; nothing was changed "
                      "(give one of the lines a new id, then rerun)")


def whole(data: bytes) -> bytes:
    return split_torn(data)[0]  # a torn last line is not an entry


def count(data: bytes) -> int:
    """Lines that are not blank (entries, and lines kept as they are)."""
    return sum(1 for line in whole(data).splitlines() if line.strip())


def rows_of(data: bytes, entry_id: str) -> list[Row]:
    """The rows holding this id, in file order."""
    return [r for r in parse_rows(whole(data), field_bytes("id", entry_id))
            if r.entry is not None and r.entry.id == entry_id]


def active_row(data: bytes, entry_id: str) -> Row | None:
    found = rows_of(data, entry_id)
    if len(found) > 1:
        raise duplicate_error(entry_id, "L5")
    return found[0] if found else None


def last_row(data: bytes, entry_id: str) -> Row | None:
    found = rows_of(data, entry_id)
    return found[-1] if found else None


def current(data: bytes, type_name: str, topic: str) -> Row | None:
    key = (type_name, normalize_topic(topic))
    rows = [r for r in parse_rows(whole(data), field_bytes("type", type_name))
            if r.entry is not None and r.entry.type == type_name]
    found = next((r for r in reversed(rows) if (r.entry.type, normalize_topic(r.entry.topic)) == key), None)
    if found is not None and sum(1 for r in rows if r.entry.id == found.entry.id) > 1:
        raise duplicate_error(found.entry.id, "L5")
    return found


def candidates(data: bytes, type_name: str, text: str, cutoff: float) -> list[Row]:
    low, high = reachable_lengths(text, cutoff)
    return [r for r in parse_rows(whole(data), field_bytes("type", type_name))
            if r.entry is not None and r.entry.type == type_name and low <= len(match_key(r.entry.text)) <= high]


def replaced(data: bytes, entry_id: str, new_row: Row | None, at_end: bool) -> bytes:
    """The file with this id's one line replaced by `new_row` (at its place, or `at_end`), or
    dropped (None)."""
    rows = parse_rows(data, field_bytes("id", entry_id))
    matches = [i for i, r in enumerate(rows) if r.entry is not None and r.entry.id == entry_id]
    if len(matches) != 1:
        raise duplicate_error(entry_id, "L5") if matches else UsageError(f"no entry {entry_id} in L5")
    index = matches[0]
    if new_row is None:
        del rows[index]
    elif at_end:
        del rows[index]
        rows.append(new_row)
    else:
        rows[index] = new_row
    return b"".join(r.raw for r in rows)


def without(data: bytes, entry_ids: set[str]) -> bytes:
    """The file without the lines of these ids."""
    return b"".join(r.raw for r in parse_rows(data) if r.entry is None or r.entry.id not in entry_ids)


def last_left_as(data: bytes, reasons: tuple[str, ...]) -> dict[str, Entry]:
    """For each id with a line giving one of these reasons, the last such line (a later
    reason in `reasons` wins over an earlier one)."""
    last: dict[str, Entry] = {}
    for reason in reasons:
        for entry in entries_with(data, field_bytes("reason", reason)):
            if entry.reason in reasons:
                last[entry.id] = entry
    return last


def last_line_gives(data: bytes, entry_id: str, reasons: tuple[str, ...]) -> bool:
    """Whether the last line about this id gives one of these reasons."""
    final = data.rfind(field_bytes("id", entry_id))
    end = data.find(b"\n", final)
    line = data[data.rfind(b"\n", 0, final) + 1: end if end >= 0 else len(data)]
    return any(field_bytes("reason", reason) in line for reason in reasons)


def gone_for_good(active: bytes, archive: bytes, text: str, fingerprint: str, cutoff: float) -> list[Entry]:
    """L6 entries left as forgotten or purged and not active again: those carrying this
    fingerprint, and those whose text could be a near-duplicate; in the order the reference
    check met them (the first forgotten line of each id, then the purged-only ids)."""
    active, archive = whole(active), whole(archive)
    low, high = reachable_lengths(text, cutoff)
    found = []
    for entry in last_left_as(archive, GONE_FOR_GOOD).values():
        near = bool(entry.text) and low <= len(match_key(entry.text)) <= high
        if (entry.extra.get("sha256") == fingerprint or near) and field_bytes("id", entry.id) not in active \
                and last_line_gives(archive, entry.id, GONE_FOR_GOOD):
            found.append(entry)
    return found
