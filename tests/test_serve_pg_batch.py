"""One batch of `memctl serve`'s writer on a server memory (issue #30): the remembers of a batch
share one transaction, read each type's candidates, the entries gone for good and L5's count
once (memctl.longterm.pg_reads) and send their appends together (pg_conn.Server.defer_rows).
Whatever a batch holds — a fact twice, a near duplicate, a merge type superseded then seen, a
forgotten fact, several types — it must decide exactly what the same requests decide one
after another, each in its own transaction."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from memctl.core import clock  # noqa: E402
from memctl.core.config import load_settings  # noqa: E402
from memctl.longterm.forget import forget_ids  # noqa: E402
from memctl.longterm.remember import RememberRequest, remember  # noqa: E402
from memctl.longterm.store import open_store  # noqa: E402
from memctl.serve.batcher import Job, WriteBatcher  # noqa: E402
from memctl.serve.service import AuditLog  # noqa: E402

FORGOTTEN = "the old staging password rotation happens every Friday"
REQUESTS = [
    ("the deploy window is Tuesday 10:00 UTC", "event", ""),
    ("the deploy window is Tuesday 10:00 UTC", "event", ""),  # the same fact: seen
    ("The deploy window is Tuesday, 10:00 UTC.", "event", ""),  # a near duplicate: seen again
    ("the editor of the team is vim", "preference", "editor"),
    ("the editor of the team is emacs", "preference", "editor"),  # supersedes vim
    ("the editor of the team is emacs", "preference", "editor"),  # seen
    (FORGOTTEN, "event", ""),  # refused: forgotten
    ("we decided to ship the 2.0 release on Monday", "decision", ""),
    ("the backup of the cluster runs at 03:00", "event", ""),
    ("the deploy window is Tuesday 10:00 UTC", "event", ""),  # seen a third time, after the others
    ("we decided to ship the 2.0 release on Monday", "decision", ""),  # seen
    ("the backup of the cluster runs at 04:00", "event", ""),  # another number: a new fact
]


def _memory(tmp_path, name: str, run, dsn: str, memory: str):
    root = tmp_path / name
    run("init", root=root)
    (root / "memctl.toml").write_text(f'[store]\nbackend = "postgres"\nmemory = "{memory}"\n')
    assert run("init", root=root, env={"MEMCTL_PG_DSN": dsn}).returncode == 0
    settings = load_settings(root)
    first = remember(settings, RememberRequest(FORGOTTEN, "event", ""), clock.now(), 10)
    forget_ids(settings, [first.entry.id], "no longer true", clock.now(), 10)
    return settings


def _outcome(result) -> tuple:
    if isinstance(result, BaseException):
        return ("refused", type(result).__name__)
    return (result.action, result.entry.text, result.entry.seen)


def _l5(settings) -> list[tuple]:
    store = open_store(settings.layout)
    return [(e.text, e.type, e.topic, e.seen) for e in store.active.iter()]


def test_a_batch_decides_what_the_same_remembers_decide_one_by_one(run, tmp_path, pg_server, monkeypatch):
    import uuid

    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    one_by_one = _memory(tmp_path, "single", run, pg_server, "t" + uuid.uuid4().hex[:12])
    batched = _memory(tmp_path, "batched", run, pg_server, "t" + uuid.uuid4().hex[:12])

    expected = []
    for text, type_name, topic in REQUESTS:
        try:
            expected.append(_outcome(remember(one_by_one, RememberRequest(text, type_name, topic), clock.now(), 10)))
        except Exception as refused:  # noqa: BLE001 — what is refused is compared too
            expected.append(_outcome(refused))

    batcher = WriteBatcher(batched, AuditLog(batched.layout.root))
    jobs = [Job(RememberRequest(text, type_name, topic), {"key": "k", "op": "remember"})
            for text, type_name, topic in REQUESTS]
    batcher._handle(jobs)  # the whole list as one batch: one transaction
    assert batcher.batches == 1
    got = [_outcome(job.error if job.error is not None else job.result) for job in jobs]

    assert got == expected
    assert ("refused", "ForgottenFact") in got and ("superseded", "the editor of the team is emacs", 1) in got
    assert _l5(batched) == _l5(one_by_one)


def _elsewhere(work):
    """`work()` on another thread: its own connection, another writer of the memory."""
    import threading

    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("result", work()))
    thread.start()
    thread.join(60)
    return done["result"]


def test_a_listing_carried_between_batches_sees_what_other_writers_did_meanwhile(run, tmp_path, pg_server,
                                                                               monkeypatch):
    """The writer carries a type's listing from one batch to the next (memctl.longterm.pg_reads):
    a row another writer appended meanwhile is found by the next batch, and a row another writer
    moved (forgotten, then restored: a new seq, L5's rewrites counter bumped) is found where it
    is now, not where the carried listing had it."""
    import uuid

    from memctl.longterm.forget import restore

    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    settings = _memory(tmp_path, "carried", run, pg_server, "t" + uuid.uuid4().hex[:12])
    batcher = WriteBatcher(settings, AuditLog(settings.layout.root))

    def batch(text: str):
        job = Job(RememberRequest(text, "event", ""), {"key": "k", "op": "remember"})
        batcher._handle([job])
        assert job.error is None, job.error
        return job.result

    first = batch("the deploy window is Tuesday 10:00 UTC")
    assert first.action == "added"
    other = _elsewhere(lambda: remember(settings, RememberRequest("the backup of the cluster runs at 03:00", "event", ""),
                                        clock.now(), 10))
    assert other.action == "added"
    again = batch("The backup of the cluster runs at 03:00.")  # the other writer's row, appended after the carry
    assert (again.action, again.entry.id, again.entry.seen) == ("seen", other.entry.id, 2)

    def moved():
        forget_ids(settings, [first.entry.id], "wrong", clock.now(), 10)
        return restore(settings, first.entry.id, clock.now(), 10)

    _elsewhere(moved)
    back = batch("the deploy window is Tuesday 10:00 UTC")
    assert (back.action, back.entry.id) == ("seen", first.entry.id)
    texts = [text for text, *_ in _l5(settings)]
    assert sorted(texts) == sorted(["the deploy window is Tuesday 10:00 UTC", "the backup of the cluster runs at 03:00"])


def test_a_batch_reads_memctl_toml_once_and_a_changed_file_again(run, tmp_path, pg_server, monkeypatch):
    """Each opening of the store asks the backend (memctl.core.config.store_backend): a batch
    did that four times, each reading memctl.toml. The file is read again only when its size or
    mtime changed (issue #30)."""
    import os
    import uuid

    from memctl.core import config

    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    settings = _memory(tmp_path, "once", run, pg_server, "t" + uuid.uuid4().hex[:12])
    toml = settings.layout.root / "memctl.toml"
    reads = []
    real_open = open
    monkeypatch.setattr(config, "open", lambda path, *a, **kw: reads.append(os.fspath(path)) or real_open(path, *a, **kw),
                        raising=False)
    batcher = WriteBatcher(settings, AuditLog(settings.layout.root))

    def batch(*texts: str) -> None:
        jobs = [Job(RememberRequest(text, "event", ""), {"key": "k", "op": "remember"}) for text in texts]
        batcher._handle(jobs)
        assert all(job.error is None for job in jobs), [job.error for job in jobs]

    batch("the canary goes to bk-03 first", "the proxy of the lab is nginx")
    assert reads.count(str(toml)) == 0  # read before the batch, unchanged since
    toml.write_text(toml.read_text() + "# a comment: another size\n")
    batch("the nightly backup runs at 03:00")
    assert reads.count(str(toml)) == 1
    text = toml.read_text()
    toml.write_text(text.replace('backend = "postgres"', 'backend = "files"   '))  # the same size
    os.utime(toml, ns=(os.stat(toml).st_atime_ns, os.stat(toml).st_mtime_ns + 1_000_000_000))
    assert config.store_backend(settings.layout.root) == "files" and reads.count(str(toml)) == 2
