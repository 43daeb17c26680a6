"""The resident writer: one process per memory root that answers the `remember`s sent to
`.memctl/writer.sock` (memctl.cli.resident is the client), started detached by the first
in-process `remember` that found none.

It reads what requests have arrived, then commits them as a batch: each through the same
steps as the in-process command (`cli.writes`'s report and error mapping over
`longterm.remember.prepared` and `remember_locked`), under one hold of the writer lock that
every other command takes, with one fsync of L5 for the batch's appends (group commit:
`fsutil.sync_pending`). A client gets its reply — the stdout, stderr and exit status the
in-process command would have given — only after that fsync. A client that gave up (closed
its end) before its turn under the lock is skipped: its own retry writes it.

It exits after `[writes] resident_idle` seconds without a request, when its socket file is
removed or replaced, when memctl.toml or memctl's code changes, and when a client's identity
(version, code, config, environment) is not its own — that client writes in-process and
starts a current writer.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import time

from memctl.cli import render, resident
from memctl.cli.writes import (guarded, memory_settings, report_remember, start_background_dream,
                               start_background_index, utf8_only)
from memctl.core import clock, faults
from memctl.residents.service import ResidentService, reply, run_service
from memctl.core.config import load_settings
from memctl.core.errors import EXIT_OK, LockBusy, MemctlError, WriteFailed
from memctl.core.fsutil import lock_wait
from memctl.longterm.ids import well_formed
from memctl.longterm.recovery import writing
from memctl.longterm.remember import ADDED, RememberRequest, prepared, remember_locked
from memctl.longterm.store import open_store

LOG_NAME = "writer.log"
_ENV_NOW = "MEMCTL_NOW"


class Job:
    """One client's request and what it will be told."""

    def __init__(self, connection, fields: list[bytes]) -> None:
        """Raises ValueError for fields no client of this protocol sends (not UTF-8, a number
        that is not one, a --wait the client would have refused)."""
        self.connection = connection
        text = [field.decode("utf-8", "surrogatepass") for field in fields]
        (self.now_text, self.entry_id, self.text, self.type, self.topic, confidence, self.source, wait, force,
         json_out) = text[2:12]
        self.confidence, self.wait = float(confidence), float(wait)
        if self.wait != lock_wait(self.wait) or not well_formed(self.entry_id):
            raise ValueError("not a request a client sends")
        self.force, self.json = bool(force), bool(json_out)
        self.contradicts = text[12:]
        self.deadline = time.monotonic() + max(self.wait, 0.0)
        self.out, self.err = bytearray(), bytearray()
        self.code: int | None = None  # set when its outcome is known
        self.request = None
        self.stamp = ""
        self.result = None

    def run(self, action) -> int:
        """`action` as the in-process command runs it (guarded), its output kept."""
        with Captured() as captured:
            code = guarded(action)
        self.out += captured.out
        self.err += captured.err
        return code

    def gave_up(self) -> bool:
        """Whether the client closed its end (timed out): its own retry writes the fact."""
        try:
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


class Captured:
    """sys.stdout and sys.stderr as a pipe's: UTF-8 text over bytes, kept."""

    def __enter__(self) -> Captured:
        self._saved = sys.stdout, sys.stderr
        self._streams = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape"),
                         io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace"))
        sys.stdout, sys.stderr = self._streams
        return self

    def __exit__(self, *exc) -> None:
        for stream in self._streams:
            stream.flush()
        self.out, self.err = (stream.buffer.getvalue() for stream in self._streams)
        sys.stdout, sys.stderr = self._saved


class Writer(ResidentService):
    socket_name = resident.SOCKET_NAME
    log_name = LOG_NAME
    stale_reason = "its socket file, memctl.toml or memctl's code changed"

    def __init__(self, root: str, lock_fd: int) -> None:
        self.lock_fd = lock_fd
        self.settings = load_settings(root, as_text=True)
        render.configure_redaction(self.settings.get("redaction", "extra_patterns"))
        self.idle = float(self.settings.get("writes", "resident_idle"))
        _load_rapidfuzz()
        super().__init__(root, resident.identity)
        self.requests = self.batches = 0

    def ready(self) -> bool:
        return resident.serves(self.settings)

    def summary(self) -> str:
        return f"{self.requests} requests in {self.batches} batches"

    # --- the loop

    def handle(self, messages: list[tuple]) -> bool:
        """Commit the requests complete by now as one batch."""
        jobs = [job for job in (self._job(connection, fields) for connection, fields in messages) if job is not None]
        if jobs:
            faults.checkpoint("writer: requests read")
            self.commit(jobs)
        return bool(jobs)

    def _job(self, connection, fields: list[bytes]) -> Job | None:
        self.release(connection)
        if fields[:1] != [resident.PROTOCOL.encode()] or len(fields) < 12:
            self.refuse(connection)  # not a client of this protocol: it stops nothing
            return None
        if fields[1] != self.identity.encode("utf-8", "surrogatepass"):
            reply(connection, [b"decline"])
            connection.close()
            # a newer memctl, another config: the client starts a current writer
            self.stop("a client of another version, config or environment")
            return None
        try:
            job = Job(connection, fields)
        except (ValueError, MemctlError):  # well identified, but malformed: that client alone is refused
            self.refuse(connection)
            return None
        self.requests += 1
        return job

    # --- a batch

    def commit(self, jobs: list[Job]) -> None:
        """Write the batch; reply to each client once what it was told is durable."""
        self.batches += 1
        with Captured() as checked:  # what every write says first: not a memory, lines that are not entries
            checked_code = guarded(lambda: memory_settings(self.settings) and EXIT_OK)
        for job in jobs:
            job.out += checked.out
            job.err += checked.err
            code = checked_code if checked_code != EXIT_OK else job.run(lambda: self._prepare(job))
            if code != EXIT_OK:
                job.code = code
        waiting = [job for job in jobs if job.code is None]
        while waiting:
            try:
                self._write_batch(waiting, wait=max(0.0, min(job.deadline for job in waiting) - time.monotonic()))
                waiting = []
            except LockBusy as busy:
                now = time.monotonic()
                for job in waiting:
                    if job.deadline <= now:
                        job.code = job.run(_raiser(busy))
                waiting = [job for job in waiting if job.code is None]
            except (MemctlError, OSError) as failed:  # settling what a killed run left failed: as in-process
                for job in waiting:
                    job.code = job.run(_raiser(failed))
                waiting = []
        faults.checkpoint("writer: synced, not replied")
        for job in jobs:
            if job.code == EXIT_OK and job.result is not None and job.result.auto_dream_due:
                job.run(lambda: start_background_dream(self.root) or EXIT_OK)
            if job.code is not None:
                reply(job.connection, [b"ok", str(job.code).encode(), bytes(job.out), bytes(job.err)])
                faults.checkpoint("writer: replied")
            job.connection.close()
        if any(job.code == EXIT_OK for job in jobs):
            start_background_index(self.settings)  # after the replies: no client waits for it

    def _prepare(self, job: Job) -> int:
        """What the in-process command does before the lock, after the settings: text, clock, checks."""
        text = utf8_only(job.text).strip("\n")
        job.stamp = _stamp(job.now_text)
        job.request = prepared(self.settings, RememberRequest(
            text, job.type, job.topic, job.confidence, job.source, job.force, list(job.contradicts), job.entry_id))
        return EXIT_OK

    def _write_batch(self, jobs: list[Job], wait: float) -> None:
        before = {}
        try:
            with writing(self.settings.layout, wait):
                store = open_store(self.settings.layout)
                for job in jobs:
                    if job.gave_up():
                        job.code = None
                        continue
                    before[job] = len(job.out)
                    job.code = job.run(lambda: self._write(store, job))
                    faults.checkpoint("writer: request written")
        except WriteFailed as failed:  # the batch's fsync: no appended line was acknowledged
            for job, size in before.items():
                if job.code == EXIT_OK and job.result is not None and job.result.action == ADDED:
                    del job.out[size:]
                    job.code = job.run(_raiser(failed))
        for job in jobs:
            if job not in before:
                job.code = None  # skipped: not replied to

    def _write(self, store, job: Job) -> int:
        job.result = remember_locked(self.settings, store, job.request, job.stamp)
        report_remember(job.result, job.json)
        return EXIT_OK


def _load_rapidfuzz() -> None:
    """rapidfuzz's C scorer for the near-duplicate checks: a write process scores in pure Python
    to spare the import (longterm.indel, the same scores), a writer that stays pays it once."""
    try:
        import rapidfuzz.process  # noqa: F401  (policies.rapidfuzz_loaded then prefers it)
    except ImportError:
        pass


def _raiser(exc: BaseException):
    def action():
        raise exc

    return action


def _stamp(now_text: str) -> str:
    """clock.stamp() under the client's MEMCTL_NOW (the writer's TZ is the client's: identity)."""
    if now_text:
        os.environ[_ENV_NOW] = now_text
    else:
        os.environ.pop(_ENV_NOW, None)
    return clock.stamp()


if __name__ == "__main__":
    sys.exit(run_service(sys.argv[1:], resident.LOCK_NAME, Writer))
