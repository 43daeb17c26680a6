"""The connection of a server memory (`memctl.longterm.pg_store`) and its transactions.

One connection per thread and memory (a process has one, unless it is memctl serve), opened on
first use; the schema must be at the version this memctl writes (else one line: run `memctl
init`). Every statement goes through
`Server.execute`, and every server error becomes memctl's one line naming the host
(`translated`), never the password. `MEMCTL_FAULT_PG_PAUSE=LABEL:FILE` holds a transaction
open at a named point so that a test can SIGKILL the process there.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Iterable, Iterator

from memctl.core import faults, pg
from memctl.core.errors import LockBusy, MemctlError, UsageError
from memctl.longterm import pg_schema
from memctl.longterm.pg_reads import SharedReads

PARTS = ("active", "archive")
PAUSE_VARIABLE = "MEMCTL_FAULT_PG_PAUSE"
# the memory's lock beside other writers, waiting at most lock_timeout (set first: a FROM item is
# evaluated before the select list), in one statement
SHARED_LOCK = ("SELECT pg_advisory_xact_lock_shared(%s) FROM (SELECT set_config('lock_timeout', %s, true)) "
               "AS timeout")
BUMP_APPENDED = ("UPDATE {s}.entry_parts SET last_seq = (SELECT coalesce(max(seq), 0) FROM {s}.entries) "
                 "WHERE part = %s")  # the part's last_seq after rows were added to it
PROVISIONAL = 1 << 60  # the seqs of a batch's rows not sent yet start past this

_SERVERS: dict[tuple[str, str, int], "Server"] = {}
_COMMITS = threading.local()  # this thread's committed transactions, on any connection (`commits`)


def commits() -> int:
    """How many transactions this thread has committed: a caller that runs a transaction again
    after ConnectionLost checks first that none of its own work was committed meanwhile."""
    return getattr(_COMMITS, "count", 0)


class ConnectionLost(pg.ServerUnavailable):
    """The connection was found lost (a server restarted, a bound passed) by a transaction's
    first round trip: nothing of the transaction reached the server, so the caller may run it
    again once (`server_for` then opens another connection) instead of failing."""


class Server:
    """One connection to one memory's schema, and the state of its open transaction."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.where = pg.where(dsn)
        self.conn = pg.connect(dsn, autocommit=True)
        with translated(self.where):
            pg.require_version(self.conn, schema, pg_schema.COMPONENT, pg_schema.STEPS)
        self.depth = 0
        self.parts_locked = False
        self.parts_lock_pending = False  # change() entered: the lock goes with its first statement
        self.deferred: list[tuple[str, tuple]] = []  # locks sent ahead of the next statement, in order
        self.seen: dict[str, set[int]] = {part: set() for part in PARTS}
        self.locked_types: set[str] = set()  # this transaction's type locks
        self.current_types: set[str] = set()  # the types of the write being made (the last lock_types)
        self.prefetched: dict[tuple, object] = {}  # this transaction's reads made ahead, until a change
        self.reads = SharedReads()  # what this transaction's remembers read once (a batch of them)
        self.pending: list[tuple[object, object]] = []  # (part, row): a batch's appends not sent yet
        self.provisional: dict[int, object] = {}  # a pending row by the seq it holds until sent

    def execute(self, sql: str, params: Iterable = ()):
        self.flush_pending()
        with translated(self.where):
            if self.deferred or self.parts_lock_pending:  # the locks and this statement: one round trip
                with self.conn.pipeline():
                    self._send_locks()
                    return self.conn.execute(sql.replace("{s}", self.schema), tuple(params))
            return self.conn.execute(sql.replace("{s}", self.schema), tuple(params))

    def defer_lock(self, sql: str, params: tuple) -> None:
        """A lock taken with the next statement (the server runs them in order: what that
        statement reads is read under the lock)."""
        self.deferred.append((sql.replace("{s}", self.schema), params))

    def send_locks(self) -> None:
        """Before a statement sent other than by `execute`."""
        self.flush_pending()
        if self.deferred or self.parts_lock_pending:
            with translated(self.where), self.conn.pipeline():
                self._send_locks()

    def send_locks_now(self) -> None:
        """The locks deferred, queued on the pipeline the caller has open (with what it sends next)."""
        self._send_locks()

    def _send_locks(self) -> None:
        for sql, params in self.deferred:
            self.conn.execute(sql, params)
        self.deferred.clear()
        if self.parts_lock_pending:
            self.conn.execute(f"SELECT part FROM {self.schema}.entry_parts ORDER BY part FOR UPDATE")
            self.parts_lock_pending = False
            self.parts_locked = True

    def pipelined(self, statements: list[tuple[str, tuple]]) -> list[list[tuple]]:
        """The rows of several reads, sent together (after the locks deferred): one round trip."""
        self.flush_pending()
        with translated(self.where):
            with self.conn.pipeline():
                self._send_locks()
                cursors = [self.conn.execute(sql.replace("{s}", self.schema), params) for sql, params in statements]
            return [cursor.fetchall() for cursor in cursors]

    @contextlib.contextmanager
    def transaction(self, opening: "Opening | None" = None) -> Iterator[None]:
        """A transaction, or a savepoint inside the one already open. `opening`: a new
        transaction's first statement (a lock), sent with its BEGIN in one round trip."""
        carried = None
        with translated(self.where), contextlib.ExitStack() as opened:
            self._begin(opening, opened)
            self.depth += 1
            try:
                yield
                if self.depth == 1 and self.pending:  # the COMMIT queued behind the batch's rows, not a round trip alone
                    self._flush_and_commit(opened)
                else:
                    self.flush_pending()  # a batch's appends are in the transaction they were made in
                if self.depth == 1:
                    opened.close()  # the COMMIT (already sent by _flush_and_commit, if it ran)
                    _COMMITS.count = commits() + 1
                    carried = self.reads.to_carry()
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.parts_locked = self.parts_lock_pending = False
                    self.deferred.clear()
                    self.locked_types.clear()
                    self.prefetched.clear()
                    self.reads = SharedReads(carried)  # a failed transaction carries nothing
                    self.pending, self.provisional = [], {}

    def _flush_and_commit(self, opened: contextlib.ExitStack) -> None:
        """The pending rows, then the COMMIT (`opened.close()`, queued on the rows' pipeline). A
        statement that fails there leaves the transaction aborted, its COMMIT not run: rolled back."""
        try:
            self.flush_pending(then=opened.close)
        except BaseException:
            with contextlib.suppress(Exception):
                if not self.conn.closed and self.conn.info.transaction_status != 0:  # not IDLE
                    self.conn.rollback()
            raise

    def _begin(self, opening: "Opening | None", opened: contextlib.ExitStack) -> None:
        import psycopg

        try:
            if opening is not None and not self.depth:
                opening.send(self, opened)
            else:
                opened.enter_context(self.conn.transaction())
        except psycopg.OperationalError as exc:
            if self.depth or not (self.conn.broken or self.conn.closed):
                raise
            raise ConnectionLost(f"PostgreSQL at {self.where} failed: {_first_line(exc)}") from None

    @contextlib.contextmanager
    def change(self, keeps_reads: bool = False) -> Iterator[None]:
        """Around a change to L5 or L6: both parts' rows locked first, in one order, so seqs
        become visible in increasing order and two writers never deadlock on them. Inside a
        write's transaction it is part of it (no savepoint: two round trips each, and a failed
        change fails the whole write, which is what the caller reports). `keeps_reads`: an
        append to L5 or a row of it replaced, which the caller tells the shared reads itself."""
        if self.depth == 0:
            with self.transaction(), self.change(keeps_reads):
                yield
            return
        self.prefetched.clear()  # what was read ahead may be what this changes
        if not keeps_reads:
            self.reads.changed()
        if not self.parts_locked:
            self.parts_lock_pending = True
        yield
        self.send_locks()  # a change that sent nothing still ends holding the lock, as it began

    def defer_rows(self, part, rows: list) -> None:
        """A batch's appends to `part`, sent together before the next statement or the commit
        (`flush_pending`): one round trip for the batch instead of one per remember. Until then
        each row holds a provisional seq, after every row on the server, in order."""
        self.prefetched.clear()
        if not self.parts_locked:
            self.parts_lock_pending = True
        for row in rows:
            row.seq = PROVISIONAL + len(self.provisional) + 1
            self.provisional[row.seq] = row
            self.pending.append((part, row))

    def flush_pending(self, then=None) -> None:
        """The pending rows sent; `then()` is called with them queued, in the same round trip."""
        if self.pending:
            part, rows = self.pending[0][0], [row for _, row in self.pending]
            self.pending = []
            part.write_pending(rows, then)

    def bump(self, part: str, appended: bool, rewritten: bool) -> None:
        if appended:
            self.execute(BUMP_APPENDED, (part,))
        if rewritten:
            self.execute("UPDATE {s}.entry_parts SET rewrites = rewrites + 1 WHERE part = %s", (part,))
            if part == "active":
                self.reads.own_rewrites += 1


def server_for(dsn: str, schema: str) -> Server:
    """This thread's connection to the memory: a Server carries its transaction's state, so the
    threads of one process (memctl serve's writer and readers) each have their own."""
    key = (dsn, schema, threading.get_ident())
    known = _SERVERS.get(key)
    if known is not None and (known.conn.closed or known.conn.broken) and not known.depth:
        known.conn.close()  # lost (a server restarted, a bound passed): a long-lived process connects again
        known = None
    if known is None:
        known = _SERVERS[key] = Server(dsn, schema)
    return known


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """A server error as memctl's one line (the host, never the password)."""
    import psycopg

    try:
        yield
    except psycopg.errors.UniqueViolation:
        raise UsageError("two active entries would have the same type and topic; nothing was changed "
                         "(forget one of them first)") from None
    except psycopg.OperationalError as exc:
        raise pg.ServerUnavailable(f"PostgreSQL at {where} failed: {_first_line(exc)}") from None
    except psycopg.Error as exc:
        raise MemctlError(f"PostgreSQL at {where}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "the statement failed")[:200]


def pause_point(label: str) -> None:
    """MEMCTL_FAULT_PG_PAUSE=LABEL:FILE: at LABEL, create FILE and wait to be killed (a test
    SIGKILLs the process there, in the middle of an open transaction)."""
    spec = os.environ.get(PAUSE_VARIABLE)
    if not spec:
        return
    wanted, _, marker = spec.partition(":")
    if wanted == label:
        Path(marker).write_text(str(os.getpid()))
        import time

        time.sleep(600)
    faults.checkpoint(label)


class Opening:
    """A transaction's first statement, sent with its BEGIN (Server.transaction); a lock it
    could not get within its lock_timeout is `busy` (LockBusy), not a server failure."""

    def __init__(self, sql: str, params: tuple, busy: str) -> None:
        self.sql, self.params, self.busy = sql, params, busy

    def send(self, server: Server, opened: contextlib.ExitStack) -> None:
        import psycopg

        try:  # psycopg's Transaction itself: conn.transaction() in a pipeline syncs after its BEGIN
            with server.conn.pipeline():
                opened.enter_context(psycopg.Transaction(server.conn))
                server.conn.execute(self.sql.replace("{s}", server.schema), self.params)
        except psycopg.errors.LockNotAvailable:
            raise LockBusy(self.busy) from None


def shared_lock_opening(server: Server, wait: float) -> Opening | None:
    """share_memory_lock's statement as a transaction's opening, where it can be one: a wait
    within the connection's bound (a longer one stretches the bound first, a zero wait reads
    the answer of a try-lock)."""
    bound = getattr(server.conn, "bound", None)
    if wait <= 0 or (bound is not None and wait >= bound):
        return None
    return Opening(SHARED_LOCK, _shared_lock_params(server, wait), _busy_message(server, wait))


def _shared_lock_params(server: Server, wait: float) -> tuple[int, str]:
    return pg.lock_key(server.schema, "writer"), f"{int(wait * 1000)}ms"


def _busy_message(server: Server, wait: float) -> str:
    return f"a dream or purge kept the memory {server.schema} on the server busy for {wait:g} s; retry later"


def share_memory_lock(server: Server, wait: float) -> None:
    """The memory's lock beside other writers of entries; a whole-memory writer holds it alone."""
    import psycopg

    key = pg.lock_key(server.schema, "writer")
    if wait <= 0:
        if not server.execute("SELECT pg_try_advisory_xact_lock_shared(%s)", (key,)).fetchone()[0]:
            raise LockBusy(f"a dream or purge is writing to the memory {server.schema} on the server; "
                           "retry, or pass --wait SECONDS")
        return
    try:
        with pg.waiting_for_lock(server.conn, wait):
            server.conn.execute(SHARED_LOCK, _shared_lock_params(server, wait))
    except psycopg.errors.LockNotAvailable:
        raise LockBusy(_busy_message(server, wait)) from None
