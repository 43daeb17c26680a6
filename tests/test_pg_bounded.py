"""Every wait on the server is bounded (issue #30): a frozen server (its postmaster and backends
SIGSTOPped, as a hung host whose kernel still acknowledges) gives one line and exit 2 within
$MEMCTL_PG_TIMEOUT, not a hang; once it runs again every acknowledged write is there."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import clean_env

BOUND = 3  # $MEMCTL_PG_TIMEOUT of the commands under test
CEILING = 40  # the test's own bound on each command: a hang fails it instead of the suite


@pytest.fixture
def own_cluster():
    """Its own cluster: freezing the worker's shared one would stall the other tests."""
    from pgcluster import start_cluster, why_unavailable

    if why_unavailable():
        pytest.skip(f"PostgreSQL half skipped: {why_unavailable()}")
    folder = Path(tempfile.mkdtemp(prefix="memctl-pg-"))  # the server user must reach it
    cluster = start_cluster(folder)
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            _signal_server(cluster, signal.SIGCONT)
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _server_pids(cluster) -> list[int]:
    postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    children.append(int(entry))
    return [postmaster, *children]


def _signal_server(cluster, sig) -> None:
    for pid in _server_pids(cluster):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def frozen(cluster):
    _signal_server(cluster, signal.SIGSTOP)
    try:
        yield
    finally:
        _signal_server(cluster, signal.SIGCONT)


def _memctl(memctl_bin, root, env, *args):
    started = time.monotonic()
    done = subprocess.run([memctl_bin, "--root", str(root), *args], env=env, capture_output=True,
                          timeout=CEILING)
    return done, time.monotonic() - started


def test_a_frozen_server_ends_remember_and_search_with_one_line_and_loses_nothing(own_cluster, memctl_bin,
                                                                                 tmp_path, pg_memory_name):
    root = tmp_path / "m"
    env = clean_env(MEMCTL_PG_DSN=own_cluster.dsn, MEMCTL_PG_TIMEOUT=str(BOUND))
    root.mkdir()
    (root / "memctl.toml").write_text(f'[store]\nbackend = "postgres"\nmemory = "{pg_memory_name}"\n')
    assert _memctl(memctl_bin, root, env, "init", str(root))[0].returncode == 0
    kept, _ = _memctl(memctl_bin, root, env, "remember", "the build server is rex", "--type", "event")
    assert kept.returncode == 0, kept.stderr
    with frozen(own_cluster):
        for args in (("remember", "the deploy key rotates monthly", "--type", "event"), ("search", "build")):
            done, _ = _memctl(memctl_bin, root, env, *args)
            lines = done.stderr.decode().strip().splitlines()
            assert done.returncode == 2, (args, done.stderr)
            assert len(lines) == 1 and "PostgreSQL at 127.0.0.1" in lines[0] and "Traceback" not in lines[0]
    found, _ = _memctl(memctl_bin, root, env, "search", "build server")
    assert found.returncode == 0 and b"rex" in found.stdout


def test_an_open_connection_to_a_server_that_freezes_ends_within_the_bound(own_cluster, monkeypatch):
    """The case keepalives and statement_timeout cannot end: the connection is open, the server
    stops answering; psycopg's wait is bounded client-side and the connection closed."""
    from memctl.core import pg

    monkeypatch.setenv("MEMCTL_PG_TIMEOUT", str(BOUND))
    conn = pg.connect(own_cluster.dsn, autocommit=True)
    assert conn.execute("SELECT 1").fetchone() == (1,)
    import psycopg

    import threading

    outcome: list[BaseException] = []

    def query() -> None:
        try:
            conn.execute("SELECT 2")
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(exc)

    with frozen(own_cluster):
        asker = threading.Thread(target=query, daemon=True)
        asker.start()
        asker.join(CEILING)  # unbounded, the query would wait as long as the server is frozen
        assert not asker.is_alive(), "the query still waits on the frozen server"
    assert len(outcome) == 1 and isinstance(outcome[0], psycopg.OperationalError)
    assert f"within {BOUND} s" in str(outcome[0]) and conn.closed


def test_the_bound_is_checked(monkeypatch):
    from memctl.core import pg
    from memctl.core.errors import ConfigError

    for bad in ("soon", "0", "1e9"):
        monkeypatch.setenv("MEMCTL_PG_TIMEOUT", bad)
        with pytest.raises(ConfigError, match="MEMCTL_PG_TIMEOUT"):
            pg.statement_bound()
    monkeypatch.setenv("MEMCTL_PG_TIMEOUT", "7")
    assert pg.statement_bound() == 7 and "statement_timeout=7000" in pg.bounded_parameters(7)["options"]


def test_a_wait_longer_than_the_bound_for_a_busy_lock_ends_busy(pg_server, memctl_bin, tmp_path, pg_memory_name):
    """`--wait` past $MEMCTL_PG_TIMEOUT: the lock wait is the one wait the bound does not cut
    short; a lock still held at its end is busy (75), not a server failure (2)."""
    import psycopg

    from memctl.core import pg

    root = tmp_path / "m"
    env = clean_env(MEMCTL_PG_DSN=pg_server, MEMCTL_PG_TIMEOUT="2")
    root.mkdir()
    (root / "memctl.toml").write_text(f'[store]\nbackend = "postgres"\nmemory = "{pg_memory_name}"\n')
    assert _memctl(memctl_bin, root, env, "init", str(root))[0].returncode == 0
    with psycopg.connect(pg_server, autocommit=True) as holder:  # a dream of another machine, say
        holder.execute("SELECT pg_advisory_lock(%s)", (pg.lock_key(pg.schema_for(pg_memory_name), "writer"),))
        done, took = _memctl(memctl_bin, root, env, "remember", "the deploy key rotates monthly", "--type", "event", "--wait", "5")
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 75, done.stderr
    assert len(lines) == 1 and "busy" in lines[0], lines
    assert 5 <= took < CEILING


def test_a_whole_memory_writer_waiting_past_the_bound_is_busy_not_failed(pg_server, pg_memory_name, monkeypatch):
    """The exclusive lock (dream, undo, purge) likewise: `hold_memory_lock` past the bound."""
    import psycopg

    from memctl.core import pg
    from memctl.core.errors import LockBusy

    monkeypatch.setenv("MEMCTL_PG_TIMEOUT", "1")
    schema = pg.schema_for(pg_memory_name)
    with psycopg.connect(pg_server, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock_shared(%s)", (pg.lock_key(schema, "writer"),))
        conn = pg.connect(pg_server, autocommit=True)
        started = time.monotonic()
        with pytest.raises(LockBusy), conn.transaction():
            pg.hold_memory_lock(conn, schema, 2.5)
        assert 2.5 <= time.monotonic() - started < CEILING
        with conn.transaction():  # the connection still bounded as before, and usable
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1s"
        conn.close()
