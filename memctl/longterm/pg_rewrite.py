"""How a rewrite of a server part changes only what differs (memctl.longterm.pg_store): the
rows read are kept in place, dropped, or have their place taken by a new row; new rows go at
the end when nothing kept follows them."""

from __future__ import annotations

from memctl.longterm.entries import Row


def rewrite_plan(rows: list[Row], seen: set[int]) -> tuple[list[int], list[tuple[int, Row]], list[Row]] | None:
    """(seqs to delete, (seq, row) to write in place, rows to append) that turn the rows read
    (`seen`) into `rows`; None when a new row must go between two kept ones with no freed
    place for it."""
    kept = [getattr(r, "seq", None) for r in rows]
    kept = [seq if seq in seen else None for seq in kept]
    order = [seq for seq in kept if seq is not None]
    if any(a >= b for a, b in zip(order, order[1:])):
        return None
    freed = sorted(seen - set(order))
    updates: list[tuple[int, Row]] = []
    appends: list[Row] = []
    last, used = 0, set()
    following = _next_kept(kept)
    for index, (row, seq) in enumerate(zip(rows, kept)):
        if seq is not None:
            last = seq
            continue
        bound = following[index]
        slot = next((f for f in freed if last < f and f not in used and (bound is None or f < bound)), None)
        if slot is not None:
            used.add(slot)
            updates.append((slot, row))
            last = slot
        elif bound is None:
            appends.append(row)
            last = float("inf")
        else:
            return None
    return [f for f in freed if f not in used], updates, appends


def _next_kept(kept: list[int | None]) -> list[int | None]:
    """For each position, the next kept seq after it (None: none)."""
    out: list[int | None] = [None] * len(kept)
    upcoming = None
    for index in range(len(kept) - 1, -1, -1):
        out[index] = upcoming
        if kept[index] is not None:
            upcoming = kept[index]
    return out
