"""`show`: the whole item a search ref names."""

from __future__ import annotations

import re
from collections import namedtuple
from pathlib import Path

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
        from memctl.recall.indexing.documents import l2_docs

        text = _read_text(layout.global_mem)
        for doc in l2_docs(text):
            if doc.ref == ref:
                return Item("L2", key, doc.text)
        raise NotFound(f"no section [{key}] in {layout.global_mem.name}")
    if layer == "L3":
        path_part = key.rsplit(":", 1)[0] if re.search(r":\d+$", key) else key
        return Item("L3", path_part, redact(l3_file_text(layout, path_part)))
    if layer == "L4":
        session, _, line = key.partition("#h")
        if line.isdigit():
            lines = _read_text(layout.histories).splitlines()
            number = int(line)
            if 1 <= number <= len(lines):
                return Item("L4", key, redact(lines[number - 1]))
            raise NotFound(f"no line {number} in {layout.histories.name}")
        name, _, entry = key.partition("#")
        if entry.isdigit():  # the id `search --json` gives a piece of a session: its whole entry
            return Item("L4", key, redact(session_entry_text(layout, name, int(entry))))
        return Item("L4-session", session)
    return None


def session_entry_text(layout: Layout, name: str, number: int) -> str:
    """Entry `number` of an archived session's compressed text, its marker line first."""
    import io

    from memctl.core.errors import NotFound
    from memctl.l4.sessions import find_session, write_compressed
    from memctl.recall.indexing.documents import session_entries

    buffer = io.BytesIO()
    write_compressed(layout, find_session(layout, name), buffer.write)
    for entry_no, kind, date, body in session_entries(buffer.getvalue().decode("utf-8", "replace")):
        if entry_no == number:
            marker = [f"=== {kind.capitalize()} === {date.replace('T', ' ')}"] if entry_no else []
            return "\n".join(marker + body)
    raise NotFound(f"no entry {number} in session {name}")


def l3_file_text(layout: Layout, name: str) -> str:
    """The text of an L3 file: only a file the index counts as L3 (never `.memctl/`, the
    config, the other layers' files or anything outside the root), and never through a link."""
    from memctl.core.errors import NotFound
    from memctl.core.fsutil import read_bytes_nofollow, refuse_symlink
    from memctl.recall.indexing.sources import l3_files

    path = layout.root / name
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise NotFound(f"no L3 file {name!r} in the memory")
    refuse_symlink(*(layout.root.joinpath(*Path(name).parts[:depth]) for depth in range(1, len(Path(name).parts) + 1)))
    if path not in set(l3_files(layout)):
        raise NotFound(f"no L3 file {name!r} in the memory (show serves L3 notes, not .memctl/, "
                       f"memctl.toml or other layers' files)")
    return read_bytes_nofollow(path).decode("utf-8", "replace")


def _read_text(path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
