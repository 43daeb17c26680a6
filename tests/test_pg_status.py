"""`status` on a team memory tells the truth about the shared index (issue #30): it lives in
the server's schema, not in .memctl/index.sqlite, so it is never reported "missing" there."""

from __future__ import annotations

import json

from test_pg_store import make


def test_status_reports_the_shared_index_on_the_server_with_its_items(run, tmp_path, pg_server, pg_memory_name):
    memory = make(run, tmp_path, "postgres", pg_server, pg_memory_name)
    memory.ok("remember", "the staging database is on port 6543", "--type", "event")
    memory.ok("search", "staging")
    line = [row for row in memory.ok("status").splitlines() if row.startswith("index\t")][0]
    assert "missing" not in line and "on server" in line and pg_memory_name in line
    index = json.loads(memory.ok("status", "--json"))["index"]
    assert index["on_server"] and index["usable"] and index["items"] >= 1
    assert "@" not in index["path"]  # the host and database, never a user or password
