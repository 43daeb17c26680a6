"""A one-shot search's semantic half in a forked child, beside the lexical half.

A fused one-shot search pays, before it can fuse, `import numpy` (70-230 ms here), the model's
load and the query's forward pass (~60 ms) and the IVF probe: more than the lexical search itself.
Where the platform forks (not Windows) and `[semantic] fork` is on, the search forks as soon as
its settings say it will fuse (before the index is opened: the child inherits no connection and
no thread), and the child imports numpy and the model, embeds the query, opens the vector store
and probes the nearest lists while the parent runs the lexical stages. The parent then writes its
lexical candidates' rowids down one pipe; the child answers down the other with the cosines of
those and of the nearest rows, computed by the same memctl.recall.semantic code as in-process
(the same floats: marshal keeps doubles exact), and exits. The parent fuses in pure Python, so
it never imports numpy.

Any failure of the child (its exception's one line, sent back) or no answer within
ANSWER_SECONDS is a MemctlError for the caller, which gives the signal up with one warning and
keeps the lexical results, as in-process. The parent always reaps the child; a parent killed
before it asks leaves a child that exits at the end-of-file of its pipe (after its own probe).
"""

from __future__ import annotations

import marshal
import os
import select

from memctl.core.errors import MemctlError

ANSWER_SECONDS = 30.0  # a cold page cache's probe of a store larger than the free memory took 2-3.5 s


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

    def cosines(self, rowids: list[int]) -> tuple[list, list] | None:
        """(nearest, compared): lists of (rowid, text hash, cosine), or None for a store without
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
        try:
            status, *rest = marshal.loads(answer)
        except (EOFError, ValueError, TypeError):
            raise MemctlError("the semantic helper ended without an answer") from None
        if status != "ok":
            raise MemctlError(rest[0])
        return None if rest[0] is None else (rest[0], rest[1])

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
        if failure is not None:
            answer = ("error", one_line(failure))
        elif nearest is None:
            answer = ("ok", None)
        else:
            try:
                answer = ("ok", nearest[1], signal.compared_rows(nearest[0], marshal.loads(asked)))
            except BaseException as exc:
                answer = ("error", one_line(exc))
        _write_all(outbox, marshal.dumps(answer))
    finally:
        os._exit(0)


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
