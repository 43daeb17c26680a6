"""memctl.core.pg on a real throwaway PostgreSQL: versioned schema, advisory locks, errors."""

from __future__ import annotations

import pytest

from memctl.core import pg
from memctl.core.errors import LockBusy

STEPS = [
    "CREATE TABLE {schema}.things (id text PRIMARY KEY)",
    "ALTER TABLE {schema}.things ADD COLUMN note text",
]


@pytest.fixture
def conn(pg_server):
    connection = pg.connect(pg_server)
    yield connection
    connection.close()


def test_migrate_creates_each_version_once_and_refuses_a_newer_schema(conn, pg_memory_name):
    schema = pg.schema_for(pg_memory_name)
    assert pg.schema_version(conn, schema, "things") == 0
    assert pg.migrate(conn, schema, "things", STEPS[:1]) == 1
    assert pg.migrate(conn, schema, "things", STEPS) == 2
    assert pg.migrate(conn, schema, "things", STEPS) == 2  # nothing to do: no error, no second ALTER
    conn.execute(f"INSERT INTO {schema}.things VALUES ('a', 'b')")
    pg.require_version(conn, schema, "things", STEPS)
    with pytest.raises(pg.SchemaTooNew, match="upgrade memctl"):
        pg.migrate(conn, schema, "things", STEPS[:1])
    with pytest.raises(pg.SchemaTooNew):
        pg.require_version(conn, schema, "things", STEPS[:1])
    with pytest.raises(Exception, match="memctl init"):
        pg.require_version(conn, schema, "other", STEPS)


def test_an_unreachable_server_is_one_line_naming_the_host_never_the_password():
    dsn = "postgresql://agent:hunter2secret@127.0.0.1:1/team"
    with pytest.raises(pg.ServerUnavailable) as caught:
        pg.connect(dsn)
    message = str(caught.value)
    assert "127.0.0.1:1/team" in message
    assert "hunter2secret" not in message and "\n" not in message


def test_the_memory_lock_is_busy_while_another_transaction_holds_it(pg_server, pg_memory_name):
    schema = pg.schema_for(pg_memory_name)
    holder, other = pg.connect(pg_server), pg.connect(pg_server)
    try:
        with holder.transaction():
            pg.hold_memory_lock(holder, schema, 0)
            with pytest.raises(LockBusy, match="--wait"):
                with other.transaction():
                    pg.hold_memory_lock(other, schema, 0)
            with pytest.raises(LockBusy, match="busy for 0.2 s"):
                with other.transaction():
                    pg.hold_memory_lock(other, schema, 0.2)
        with other.transaction():  # released with the holder's transaction
            pg.hold_memory_lock(other, schema, 0)
    finally:
        holder.close()
        other.close()


def test_lock_keys_differ_by_memory_and_fit_a_bigint():
    keys = {pg.lock_key(pg.schema_for(name), "writer") for name in ("a", "b", "team")}
    assert len(keys) == 3
    assert all(-(1 << 63) <= key < (1 << 63) for key in keys)


def test_store_settings_are_checked(tmp_path):
    from memctl.core.config import load_settings
    from memctl.core.errors import ConfigError

    (tmp_path / "memctl.toml").write_text('[store]\nbackend = "postgres"\nmemory = "team_1"\n')
    settings = load_settings(tmp_path)
    assert settings.get("store", "backend") == "postgres"
    for bad in ('backend = "mysql"', 'memory = "Team"', 'memory = "x; DROP SCHEMA"', 'memory = "1a"'):
        (tmp_path / "memctl.toml").write_text(f"[store]\n{bad}\n")
        with pytest.raises(ConfigError, match="store"):
            load_settings(tmp_path)


def test_a_cluster_whose_starter_was_killed_is_stopped_and_removed_by_the_next_start(pg_server, tmp_path):
    """A SIGKILLed pytest never stops its throwaway server; the next start reaps it."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import psycopg
    from pgcluster import reap_orphaned_clusters, server_bin_dir

    parent = Path(tempfile.mkdtemp(prefix="memctl-reap-"))
    parent.chmod(0o755)
    starter = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from pgcluster import start_cluster;"
         "print(start_cluster(Path(sys.argv[1])).dsn, flush=True); time.sleep(600)", str(parent / "cluster")],
        cwd=Path(__file__).parent, stdout=subprocess.PIPE, text=True)
    try:
        dsn = starter.stdout.readline().strip()
        psycopg.connect(dsn, connect_timeout=10).close()
        assert reap_orphaned_clusters(server_bin_dir(), parent) == []  # its owner still runs
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
    assert reap_orphaned_clusters(server_bin_dir(), parent) == [parent / "cluster"]
    assert not (parent / "cluster").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=5).close()
    parent.rmdir()
