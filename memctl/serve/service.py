"""One memory served: its settings, keys, writer thread, audit log and the reads' shared state.

`Service.call(name, arguments, caller)` is what MCP and the HTTP API both run; it bounds the
wait (`[serve] request_timeout`) and returns a JSON-able dict or raises a MemctlError whose
`http_status` (or the mapping in `status_of`) says how it is answered.
"""

from __future__ import annotations

import logging
import os

from memctl.core import jsoncodec
from memctl.core.errors import LockBusy, MemctlError, NotFound, WriteFailed
from memctl.core.pg import ServerUnavailable
from memctl.core.jsonl import append_lines
from memctl.core.redact import redactor_for
from memctl.serve import keys as keyfile
from memctl.serve.batcher import Job, WriteBatcher
from memctl.longterm.remember import ForgottenFact
from memctl.serve.namespaces import EntryNamespaces
from memctl.serve.operations import OPERATIONS, Caller, call, checked, remember_request, remembered
from memctl.serve.readers import ReadPool, Refresher

AUDIT_NAME = "audit.jsonl"
SEARCHES = ("search", "compose")  # the operations that read the index: they wait for its refresh
FETCH_FACTOR = 4  # a namespace search asks the index for this many times k, then keeps its own


class TimedOut(MemctlError):
    http_status = 504


class Unexpected(MemctlError):
    """A failure no check foresaw (a disk error, a bug): answered 500 with one line; the
    server's log (stderr) gets one line too, redacted, and no traceback."""

    http_status = 500


class AuditLog:
    """`.serve/audit.jsonl`: one line per write — when, which key, what, which ids; no text."""

    def __init__(self, root) -> None:
        self.folder = keyfile.folder(root)
        self.path = os.path.join(self.folder, AUDIT_NAME)

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        from memctl.core.fsutil import ensure_private_dir

        ensure_private_dir(self.folder)
        payload = "".join(jsoncodec.dumps(record) + "\n" for record in records).encode("utf-8")
        append_lines(self.path, payload, os.path.join(self.folder, "torn"))

    def tail(self, size: int) -> list[dict]:
        """The records of the last `size` bytes, oldest first (a line cut by the start, or that
        does not parse, left out)."""
        from memctl.core.fsutil import open_nofollow

        try:
            with os.fdopen(open_nofollow(self.path, os.O_RDONLY), "rb") as handle:
                start = max(0, handle.seek(0, os.SEEK_END) - size)
                handle.seek(start)
                lines = handle.read().split(b"\n")
        except FileNotFoundError:
            return []
        records = []
        for line in lines[1 if start else 0:]:
            try:
                record = jsoncodec.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError, RecursionError):
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


class Service:
    def __init__(self, settings) -> None:
        self.settings = settings
        self.root = settings.layout.root
        self.keys = keyfile.KeyRing(self.root)
        self.audit = AuditLog(self.root)
        self.namespaces = EntryNamespaces(settings.layout)
        self.refresher = Refresher(settings, float(settings.get("serve", "refresh_seconds")))
        self.batcher = WriteBatcher(settings, self.audit, self.refresher.written)
        self.readers = ReadPool(settings, int(settings.get("serve", "read_workers")))
        self.scrub = redactor_for(settings)
        self.timeout = float(settings.get("serve", "request_timeout"))
        self.lock_wait = min(self.timeout, 10.0)

    def start(self) -> Service:
        # the index brought up to date while this process has one thread: a large build may fork
        # workers (recall.indexing.prepare), which a process with threads should not do
        self.refresher.refresh()
        self.batcher.start()
        self.refresher.start()
        return self

    def stop(self) -> None:
        self.batcher.stop()
        self.refresher.stop()
        self.readers.stop()

    def call(self, name: str, arguments, caller: Caller) -> dict:
        operation = OPERATIONS.get(name)
        if operation is None or not operation.read_only:
            return self._call(name, arguments, caller)
        if name in SEARCHES:  # waited for before a reader is taken: a reader never idles in the wait
            self.refresher.wait_fresh()
        return self.on_reader(lambda reader: self._call(name, arguments, caller))

    def on_reader(self, work):
        """`work(reader)` on one of the reader threads (memctl.serve.readers), within the timeout."""
        try:
            return self.readers.run(work, self.timeout)
        except TimeoutError:
            raise TimedOut(f"the read took longer than [serve] request_timeout ({self.timeout:g} s)") from None

    def _call(self, name: str, arguments, caller: Caller) -> dict:
        try:
            return call(self, name, arguments, caller)
        except MemctlError:
            raise
        except Exception as exc:  # noqa: BLE001 — one line to the client and the log, never a traceback
            raise self._unexpected(name, caller, exc) from None

    def _unexpected(self, name: str, caller: Caller, exc: BaseException) -> Unexpected:
        detail = self.scrub(f"{type(exc).__name__}: {exc}").splitlines()[0][:300] if str(exc) else type(exc).__name__
        logging.getLogger("memctl.serve").error("%s by %s failed: %s", str(name)[:64], caller.name, detail)
        return Unexpected(f"{str(name)[:64]} failed: {detail}")

    async def remember_async(self, arguments, caller: Caller) -> dict:
        """`call("remember", …)` on the event loop: checked and queued here, its answer awaited
        from the writer thread itself (`WriteBatcher.submit_async`), no worker thread between."""
        try:
            request, namespace = remember_request(checked("remember", arguments, caller), caller)
            try:
                result = await self.batcher.submit_async(Job(request, self._remember_audit(caller, namespace)),
                                                         self.timeout)
            except TimeoutError:
                raise self._write_timed_out() from None
            return remembered(result, namespace)
        except MemctlError:
            raise
        except Exception as exc:  # noqa: BLE001 — one line to the client and the log, never a traceback
            raise self._unexpected("remember", caller, exc) from None

    # --- writes

    def write_remember(self, request, caller: Caller, namespace: str):
        return self._submit(Job(request, self._remember_audit(caller, namespace)))

    @staticmethod
    def _remember_audit(caller: Caller, namespace: str) -> dict:
        return {"key": caller.name, "op": "remember", "namespace": namespace}

    def write_alone(self, work, op: str, caller: Caller):
        return self._submit(Job(None, {"key": caller.name, "op": op}, work))

    def _submit(self, job: Job):
        try:
            return self.batcher.submit(job, self.timeout)
        except TimeoutError:
            raise self._write_timed_out() from None

    def _write_timed_out(self) -> TimedOut:
        return TimedOut(f"the write took longer than [serve] request_timeout ({self.timeout:g} s); "
                        "it may still be done: search before retrying")

    # --- reads

    def search(self, query: str, k: int, layers: tuple[str, ...], namespace: str):
        """The hits of a search, on a reader (the writes acknowledged before the call are
        indexed by then: `call` waited for them)."""
        from memctl.recall.ranking.hits import Hits
        from memctl.recall.search import MAX_K, request_from_settings

        def run(reader, wanted: int):
            request = request_from_settings(self.settings, query, k=min(wanted, MAX_K), layers=",".join(layers))
            return reader.search(request)

        if not namespace:
            return self.on_reader(lambda reader: run(reader, k))
        fetch = k * FETCH_FACTOR
        while True:
            hits = self.on_reader(lambda reader: run(reader, fetch))
            kept = [hit for hit in hits if self.namespace_of(hit.item_id) == namespace]
            if len(kept) >= k or len(hits) < fetch or fetch >= MAX_K:
                return Hits(kept[:k], hits.corrected, hits.completed)
            fetch *= FETCH_FACTOR

    def namespace_of(self, entry_id: str) -> str:
        """The namespace of an entry ("" for none), read on a reader (its connection)."""
        return self.on_reader(lambda reader: self.namespaces.namespace_of(entry_id))

    def compose_namespace(self, query: str, budget: int, namespace: str):
        """compose over one namespace's entries alone (L1, sessions and notes belong to none)."""
        from memctl.agent.compose import Piece, assemble

        hits = self.search(query, 10, ("L5",), namespace)
        pieces = [Piece("l5", hit.ref, self.scrub(hit.text), hit.score) for hit in hits]
        return assemble(self.scrub(query), pieces, max(0, budget), {})

    def scrubbed_hit(self, hit: dict) -> dict:
        return {**hit, "text": self.scrub(hit.get("text") or "")}

    def scrubbed_value(self, value):
        """Every string of a JSON value scrubbed, the keys of its objects too (a search's
        readings are keyed by the query's words, which may hold a secret)."""
        if isinstance(value, dict):
            return {self.scrub(key): self.scrubbed_value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrubbed_value(item) for item in value]
        return self.scrub(value) if isinstance(value, str) else value

    def scrubbed_entry(self, entry: dict) -> dict:
        return {key: self.scrub(value) if isinstance(value, str) else value for key, value in entry.items()}


def status_of(error: BaseException) -> int:
    """The HTTP status an error is answered with."""
    status = getattr(error, "http_status", None)
    if status:
        return status
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, (LockBusy, ServerUnavailable)):
        return 503
    if isinstance(error, WriteFailed):
        return 507
    if isinstance(error, ForgottenFact):
        return 409
    if isinstance(error, MemctlError):
        return 400
    return 500
