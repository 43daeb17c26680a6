"""Searches are read-only on the server (issue #30): through a role whose sessions are
read-only (as on a hot standby) a search refreshes nothing and records no references, and
returns the hits the writable role gets."""

from __future__ import annotations

import psycopg

from test_pg_store import make


def test_a_search_through_a_read_only_role_returns_the_same_hits(run, tmp_path, pg_server, pg_memory_name):
    memory = make(run, tmp_path, "postgres", pg_server, pg_memory_name)
    memory.ok("remember", "the release train leaves on thursdays", "--type", "event")
    memory.ok("remember", "the release notes live in docs/releases", "--type", "event")
    hits = memory.ok("search", "release", "--json")
    schema = f"memctl_{pg_memory_name}"
    role = f"reader_{pg_memory_name}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        refs_before = conn.execute(f"SELECT count(*) FROM {schema}.refs").fetchone()[0]
    reader = pg_server.replace("postgres@", f"{role}@", 1)
    assert reader != pg_server
    memory.ok("remember", "the release freeze starts a week before", "--type", "event")  # unindexed yet
    done = memory.run("search", "release", "--json", env={"MEMCTL_PG_DSN": reader})
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == hits  # the index as the writers left it: no refresh from here
    with psycopg.connect(pg_server) as conn:
        assert conn.execute(f"SELECT count(*) FROM {schema}.refs").fetchone()[0] == refs_before
