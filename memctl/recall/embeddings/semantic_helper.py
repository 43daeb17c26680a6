"""A one-shot search's semantic half in a forked child, beside the lexical half.

A fused one-shot search pays, before it can fuse, `import numpy` (70-230 ms here), the model's
load and the query's forward pass (~60 ms) and the IVF probe: more than the lexical search itself.
Where the platform forks (not Windows) and `[semantic] fork` is on, the search forks as soon as
its settings say it will fuse (before the index is opened: the child inherits no connection and
no thread), and the child imports numpy and the model, embeds the query, opens the vector store
and probes the nearest lists while the parent runs the lexical stages. The parent then writes its
lexical candidates' rowids down one pipe; the child answers down the other with the cosines of
those and of the nearest rows, computed by the same memctl.recall.embeddings.semantic code as in-process
(the same floats: marshal keeps doubles exact), and exits. The parent fuses in pure Python, so
it never imports numpy.

Any failure of the child (its exception's one line, sent back) or no answer within
ANSWER_SECONDS is a MemctlError for the caller, which gives the signal up with one warning and
keeps the lexical results, as in-process. The parent always reaps the child; a parent killed
before it asks leaves a child that exits at the end-of-file of its pipe (after its own probe).

Where a resident searcher serves the root (`.memctl/semantic.sock`, memctl.residents.searcher,
one process per root that keeps numpy, the model and the vector store loaded, started by the
first one-shot search that found none, gone after `[semantic] resident_idle` seconds without a
query), the same two messages go to it instead (`ResidentHelper`): the query as soon as the
settings are read, the lexical rowids when the lexical half is done; the answer is the same
tuple, computed by the same code. A searcher of another version or environment, one
that vanished, or none at all: the fork as before (and a current searcher started for the
next search, unless one failed to get ready lately: memctl.recall.embeddings.semantic_unready).
`MEMCTL_RESIDENT=0` or `resident_idle = 0` turns it off.
"""

from __future__ import annotations

import marshal
import os
import select

from memctl.core.errors import MemctlError

ANSWER_SECONDS = 30.0  # a cold page cache's probe of a store larger than the free memory took 2-3.5 s
SOCKET_NAME = "semantic.sock"
LOCK_NAME = "semantic.lock"
PROTOCOL = "memctl-semantic/1"
ENVIRONMENT = ("HOME", "XDG_CACHE_HOME")  # where a model may be found besides memctl.toml's path


def available(ranking) -> bool:
    return hasattr(os, "fork") and bool(ranking.semantic_option("fork"))


class SemanticHelper:
    """The parent's end: the child's pid and the two pipes."""

    def __init__(self, pid: int, to_child: int, from_child: int, query: str):
        self.pid, self.to_child, self.from_child, self.query = pid, to_child, from_child, query

    @classmethod
    def start(cls, signal, query: str) -> "SemanticHelper":
        """Fork the child that answers `signal`'s cosines for `query` (signal: a SemanticSignal).
        Raises OSError when no process can be made (the caller then stays in one process)."""
        inbox, to_child = os.pipe()
        from_child, outbox = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (inbox, to_child, from_child, outbox):
                os.close(fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(to_child)
            os.close(from_child)
            _serve(signal, query, inbox, outbox)
        os.close(inbox)
        os.close(outbox)
        return cls(pid, to_child, from_child, query)

    def cosines(self, rowids: list[int]) -> tuple[list, list, dict] | None:
        """(nearest, compared, context hashes): lists of (rowid, text hash, cosine) and the hashes
        of their in-context texts (SemanticSignal.context_hashes), or None for a store without
        vectors. Raises MemctlError when the child failed or did not answer in time."""
        try:
            _write_all(self.to_child, marshal.dumps(list(rowids)))
        except OSError:
            pass  # the child is gone: its answer (or its silence) says why
        os.close(self.to_child)
        self.to_child = -1
        answer = _read_until_eof(self.from_child, ANSWER_SECONDS)
        self.close(answered=answer is not None)
        if answer is None:
            raise MemctlError(f"the semantic helper gave no answer within {ANSWER_SECONDS:.0f}s")
        return parsed_answer(answer)

    def close(self, answered: bool = False) -> None:
        """Reap the child (one that has answered is exiting; one still at work is killed, its work
        not wanted any more) and close the pipes."""
        for fd in (self.to_child, self.from_child):
            if fd >= 0:
                os.close(fd)
        self.to_child = self.from_child = -1
        if not self.pid:
            return
        from signal import SIGKILL

        try:
            if not answered and os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, SIGKILL)
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.pid = 0


def _serve(signal, query: str, inbox: int, outbox: int) -> None:
    """The child's life: probe, wait for the rowids, answer, `os._exit` (no atexit, no flush of
    the parent's buffers, no finally of the parent's frames)."""
    signal.one_query = True
    try:
        try:
            nearest = signal.nearest_rows(query)
        except BaseException as exc:  # the parent fuses nothing and warns with this line
            nearest, failure = None, exc
        else:
            failure = None
        asked = _read_until_eof(inbox, None)
        if not asked:  # the parent died or gave up
            os._exit(0)
        _write_all(outbox, marshal.dumps(answer_for(signal, nearest, failure, asked)))
    finally:
        os._exit(0)


def answer_for(signal, nearest, failure: BaseException | None, asked: bytes) -> tuple:
    """What the parent is told: ("ok", nearest rows, compared rows, their context hashes), ("ok",
    None) for a store without vectors, ("error", one line)."""
    if failure is not None:
        return "error", one_line(failure)
    if nearest is None:
        return "ok", None
    try:
        compared = signal.compared_rows(nearest[0], marshal.loads(asked))
        return "ok", nearest[1], compared, signal.context_hashes([*nearest[1], *compared])
    except Exception as exc:
        return "error", one_line(exc)


def parsed_answer(answer: bytes) -> tuple[list, list, dict] | None:
    try:
        status, *rest = marshal.loads(answer)
    except (EOFError, ValueError, TypeError):
        raise MemctlError("the semantic helper ended without an answer") from None
    if status != "ok":
        raise MemctlError(rest[0])
    return None if rest[0] is None else (rest[0], rest[1], rest[2])


def one_line(exc: BaseException) -> str:
    """An exception as the one line of a warning (the child sends it; the parent prints it)."""
    return " ".join(str(exc).split()) or "the model or the vector store failed without a message"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_until_eof(fd: int, seconds: float | None) -> bytes | None:
    """All of the pipe until its writer closes it; None if `seconds` pass first."""
    import time

    deadline = None if seconds is None else time.monotonic() + seconds
    parts = []
    while True:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
        part = os.read(fd, 1 << 16)
        if not part:
            return b"".join(parts)
        parts.append(part)


# --- the resident searcher's client


class Unserved(Exception):
    """The resident searcher did not answer (declined, gone): the caller computes it itself."""


def resident_wanted(ranking) -> bool:
    from memctl.residents.local_socket import wanted

    return float(ranking.semantic_option("resident_idle")) > 0 and wanted()


def identity(root: str) -> str:
    """What must be the same in the searcher and here: memctl's code, the root, the environment
    the model is found by. Not memctl.toml: every request carries its search's ranking and
    [semantic] table (the searcher loads another model when the request names one)."""
    import memctl
    from memctl.residents.local_socket import stamp

    parts = [memctl.__version__, stamp(__file__), root]
    parts += [f"{name}={os.environ.get(name, '')}" for name in ENVIRONMENT]
    return "\n".join(parts)


class ResidentHelper:
    """The search's end of a conversation with the resident searcher: the query sent, the
    answer asked for with the lexical rowids."""

    def __init__(self, connection, query: str):
        self.connection, self.query = connection, query

    @classmethod
    def start(cls, root: str, ranking, query: str) -> "ResidentHelper | None":
        """The query sent to the root's searcher, or None when none serves."""
        from memctl.residents.local_socket import connect, frame

        connection = connect(root, SOCKET_NAME)
        if connection is None:
            return None
        try:
            connection.settimeout(ANSWER_SECONDS)
            connection.sendall(frame([PROTOCOL, identity(root), query, marshal.dumps(tuple(ranking))]))
        except OSError:
            connection.close()
            return None
        return cls(connection, query)

    def cosines(self, rowids: list[int]) -> tuple[list, list, dict] | None:
        """As SemanticHelper.cosines; raises Unserved when the searcher gave no answer."""
        from memctl.residents.local_socket import frame, receive

        try:
            self.connection.sendall(frame([b"rows", marshal.dumps(list(rowids))]))
            reply = receive(self.connection)
        except (OSError, ValueError):
            reply = None
        finally:
            self.close()
        if reply is None or len(reply) != 2 or reply[0] != b"answer":  # gone, or declined
            raise Unserved()
        return parsed_answer(reply[1])

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def start_resident(root: str, ranking) -> None:
    """A detached searcher for this root, unless one runs or starts (`semantic.lock` decides) or
    one of this identity and model failed to get ready lately with nothing it depended on
    changed since (memctl.recall.embeddings.semantic_unready)."""
    from memctl.residents.local_socket import start_detached
    from memctl.recall.embeddings import semantic_unready

    if semantic_unready.holds_back(root, identity(root), semantic_unready.model_option(ranking)):
        return
    start_detached(root, SOCKET_NAME, LOCK_NAME, "memctl.residents.searcher", dict(os.environ))
