"""A purge on a team memory reaches every machine (issue #14): the purge on one machine
leaves an order on the server, and every other machine applies it to its own files (L4 zips,
history, L1-L3, .memctl) before it uploads anything to the shared index or shows its L4; the
order's strings leave the server once every known machine applied it; a kill at any point of
an application finishes on the next run; an unreachable server changes nothing."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import pytest

from conftest import Backend
from l4_helpers import make_folder, snapshot
from memctl.l4 import loggen
from test_purge_resume import leaks

SECRET = "zephyr-vault-9931"
MAX_POINTS = 60


def machine(run, tmp_path: Path, name: str, pg_server: str, memory: str, secret_in_files: bool) -> Path:
    """One machine's root of the team memory; with `secret_in_files`, an archived session, its
    history and L2 hold the secret and the shared index has their rows."""
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


def hits(run, root: Path, query: str, env: dict | None = None) -> list[dict]:
    found = run("search", query, "--json", "-k", "50", root=root, env=env)
    assert found.returncode in (0, 1), found.stderr.decode()
    return [json.loads(line) for line in found.stdout.decode().splitlines()]


def orders(pg_server: str, memory: str) -> list[tuple]:
    import psycopg

    schema = f"memctl_{memory}"
    with psycopg.connect(pg_server) as conn:
        return conn.execute(f"SELECT o.run, o.needles IS NOT NULL, o.hashes::text, array(SELECT host FROM "
                            f"{schema}.purge_applied a WHERE a.run = o.run ORDER BY host) FROM {schema}.purge_orders o "
                            "ORDER BY seq").fetchall()


def session_names(root: Path) -> list[str]:
    manifest = root / "L4_raw_sessions" / "manifest.jsonl"
    return [json.loads(line)["name"] for line in manifest.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def team(run, tmp_path, pg_server, pg_memory_name) -> tuple[Path, Path]:
    """Machine A remembers the secret and purges it; machine B's own files hold it too."""
    b = machine(run, tmp_path, "b", pg_server, pg_memory_name, secret_in_files=True)
    a = machine(run, tmp_path, "a", pg_server, pg_memory_name, secret_in_files=False)
    assert run("remember", f"the vault code is {SECRET}", "--type", "event", root=a).returncode == 0
    assert any(SECRET in h["text"] for h in hits(run, b, SECRET))
    assert leaks(b, SECRET)
    purged = run("forget", "--purge", "--match", SECRET, "--yes", root=a)
    assert purged.returncode == 0, purged.stderr.decode()
    return a, b


def test_the_purge_leaves_an_order_that_waits_for_the_other_machine(run, team, pg_server, pg_memory_name):
    a, b = team
    [(run_id, has_needles, hashes, applied)] = orders(pg_server, pg_memory_name)
    assert run_id.startswith("p-") and has_needles and "sha256:" in hashes
    assert applied == [f"{__import__('socket').gethostname()}:{a.resolve()}/"]
    status = run("status", root=a).stdout.decode()
    assert f"waiting on {next(iter(_keys(b)))}" in status, status
    verified = run("verify", root=a)
    assert verified.returncode == 0 and b"purge-order" in verified.stdout + verified.stderr  # a warning
    assert leaks(b, SECRET)  # nothing has run on B yet, but its rows on the server went with the purge:
    assert SECRET not in json.dumps(hits(run, a, SECRET))
    for name in session_names(b):
        assert SECRET.encode() not in run("show", name, root=a).stdout
    import psycopg

    schema = f"memctl_{pg_memory_name}"
    with psycopg.connect(pg_server) as conn:
        assert conn.execute(f"SELECT count(*) FROM {schema}.index_items WHERE strpos(text, %s) > 0 "
                            "OR strpos(body, %s) > 0", (SECRET, SECRET)).fetchone()[0] == 0


def _keys(*roots: Path) -> set[str]:
    import socket

    return {f"{socket.gethostname()}:{root.resolve()}/" for root in roots}


@pytest.mark.parametrize("first", ["search", "show", "compose", "recent"])
def test_the_other_machine_applies_it_before_it_shows_or_uploads_anything(run, team, pg_server, pg_memory_name,
                                                                          first):
    a, b = team
    if first == "search":
        shown = run("search", SECRET, "--json", "-k", "50", root=b)
    elif first == "show":
        shown = run("show", session_names(b)[0], root=b)
    elif first == "compose":
        shown = run("compose", "vault code summary", root=b)
    else:
        shown = run("recent", "--json", root=b)
    assert shown.returncode in (0, 1), shown.stderr.decode()
    assert SECRET.encode() not in shown.stdout + shown.stderr
    assert leaks(b, SECRET) == []  # its zips (decoded), history, L2, .memctl
    assert SECRET not in json.dumps(hits(run, b, SECRET)) and SECRET not in json.dumps(hits(run, a, SECRET))
    for name in session_names(b):  # on either machine, from the files or from the server (indexed again)
        for root in (a, b):
            shown = run("show", name, root=root)
            assert shown.returncode == 0 and b"[PURGED]" in shown.stdout and SECRET.encode() not in shown.stdout
    [(_, has_needles, hashes, applied)] = orders(pg_server, pg_memory_name)
    assert not has_needles and "sha256:" in hashes and set(applied) == _keys(a, b)  # the strings gone, the audit kept
    assert "purge orders\tnone waiting" in run("status", root=b).stdout.decode()
    assert not list(b.glob(".memctl/journal/*.json"))


def test_a_machine_killed_while_applying_an_order_finishes_it_next_run(run, team, pg_server, pg_memory_name):
    """B killed at its first checkpoint, then its second, ... until a run gets through: each
    kill leaves a state the next run finishes (the string never shown, never left behind)."""
    a, b = team
    kills = 0
    for point in range(1, MAX_POINTS + 1):
        hit = run("search", SECRET, "--json", root=b, env={"MEMCTL_FAULT_AFTER": str(point)})
        if hit.returncode in (0, 1):
            break
        assert hit.returncode == -9, (point, hit.stderr.decode())
        assert SECRET.encode() not in hit.stdout
        kills += 1
    else:
        pytest.fail("the application never finished")
    assert kills >= 5, kills
    assert SECRET not in json.dumps(hits(run, b, SECRET))
    assert leaks(b, SECRET) == []
    assert not list(b.glob(".memctl/journal/*.json"))
    [(_, has_needles, _, applied)] = orders(pg_server, pg_memory_name)
    assert not has_needles and set(applied) == _keys(a, b)
    assert run("verify", root=b).returncode == 0


def test_an_unreachable_server_is_one_line_and_changes_nothing(run, team, pg_server, pg_memory_name):
    a, b = team
    before = snapshot(b)
    gone = {"MEMCTL_PG_DSN": "postgresql://memctl:s3cret-pw@127.0.0.1:1/team"}
    for args in (("search", SECRET), ("show", session_names(b)[0]), ("compose", "vault"), ("recent",)):
        result = run(*args, root=b, env=gone)
        text = result.stderr.decode()
        assert result.returncode == 2 and "127.0.0.1:1/team" in text, (args, text)
        assert len(text.strip().splitlines()) == 1 and "Traceback" not in text and "s3cret-pw" not in text
    assert snapshot(b) == before  # nothing half done: not a byte changed, no journal
    assert not list(b.glob(".memctl/journal/*.json"))
    assert SECRET not in json.dumps(hits(run, b, SECRET))  # and with the server back, it applies
    assert leaks(b, SECRET) == []


def test_a_machine_that_is_gone_is_retired_and_the_strings_leave(run, tmp_path, team, pg_server, pg_memory_name):
    a, b = team
    c = machine(run, tmp_path, "c", pg_server, pg_memory_name, secret_in_files=False)  # joins after the purge
    assert hits(run, b, SECRET) == [] or SECRET not in json.dumps(hits(run, b, SECRET))
    [(_, has_needles, _, _)] = orders(pg_server, pg_memory_name)
    assert not has_needles  # C joined after: it applied the order at its first refresh
    d = tmp_path / "d" / "memory"  # a machine known to the memory that never comes back
    d.mkdir(parents=True)
    assert run("init", root=d).returncode == 0
    Backend("postgres", pg_server).use(d, pg_memory_name)
    assert run("forget", "--purge", "--match", "vault code", "--yes", root=a).returncode == 0
    for root in (b, c):
        hits(run, root, "vault")
    assert [has for _, has, _, _ in orders(pg_server, pg_memory_name)] == [False, True]  # waiting on D
    assert f"waiting on {next(iter(_keys(d)))}" in run("status", root=b).stdout.decode()
    unknown = run("retire-machine", "nowhere:/x/", root=b)
    assert unknown.returncode == 2 and len(unknown.stderr.decode().strip().splitlines()) == 1
    retired = run("retire-machine", next(iter(_keys(d))), root=b)
    assert retired.returncode == 0, retired.stderr.decode()
    assert [has for _, has, _, _ in orders(pg_server, pg_memory_name)] == [False, False]
    assert "purge orders\tnone waiting" in run("status", root=b).stdout.decode()
