"""The server's one writer thread: every write of every client, batched.

Requests queue up while a batch is being written; the thread then takes all that arrived,
holds the writer lock once (`longterm.recovery.writing`: what a killed run left is settled
first), writes each `remember` through `longterm.remember.remember_locked` and appends the
batch's audit lines, releases the lock, and fsyncs once for the whole batch
(`fsutil.sync_pending`, called by the lock's release: group commit). Only then is any client
answered, so an acknowledged write survives a crash; a client whose request was killed
mid-batch was never answered, and its fact is in L5 whole or not at all. On PostgreSQL, a
connection found lost by a batch's first round trip (the server restarted since the last
batch) is opened again and the batch written once more (`pg_conn.ConnectionLost`: nothing of
it had reached the server, and no client had been answered) instead of answering 503.

forget and restore take the lock themselves (`longterm.forget`); they run on the same thread,
between batches, so that the module-wide deferred-fsync state of `core.fsutil` is only ever
touched by one thread. The lock is never held while a client is being read or answered.
"""

from __future__ import annotations

import asyncio
import queue
import threading

from memctl.core import clock, faults
from memctl.core.errors import MemctlError, WriteFailed
from memctl.core.fsutil import sync_pending, synced_after_unlock
from memctl.longterm.pg_conn import ConnectionLost, commits
from memctl.longterm.recovery import writing
from memctl.longterm.remember import ADDED, RememberRequest, prepared, remember_locked
from memctl.longterm.policies import similarity_threshold
from memctl.longterm.store import open_store

LOCK_WAIT = 10.0  # seconds a batch waits for a CLI command or a dream holding the writer lock


class Job:
    """One client's write: `work` a callable run on the writer thread (None: a remember)."""

    def __init__(self, request: RememberRequest | None, audit: dict, work=None) -> None:
        self.request, self.audit, self.work = request, audit, work
        self.done = threading.Event()
        self.on_done = None  # called on the writer thread once finished (`submit_async`: the loop woken)
        self.result = None
        self.error: BaseException | None = None

    def finish(self, result=None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()
        if self.on_done is not None:
            self.on_done()

    def outcome(self):
        if self.error is not None:
            raise self.error
        return self.result


class WriteBatcher:
    def __init__(self, settings, audit_log, on_written=lambda: None) -> None:
        """`on_written()` is called before clients are told their writes are done (a search
        made after that waits for the refresh covering them)."""
        self.settings = settings
        self.audit_log = audit_log
        self.on_written = on_written
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="memctl-serve-writer", daemon=True)
        self.batches = self.writes = 0

    def start(self) -> None:
        try:  # a long-lived writer scores near duplicates with rapidfuzz's C code (policies.top_ratios
            import rapidfuzz.process  # noqa: F401 — uses it once imported), not a one-shot's pure Python
        except ImportError:
            pass
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def submit(self, job: Job, timeout: float):
        """Queue `job` and wait for it; TimeoutError when it took longer (it may still be written)."""
        self._queue.put(job)
        if not job.done.wait(timeout):
            raise TimeoutError("the write did not finish in time")
        return job.outcome()

    async def submit_async(self, job: Job, timeout: float):
        """`submit` for the event loop: the writer thread wakes the loop itself when the job is
        done (`call_soon_threadsafe`), so a remember's answer waits for no worker thread on
        either side of the batch (issue #30: two thread hand-offs fewer per remember)."""
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(_settle, finished)
            except RuntimeError:  # the loop closed meanwhile (the server stopping): nobody waits
                pass

        job.on_done = wake
        self._queue.put(job)
        try:
            await asyncio.wait_for(finished, timeout)
        except asyncio.TimeoutError:
            raise TimeoutError("the write did not finish in time") from None
        return job.outcome()

    # --- the thread

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                jobs.append(more)
            try:
                self._handle(jobs)
            except Exception as exc:  # noqa: BLE001 — a bug in one batch must not stop every later write
                for unanswered in jobs:
                    if not unanswered.done.is_set():
                        unanswered.finish(error=exc)

    def _handle(self, jobs: list[Job]) -> None:
        remembers = [job for job in jobs if job.work is None]
        if remembers:
            self._commit(remembers)
        for job in jobs:
            if job.work is not None:
                self._run_alone(job)

    def _run_alone(self, job: Job) -> None:
        try:
            committed = commits()
            try:
                result = job.work()
            except ConnectionLost:  # found by a transaction's first round trip: once more, unless
                if commits() != committed:  # an earlier transaction of the same work was committed
                    raise
                result = job.work()
        except (MemctlError, OSError) as exc:
            job.finish(error=exc)
            return
        self.audit_log.append([dict(job.audit, at=clock.iso(), ids=_ids_of(result))])
        self.on_written()
        job.finish(result)

    def _commit(self, jobs: list[Job]) -> None:
        ready = []
        for job in jobs:
            try:
                job.request = prepared(self.settings, job.request)
                ready.append(job)
            except MemctlError as exc:
                job.finish(error=exc)
        if not ready:
            return
        self.batches += 1
        outcomes: dict[Job, object] = {}
        try:
            try:
                self._write_batch(ready, outcomes)
            except ConnectionLost:  # found by the batch's first round trip: nothing of it was sent
                outcomes.clear()
                self._write_batch(ready, outcomes)  # once more, on a new connection
        except (MemctlError, OSError) as failed:
            _fail_unsynced(ready, outcomes, failed)
        faults.checkpoint("serve: batch synced, not answered")
        if any(not isinstance(outcome, BaseException) for outcome in outcomes.values()):
            self.on_written()
        for job in ready:
            outcome = outcomes.get(job)
            if isinstance(outcome, BaseException):
                job.finish(error=outcome)
            elif outcome is not None:
                self.writes += 1
                job.finish(outcome)

    def _write_batch(self, jobs: list[Job], outcomes: dict) -> None:
        stamp = clock.stamp()
        with writing(self.settings.layout, LOCK_WAIT):
            store = open_store(self.settings.layout)
            if store.on_server:  # each type's candidate rows read once for the whole batch
                store.plan_batch([(job.request.type, job.request.text) for job in jobs],
                                 similarity_threshold(self.settings))
            lines = []
            for job in jobs:
                try:
                    result = remember_locked(self.settings, store, job.request, stamp)
                except MemctlError as exc:
                    outcomes[job] = exc
                    continue
                outcomes[job] = result
                lines.append(dict(job.audit, at=stamp, action=result.action, ids=[result.entry.id]))
                faults.checkpoint("serve: request written")
            with synced_after_unlock():
                self.audit_log.append(lines)
        sync_pending()  # done by the lock's release, unless another lock of this process was held then


def _settle(future) -> None:
    if not future.done():
        future.set_result(None)


def _fail_unsynced(jobs: list[Job], outcomes: dict, failed: BaseException) -> None:
    """The lock, a write or the batch's fsync failed. A line added waited for that fsync, so it
    is not acknowledged; a superseding or `seen` write was an atomic rewrite, durable already
    (as the resident writer decides, memctl.residents.writer)."""
    for job in jobs:
        result = outcomes.get(job)
        if isinstance(result, BaseException):
            continue
        if result is None or not isinstance(failed, WriteFailed) or result.action == ADDED:
            outcomes[job] = failed


def _ids_of(result) -> list[str]:
    """The entries a forget, restore or session step wrote (its audit line names them)."""
    if hasattr(result, "forgotten"):
        return list(result.forgotten)
    if hasattr(result, "learned"):
        return [item["id"] for item in result.learned() if item.get("id")]
    entry_id = getattr(result, "id", None)
    return [entry_id] if entry_id else []
