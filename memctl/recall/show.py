"""`show`: the whole item a search ref names."""

from __future__ import annotations

import re
from collections import namedtuple

from memctl.core.config import Layout


class Item(namedtuple("Item", "layer key text", defaults=("",))):
    """layer: L2 L3 L4 L5 L6, or "L4-session" for an archived session (shown by the L4 module)."""

    __slots__ = ()


def find_item(layout: Layout, ref: str) -> Item | None:
    """The item a search ref names; None when it is not one of L2/L3/L5/L6 or a history line
    (then it may be a session name, which the L4 module resolves)."""
    import json

    from memctl.core.errors import NotFound
    from memctl.core.redact import redact
    from memctl.longterm.store import open_store

    layer, _, key = ref.partition(":")
    if layer in ("L5", "L6") or not key:
        store = open_store(layout)
        parts = {"L5": [("L5", store.active)], "L6": [("L6", store.archive)]}.get(
            layer, [("L5", store.active), ("L6", store.archive)])
        wanted = key if key else ref
        for name, part in parts:
            found = None
            for entry in part.iter():
                if entry.id == wanted:
                    found = entry  # L6 may hold an id more than once: its last line is its state
            if found is not None:
                return Item(name, wanted, json.dumps(found.to_dict(), ensure_ascii=False))
        if key:
            raise NotFound(f"no entry {wanted!r} in {layer}")
        return None
    if layer == "L2":
        from memctl.recall.documents import l2_docs

        text = _read_text(layout.global_mem)
        for doc in l2_docs(text):
            if doc.ref == ref:
                return Item("L2", key, doc.text)
        raise NotFound(f"no section [{key}] in {layout.global_mem.name}")
    if layer == "L3":
        path_part = key.rsplit(":", 1)[0] if re.search(r":\d+$", key) else key
        path = (layout.root / path_part).resolve()
        if layout.root.resolve() not in path.parents or not path.is_file():
            raise NotFound(f"no L3 file {path_part!r} in the memory")
        return Item("L3", path_part, redact(_read_text(path)))
    if layer == "L4":
        session, _, line = key.partition("#h")
        if line.isdigit():
            lines = _read_text(layout.histories).splitlines()
            number = int(line)
            if 1 <= number <= len(lines):
                return Item("L4", key, redact(lines[number - 1]))
            raise NotFound(f"no line {number} in {layout.histories.name}")
        return Item("L4-session", session)
    return None


def _read_text(path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
