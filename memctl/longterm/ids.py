"""Entry ids: `m` + 12 hex digits. Apart from `entries` so that the resident writer's client
(memctl.cli.resident) can choose the id of the entry it asks for without loading the entry format."""

from __future__ import annotations

import os


def new_id(prefix: str = "m") -> str:
    """A short, unique, sortable-enough id: prefix + 12 hex digits.

    `MEMCTL_IDS=FILE` (tests, as MEMCTL_NOW fixes the clock): the next number of a counter
    kept in FILE instead, so the same commands give the same ids on both backends."""
    counter = os.environ.get("MEMCTL_IDS")
    if counter:
        return f"{prefix}{_next_number(counter):012x}"
    return f"{prefix}{os.urandom(6).hex()}"  # secrets.token_hex, without importing secrets (~10 ms)


def well_formed(entry_id: str, prefix: str = "m") -> bool:
    """Whether `entry_id` is what `new_id` makes (a resident writer checks a client's)."""
    digits = entry_id[len(prefix):]
    return entry_id.startswith(prefix) and len(digits) == 12 and all(c in "0123456789abcdef" for c in digits)


def _next_number(path: str) -> int:
    try:
        with open(path) as handle:  # as Path.read_text / write_text
            number = int(handle.read() or "0") + 1
    except FileNotFoundError:
        number = 1
    with open(path, "w") as handle:
        handle.write(str(number))
    return number
