"""The dream log of a server memory: rows of the memory's `dream_log` table, each the exact
line the file backend writes (memctl.longterm.pg_store's PostgresEntryStore has these methods)."""

from __future__ import annotations

import json
from typing import Callable

from memctl.longterm.pg_conn import translated


class ServerDreamLog:
    """The dream log's methods of the entry store, over `self._server` (a pg_conn.Server)."""

    @property
    def log_location(self) -> str:
        return f"the dream log in {self.where}"

    @property
    def log_name(self) -> str:
        return f"the dream log of {self._server.schema}"

    def append_log(self, records: list[dict]) -> None:
        self.append_log_lines([self.log_line(r) for r in records])

    def append_log_lines(self, lines: list[bytes]) -> None:
        if lines:
            self._server.send_locks()
            with self._server.transaction(), self._server.conn.cursor() as cursor, translated(self._server.where):
                cursor.executemany(f"INSERT INTO {self._server.schema}.dream_log (raw) VALUES (%s)",
                                   [(line,) for line in lines])

    def log_lines(self) -> list[tuple[int, bytes]]:
        return [(int(seq), bytes(raw)) for seq, raw in
                self._server.execute("SELECT seq, raw FROM {s}.dream_log ORDER BY seq").fetchall()]

    def log_length(self) -> int:
        return int(self._server.execute("SELECT coalesce(max(seq), 0) FROM {s}.dream_log").fetchone()[0])

    def cut_log_back(self, length: int) -> bool:
        return bool(self._server.execute("DELETE FROM {s}.dream_log WHERE seq > %s", (length,)).rowcount)

    def scrub_log(self, ids: set[str], needles: list[bytes], scrub: Callable[[dict], dict]) -> bool:
        """As the file backend does: every record through `scrub`, a line that does not parse
        dropped if it holds a string. False: nothing mentions them."""
        lines = self.log_lines()
        data = b"".join(raw for _, raw in lines)
        if not any(i.encode() in data for i in ids) and not any(n in data for n in needles):
            return False
        with self._server.transaction():
            for seq, raw in lines:
                try:
                    record = json.loads(raw)
                except ValueError:
                    if any(n in raw for n in needles):
                        self._server.execute("DELETE FROM {s}.dream_log WHERE seq = %s", (seq,))
                    continue
                new = self.log_line(scrub(record))
                if new != raw:
                    self._server.execute("UPDATE {s}.dream_log SET raw = %s WHERE seq = %s", (new, seq))
        return True
