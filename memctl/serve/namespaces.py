"""Which namespace each entry belongs to, for a namespace key's searches and refs.

An entry written through a namespace key carries `"namespace": NS` (its other fields as
`remember` writes them). The search index does not keep that field, so the server keeps a
map id -> namespace per file (L5, L6): read again when the file was replaced, only its new
lines read when it grew. Only lines holding `"namespace"` are parsed.
"""

from __future__ import annotations

import os
import threading

from memctl.core import jsoncodec

FIELD = "namespace"
_MARK = b'"namespace"'


class _FileMap:
    def __init__(self, path) -> None:
        self.path = path
        self.inode: int | None = None
        self.size = 0
        self.ids: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        try:
            info = os.stat(self.path)
        except OSError:
            self.inode, self.size, self.ids = None, 0, {}
            return self.ids
        if info.st_ino != self.inode or info.st_size < self.size:
            self.inode, self.size, self.ids = info.st_ino, 0, {}
        if info.st_size > self.size:
            self._read_from(self.size)
        return self.ids

    def _read_from(self, offset: int) -> None:
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line being written is read once it is whole
        for line in whole.splitlines():
            if _MARK in line:
                self._note(line)
        self.size = offset + len(whole)

    def _note(self, line: bytes) -> None:
        try:
            data = jsoncodec.loads(line)
        except (ValueError, RecursionError):
            return
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            self.ids[data["id"]] = str(data.get(FIELD) or "")


class EntryNamespaces:
    """namespace_of(id): "" for an entry of no namespace (written by the CLI or an unbound key)."""

    def __init__(self, layout) -> None:
        self._files = [_FileMap(layout.long_term), _FileMap(layout.cold_archive)]
        self._lock = threading.Lock()

    def namespace_of(self, entry_id: str) -> str:
        with self._lock:
            for part in self._files:
                found = part.current().get(entry_id)
                if found is not None:
                    return found
        return ""
