"""The PostgreSQL connection of a memory whose `[store] backend` is "postgres" (issue #14).

One memory is one schema (`memctl_<[store] memory>`) on the server named by `$MEMCTL_PG_DSN`;
memctl never writes the DSN to a file. What lives in the schema is versioned per component
(`longterm`, `recall`, ...): each component hands `migrate` its list of steps, the
`schema_version` table records how far each got, and a server whose schema is newer than
this memctl is refused with one line. Whole-memory writers (dream, purge) serialise on a
transaction-level advisory lock per memory: busy is exit 75, `--wait N` becomes
`lock_timeout`.

Errors never show the password: `where(dsn)` is the host, port and database only. psycopg is
an optional extra (`[postgres]`), imported only here and only when used.
"""

from __future__ import annotations

import contextlib
import os
import zlib

from memctl.core.errors import ConfigError, LockBusy, MemctlError

from typing import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

DSN_VARIABLE = "MEMCTL_PG_DSN"
SCHEMA_PREFIX = "memctl_"


class ServerUnavailable(MemctlError):
    """The PostgreSQL server cannot be reached or refused the connection (exit 2)."""


class SchemaTooNew(MemctlError):
    """The server's schema was written by a newer memctl."""


def dsn_from_env() -> str:
    dsn = os.environ.get(DSN_VARIABLE, "").strip()
    if not dsn:
        raise ConfigError(f'[store] backend = "postgres" needs ${DSN_VARIABLE} (e.g. '
                          "postgresql://user@host:5432/db; the password from ~/.pgpass or $PGPASSWORD)")
    return dsn


def where(dsn: str) -> str:
    """host:port/dbname of a DSN, for messages: never the user's password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN: say so without echoing it
        return "the server in $" + DSN_VARIABLE
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    port = parts.get("port") or "5432"
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}".rstrip("/")


def schema_for(memory: str) -> str:
    return SCHEMA_PREFIX + memory


def machine_key(root) -> str:
    """`host:/absolute/root/`: one machine's root of a team memory, apart from every other
    machine's (its index sources are keyed so; purge orders are applied per key)."""
    import socket

    return f"{socket.gethostname()}:{os.path.realpath(root)}/"


TIMEOUT_VARIABLE = "MEMCTL_PG_TIMEOUT"
DEFAULT_TIMEOUT = 30.0


def statement_bound() -> float:
    """Seconds any one wait on the server may last ($MEMCTL_PG_TIMEOUT, default 30)."""
    try:
        value = float(os.environ.get(TIMEOUT_VARIABLE, "") or DEFAULT_TIMEOUT)
    except ValueError:
        raise ConfigError(f"${TIMEOUT_VARIABLE} must be a number of seconds") from None
    if not 1 <= value <= 86400:
        raise ConfigError(f"${TIMEOUT_VARIABLE} must be between 1 and 86400 seconds")
    return value


def bounded_parameters(bound: float) -> dict[str, Any]:
    """libpq's own bounds (issue #30): the connect, TCP keepalives and unacknowledged sends
    (tcp_user_timeout) end a dead peer's connection; statement_timeout and lock_timeout end a
    slow statement on a live server; an idle transaction left open is ended by the server."""
    millis = int(bound * 1000)
    return {
        "connect_timeout": max(2, int(bound)),
        "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        "tcp_user_timeout": millis,
        "options": f"-c statement_timeout={millis} -c lock_timeout={millis} "
                   f"-c idle_in_transaction_session_timeout={millis * 2}",
    }


def connect(dsn: str, autocommit: bool = False):
    """A psycopg connection whose every wait is bounded, or one line naming the server (never
    the password)."""
    psycopg = _psycopg()
    bound = statement_bound()
    try:
        conn = _bounded_class(psycopg).connect(dsn, autocommit=autocommit, application_name="memctl",
                                               **bounded_parameters(bound))
    except psycopg.Error as exc:
        reason = _first_line(str(exc))
        raise ServerUnavailable(f"PostgreSQL at {where(dsn)} is not reachable: {reason}") from None
    conn.bound = bound
    return conn


_BOUNDED: list = []


def _bounded_class(psycopg):
    """psycopg's Connection with the client-side bound libpq lacks: a frozen server (SIGSTOP,
    a hung host whose kernel still acknowledges) answers nothing, and neither statement_timeout
    nor keepalives end the wait. Every wait on the socket is given `bound` seconds (psycopg's
    own wait timeout); past it the connection is closed and the wait is an OperationalError,
    which the callers report as the server unavailable (exit 2)."""
    if _BOUNDED:
        return _BOUNDED[0]
    timed_out = getattr(psycopg.errors, "_WaitTimeout", None)

    class BoundedConnection(psycopg.Connection):
        bound: float | None = None

        def wait(self, gen, interval=0.1, timeout=None):
            if timed_out is None or self.bound is None:
                return super().wait(gen, interval=interval, timeout=timeout)
            try:
                return super().wait(gen, interval=interval, timeout=timeout or self.bound)
            except timed_out:
                self.pgconn.finish()
                raise psycopg.OperationalError(f"the server did not answer within {self.bound:g} s "
                                               f"(${TIMEOUT_VARIABLE})") from None

    _BOUNDED.append(BoundedConnection)
    return BoundedConnection


def _psycopg():
    try:
        import psycopg
    except ImportError:
        from memctl.core.extras import install_hint

        raise ConfigError(f'[store] backend = "postgres" needs psycopg: {install_hint("postgres")}') from None
    return psycopg


def _first_line(text: str) -> str:
    text = text.strip().splitlines()[0] if text.strip() else "connection failed"
    return text.replace("\t", " ")[:200]


# --- versioned schema

def migrate(conn, schema: str, component: str, steps: Sequence[str]) -> int:
    """Bring `component` of `schema` to version len(steps) (step i creates version i+1), in one
    transaction; returns the version now. A schema newer than `steps` is refused."""
    with conn.transaction():
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.schema_version "
                     "(component text PRIMARY KEY, version integer NOT NULL)")
        # one migrator at a time per schema: two first runs must not both create the tables
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "migrate"),))
        current = _version(conn, schema, component)
        if current > len(steps):
            raise SchemaTooNew(f"the {component} tables in {schema} are version {current}, newer than this "
                               f"memctl knows ({len(steps)}): upgrade memctl")
        for number in range(current, len(steps)):
            conn.execute(steps[number].format(schema=schema))
        conn.execute(f"INSERT INTO {schema}.schema_version VALUES (%s, %s) ON CONFLICT (component) "
                     "DO UPDATE SET version = EXCLUDED.version", (component, len(steps)))
    return len(steps)


def schema_version(conn, schema: str, component: str) -> int:
    """The version of a component's tables (0: not created)."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{schema}.schema_version",)).fetchone()
    return 0 if row[0] is None else _version(conn, schema, component)


def require_version(conn, schema: str, component: str, steps: Sequence[str]) -> None:
    """Before use: the tables exist at the version this memctl writes."""
    current = schema_version(conn, schema, component)
    if current > len(steps):
        raise SchemaTooNew(f"the {component} tables in {schema} are version {current}, newer than this "
                           f"memctl knows ({len(steps)}): upgrade memctl")
    if current < len(steps):
        raise ConfigError(f"the memory {schema} on the server is not set up (version {current} of "
                          f"{len(steps)}): run `memctl init`")


def _version(conn, schema: str, component: str) -> int:
    row = conn.execute(f"SELECT version FROM {schema}.schema_version WHERE component = %s",
                       (component,)).fetchone()
    return 0 if row is None else int(row[0])


# --- advisory locks

def lock_key(schema: str, name: str) -> int:
    """A stable signed 64-bit key for (schema, name)."""
    high = zlib.crc32(schema.encode())
    low = zlib.crc32(name.encode())
    value = (high << 32) | low
    return value - (1 << 64) if value >= 1 << 63 else value


def hold_memory_lock(conn, schema: str, wait_seconds: float, name: str = "writer") -> None:
    """Inside a transaction: take the memory's advisory lock until it ends; busy -> LockBusy."""
    key = lock_key(schema, name)
    if wait_seconds <= 0:
        got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()[0]
        if not got:
            raise LockBusy(f"another memctl is writing to the memory {schema} on the server; "
                           "retry, or pass --wait SECONDS")
        return
    psycopg = _psycopg()
    conn.execute(f"SET LOCAL lock_timeout = {int(wait_seconds * 1000)}")
    try:
        with waiting_for_lock(conn, wait_seconds):
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable:
        raise LockBusy(f"another memctl kept the memory {schema} on the server busy for {wait_seconds:g} s; "
                       "retry later") from None


@contextlib.contextmanager
def waiting_for_lock(conn, wait_seconds: float) -> Iterator[None]:
    """Around the one statement that waits for a lock (`--wait`): a wait longer than the bound
    ($MEMCTL_PG_TIMEOUT) is the caller's to choose, so for that statement alone the server's
    statement_timeout and this connection's own bound are stretched past it; lock_timeout ends
    it (LockNotAvailable: busy, exit 75), not the bound (a server failure, exit 2)."""
    bound = getattr(conn, "bound", None)
    if bound is None or wait_seconds < bound:
        yield
        return
    stretched = wait_seconds + bound
    conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{int(stretched * 1000)}ms",))
    conn.bound = stretched
    try:
        yield
    finally:
        conn.bound = bound
    conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{int(bound * 1000)}ms",))


def rows(conn, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple]:
    """Stream a query's rows with a server-side cursor (big tables never sit in memory)."""
    with conn.cursor(name="memctl_stream") as cursor:
        cursor.itersize = 2000
        cursor.execute(sql, params)
        yield from cursor
