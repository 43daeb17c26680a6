"""A purge on a team memory reaches every machine (issue #14): the purge on one machine
leaves an order on the server, and every other machine applies it to its own files (L4 zips,
history, L1-L3, .memctl) before it uploads anything to the shared index or shows its L4."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import pytest

from conftest import Backend
from l4_helpers import make_folder
from memctl.l4 import loggen
from test_purge_resume import leaks

SECRET = "zephyr-vault-9931"


def machine(run, tmp_path: Path, name: str, pg_server: str, memory: str, secret_in_files: bool) -> Path:
    """One machine's root of the team memory; with `secret_in_files`, an archived session, its
    history and L2 hold the secret and the shared index has its rows."""
    folder = make_folder(tmp_path / name)
    root = folder.root
    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, memory)
    if secret_in_files:
        rng = random.Random(3)
        folder.add_log("model_responses_1.txt", loggen.format_a(datetime(2026, 4, 6, 9, 0), 3, rng, 200,
                                                                request=f"the vault code is {SECRET}"))
        assert run("archive", folder.raw_dir, "--min-age", "0s", "--keep-newest", "0", root=root).returncode == 0
        with open(root / "global_mem.txt", "a", encoding="utf-8") as handle:
            handle.write(f"\n## [VAULT]\nvault code: {SECRET}\n")
    assert run("index", "refresh", root=root).returncode == 0
    return root


def hits(run, root: Path, query: str) -> list[dict]:
    found = run("search", query, "--json", "-k", "50", root=root)
    assert found.returncode in (0, 1), found.stderr.decode()
    return [json.loads(line) for line in found.stdout.decode().splitlines()]


@pytest.fixture
def team(run, tmp_path, pg_server, pg_memory_name) -> tuple[Path, Path]:
    """Machine A purges; machine B's own files hold the secret."""
    b = machine(run, tmp_path, "b", pg_server, pg_memory_name, secret_in_files=True)
    a = machine(run, tmp_path, "a", pg_server, pg_memory_name, secret_in_files=False)
    assert run("remember", f"the vault code is {SECRET}", "--type", "event", root=a).returncode == 0
    assert any(SECRET in h["text"] for h in hits(run, b, SECRET))
    assert leaks(b, SECRET)
    purged = run("forget", "--purge", "--match", SECRET, "--yes", root=a)
    assert purged.returncode == 0, purged.stderr.decode()
    return a, b


def test_a_purge_on_one_machine_leaves_no_trace_on_another(run, team):
    a, b = team
    assert not any(SECRET in json.dumps(h) for h in hits(run, b, SECRET))
    assert leaks(b, SECRET) == []
