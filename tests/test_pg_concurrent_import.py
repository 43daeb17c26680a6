"""Two machines importing into one server memory at once index each item once (issue #30):
the shared sources `server:L5`/`server:L6` are refreshed by whichever machine gets the index
lock, and the other must not append the same seqs again."""

from __future__ import annotations

import json
import subprocess

import psycopg

from conftest import clean_env
from test_pg_store import make

ITEMS = 150  # per import
IMPORTS = 8  # per machine, one after another; the two machines at once


def _batch(machine: str, number: int) -> bytes:
    return b"".join(json.dumps({"id": f"{machine}{number}x{k}", "type": "event",
                                "text": f"{machine} deploy {number} number {k} went out on host {k * 7}"}).encode()
                    + b"\n" for k in range(ITEMS))


def test_two_concurrent_imports_on_two_machines_index_each_item_once(run, tmp_path, pg_server, pg_memory_name,
                                                                    memctl_bin):
    roots = [make(run, tmp_path, "postgres", pg_server, pg_memory_name, name=name) for name in ("a", "b")]
    env = clean_env(MEMCTL_PG_DSN=pg_server)
    for memory in roots:  # each machine's index built first, so the imports' refreshes race
        assert memory.run("search", "deploy").returncode in (0, 1)
    script = " && ".join(f'"$0" --root "$1" import "$2/{{}}{n}.jsonl" --layer L5'.replace("{}", "$3")
                         for n in range(IMPORTS))
    for name in "ab":
        for number in range(IMPORTS):
            (tmp_path / f"{name}{number}.jsonl").write_bytes(_batch(name, number))
    children = [subprocess.Popen(["sh", "-c", script, memctl_bin, str(memory.root), str(tmp_path), name], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for memory, name in zip(roots, "ab")]
    errors = [child.communicate(timeout=600)[1] for child in children]
    assert [child.returncode for child in children] == [0, 0], errors
    for memory in roots:
        assert memory.run("search", "deploy").returncode in (0, 1)
    schema = f"memctl_{pg_memory_name}"
    with psycopg.connect(pg_server) as conn:
        entries = conn.execute(f"SELECT count(*) FROM {schema}.entries").fetchone()[0]
        rows = conn.execute(f"SELECT count(*) FROM {schema}.index_items WHERE source = 'server:L5'").fetchone()[0]
    assert entries == 2 * ITEMS * IMPORTS
    assert rows == entries
