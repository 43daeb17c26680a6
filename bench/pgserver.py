"""The PostgreSQL server a benchmark runs against: $MEMCTL_PG_DSN when it is set, else a
throwaway cluster from the machine's binaries (tests/pgcluster.py), stopped at the end."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def server_dsn():
    given = os.environ.get("MEMCTL_PG_DSN")
    if given:
        yield given
        return
    sys.path.insert(0, str(HERE.parent / "tests"))
    from pgcluster import running_cluster, why_unavailable

    reason = why_unavailable()
    if reason:
        sys.exit(f"no PostgreSQL for the benchmark: {reason}")
    with running_cluster("memctl-bench-pg-") as dsn:
        yield dsn


def store_config(memory: str) -> str:
    """The memctl.toml lines of a memory kept on the server."""
    return f'[store]\nbackend = "postgres"\nmemory = "{memory}"\n'
