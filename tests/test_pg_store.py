"""The entry store on PostgreSQL (issue #14), against a real throwaway server (`pg_server`).

The same commands run on a file memory and on a server memory must leave the same L5, L6 and
dream log: the server's, written out by `memctl export`, byte for byte the file backend's
files (the clock fixed with MEMCTL_NOW, the ids with MEMCTL_IDS). Then what only a server
has: two roots sharing one memory, the schema's version, a server that cannot be reached,
a process killed inside a transaction, and many writers at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import clean_env

PARTS = ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")


class Memory:
    """One memory root on one backend, driven through the installed `memctl`."""

    def __init__(self, run, root: Path, env: dict, backend: str) -> None:
        self.run_, self.root, self.env, self.backend = run, root, env, backend

    def run(self, *args, env: dict | None = None, input: bytes | None = None):
        return self.run_(*args, root=self.root, env={**self.env, **(env or {})}, input=input)

    def ok(self, *args, **kw) -> str:
        done = self.run(*args, **kw)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout.decode()

    def parts(self) -> dict[str, bytes]:
        """L5, L6 and the dream log as the file backend keeps them."""
        folder = self.root
        if self.backend == "postgres":
            folder = self.root.parent / (self.root.name + "-export")
            folder.mkdir(exist_ok=True)
            self.ok("export", "--to", folder)
        return {name: (folder / name).read_bytes() if (folder / name).exists() else b"" for name in PARTS}


def store_config(memory_name: str) -> str:
    return f'[store]\nbackend = "postgres"\nmemory = "{memory_name}"\n'


def make(run, tmp_path: Path, backend: str, dsn: str = "", memory_name: str = "", name: str = "") -> Memory:
    root = tmp_path / (name or backend)
    env = {"MEMCTL_PG_DSN": dsn} if backend == "postgres" else {}
    memory = Memory(run, root, env, backend)
    memory.ok("init")
    if backend == "postgres":
        with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
            handle.write(store_config(memory_name))
        memory.ok("init")
    return memory


@pytest.fixture
def both(run, tmp_path, request):
    """(file memory, server memory); the server half skips, saying why, without a server."""
    dsn = request.getfixturevalue("pg_server")
    name = request.getfixturevalue("pg_memory_name")
    pair = make(run, tmp_path, "files"), make(run, tmp_path, "postgres", dsn, name)
    for memory in pair:
        memory.env["MEMCTL_IDS"] = str(tmp_path / f"{memory.backend}.ids")  # the same ids for the same commands
    return pair


@pytest.fixture
def server_memory(run, tmp_path, pg_server, pg_memory_name):
    return make(run, tmp_path, "postgres", pg_server, pg_memory_name)


def assert_same(files: Memory, server: Memory) -> dict[str, bytes]:
    left, right = files.parts(), server.parts()
    for name in PARTS:
        assert left[name] == right[name], name
    assert left["long_term.jsonl"], "the scenario wrote something"
    return left


# --- the same commands on both backends


def remember_forget_restore(memory: Memory) -> None:
    at = {"MEMCTL_NOW": "2026-04-10T09:00:00"}
    memory.ok("remember", "I use vim", "--type", "preference", "--topic", "editor", env=at)
    memory.ok("remember", "I switched to helix", "--type", "preference", "--topic", "Editor", env=at)
    memory.ok("remember", "The deploy script needs sudo on bk-02", "--type", "lesson", env=at)
    memory.ok("remember", "the deploy script needs sudo on bk-02.", "--type", "lesson", env=at)  # seen 2
    gone = memory.ok("remember", "the old build host was bk-01", "--type", "event", env=at).strip()
    memory.ok("remember", "staging uses postgres 15", "--type", "event", env=at)
    memory.ok("forget", gone, "--reason", "host retired", env=at)
    refused = memory.run("remember", "the old build host was bk-01", "--type", "event", env=at)
    assert refused.returncode == 2 and b"forgotten" in refused.stderr
    memory.ok("restore", gone, env=at)
    memory.ok("forget", "--match", "staging", "--yes", env=at)
    assert memory.run("restore", gone).returncode == 2  # already active


def test_remember_forget_restore_purge_and_task_done_leave_the_same_l5_l6_and_log(both):
    files, server = both
    for memory in both:
        remember_forget_restore(memory)
        purge_and_task(memory)
    parts = assert_same(files, server)
    assert b'"seen": 2' in parts["long_term.jsonl"] and b'"type": "case"' in parts["long_term.jsonl"]
    assert all(SECRET.encode() not in data for data in parts.values())
    assert b'"reason": "purged"' in parts["archive.jsonl"] and b'"restored from forgotten"' in parts["dream_log.jsonl"]
    assert server.ok("show", "L5:" + json.loads(parts["long_term.jsonl"].splitlines()[0])["id"])
    assert server.run("verify").returncode == 0


SEED = [
    {"id": "a", "text": "Always run the migrations before deploying the api", "type": "case"},
    {"id": "b", "text": "always run migrations before deploying the API!", "type": "case"},
    {"id": "c", "text": "Always run the migration before deploying the api", "type": "case"},
    {"id": "v1", "text": "deploys via jenkins", "type": "decision"},
    {"id": "v2", "text": "deploys via actions", "type": "decision", "supersedes": ["v1"]},
    {"id": "m1", "text": "bk-02 backs up", "type": "lesson", "topic": "bk-02", "confidence": 8},
    {"id": "m2", "text": "bk-02 has 64 GB", "type": "lesson", "topic": "bk-02", "confidence": 8},
    {"id": "h\u0000", "text": "a NUL \u0000 inside, 备份在凌晨三点 and \u2028 a line separator", "type": "event"},
] + [{"id": f"n{i}", "text": f"note number {i} about topic {i * 7919 % 1000}", "type": "lesson"} for i in range(12)]


def import_dream_undo(memory: Memory) -> None:
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in SEED)
    memory.ok("import", "-", "--layer", "L5", input=lines, env={"MEMCTL_NOW": "2026-05-30T10:00:00"})
    memory.ok("import", "-", "--layer", "L5", input=lines, env={"MEMCTL_NOW": "2026-05-30T10:00:00"})  # no-op
    memory.ok("import", "-", "--layer", "L6", input=b'{"id": "z", "text": "earlier", "type": "event"}\n',
              env={"MEMCTL_NOW": "2026-05-30T10:00:00"})
    report = json.loads(memory.ok("dream", "--json", "--force", env={"MEMCTL_NOW": "2026-06-01T04:00:00"}))
    assert report["counts"].get("consolidate") == 3, report
    memory.ok("dream", "--undo", report["run"], env={"MEMCTL_NOW": "2026-06-01T05:00:00"})
    later = json.loads(memory.ok("dream", "--json", "--force", env={"MEMCTL_NOW": "2026-12-01T04:00:00"}))
    assert later["counts"].get("archive") or later["counts"].get("forget"), later


def test_import_dream_and_undo_leave_the_same_l5_l6_and_log(both):
    files, server = both
    for memory in both:
        import_dream_undo(memory)
    parts = assert_same(files, server)
    assert b'"op": "undo"' in parts["dream_log.jsonl"] and b'"consolidated"' in parts["archive.jsonl"]
    assert b"\\u0000" in parts["long_term.jsonl"] + parts["archive.jsonl"]  # a NUL (text refuses it) kept as written


SECRET = "sk-vault-7f3a-purple-elephant"


def purge_and_task(memory: Memory) -> None:
    at = {"MEMCTL_NOW": "2026-04-10T09:00:00"}
    secret = memory.ok("remember", f"The vault key is {SECRET}", "--type", "event", env=at).strip()
    memory.ok("remember", "the vault lives on bk-07", "--type", "event", env=at)
    memory.ok("forget", secret, env=at)
    memory.ok("restore", secret, env=at)
    memory.ok("remember", f"vault key: {SECRET}", "--type", "tool", "--topic", "vault", env=at)
    memory.ok("remember", "vault key rotated, ask ops", "--type", "tool", "--topic", "vault", env=at)
    memory.ok("forget", "--purge", "--match", SECRET, "--yes", "--reason", "leaked key", env=at)
    state = json.dumps({"goal": "restore nightly backup on bk-02", "summary": "stale key"}).encode()
    memory.ok("task", "save", "bk-02-backup", input=state, env=at)
    memory.ok("task", "done", "bk-02-backup", env={"MEMCTL_NOW": "2026-04-10T10:00:00"})


# --- what only a server memory has


def test_import_files_loads_a_file_memory_byte_for_byte_and_twice_adds_nothing(both, tmp_path):
    files, server = both
    files.ok("import", "-", "--layer", "L5", input=b"".join(json.dumps(e).encode() + b"\n" for e in SEED[:5]))
    files.ok("forget", "a", "--reason", "stale")
    files.ok("task", "save", "half-done", input=b'{"step": 2}')
    first = json.loads(server.ok("import-files", files.root, "--json"))
    assert first["added"] == {"L5": 4, "L6": 1, "dream log": 1, "tasks": 1}
    again = json.loads(server.ok("import-files", files.root, "--json"))
    assert again["added"] == {"L5": 0, "L6": 0, "dream log": 0, "tasks": 0}
    assert json.loads(server.ok("task", "show", "half-done")) == {"step": 2}
    assert server.parts() == files.parts()  # the same ids: no canonical form needed
    status = json.loads(server.ok("status", "--json"))
    assert status["backend"] == "postgres" and status["layers"]["L5"]["entries"] == 4
    assert json.loads(files.ok("status", "--json"))["backend"] == "files"
    # the way back: export into the root, then the file backend reads the same memory
    server.ok("export")
    config = server.root / "memctl.toml"
    config.write_text(config.read_text().replace('backend = "postgres"', 'backend = "files"'))
    assert (server.root / "working" / "half-done.json").read_bytes() == \
        (files.root / "working" / "half-done.json").read_bytes()  # open tasks come back as files
    assert server.run("show", "L5:" + json.loads(files.parts()["long_term.jsonl"].splitlines()[0])["id"]).returncode == 0


def test_two_roots_on_two_machines_share_one_memory(run, tmp_path, pg_server, pg_memory_name):
    one = make(run, tmp_path, "postgres", pg_server, pg_memory_name, name="machine-one")
    two = make(run, tmp_path, "postgres", pg_server, pg_memory_name, name="machine-two")
    one.env["MEMCTL_HOME"], two.env["MEMCTL_HOME"] = str(one.root), str(two.root)
    mine = one.ok("remember", "the build host is bk-02", "--type", "event").strip()
    theirs = two.ok("remember", "backups run at 03:00 on bk-07", "--type", "event").strip()
    assert b"bk-02" in two.ok("show", "L5:" + mine).encode()
    assert b"bk-07" in one.ok("show", "L5:" + theirs).encode()
    assert one.parts() == two.parts()
    one.ok("forget", theirs, "--reason", "moved")
    refused = two.run("remember", "backups run at 03:00 on bk-07", "--type", "event")
    assert refused.returncode == 2 and theirs.encode() in refused.stderr
    assert two.run("show", "L5:" + theirs).returncode == 2


def _refs_of(memory: Memory, entry_id: str) -> int:
    rows = [json.loads(line) for line in memory.parts()["long_term.jsonl"].splitlines()]
    return next(row.get("refs", 0) for row in rows if row["id"] == entry_id)


def test_references_and_task_state_are_shared_by_every_machine(run, tmp_path, pg_server, pg_memory_name):
    """A dream on one machine folds what every machine's searches and composes referenced; a
    task saved on one machine is listed, shown and finished on another."""
    one = make(run, tmp_path, "postgres", pg_server, pg_memory_name, name="machine-one")
    two = make(run, tmp_path, "postgres", pg_server, pg_memory_name, name="machine-two")
    one.env["MEMCTL_HOME"], two.env["MEMCTL_HOME"] = str(one.root), str(two.root)
    at = {"MEMCTL_NOW": "2026-04-10T09:00:00"}
    fact = one.ok("remember", "the build host is bk-02", "--type", "event", env=at).strip()
    assert fact in two.ok("search", "build host bk-02", env=at)
    assert fact in one.ok("search", "bk-02", env=at)
    one.ok("dream", env=at)
    assert _refs_of(one, fact) == 2
    pieces = [json.loads(line) for line in two.ok("compose", "the bk-02 build host", "--json", env=at).splitlines()]
    composed = sum(1 for p in pieces if p.get("ref") == "L5:" + fact)
    two.ok("dream", env=at)
    assert composed == 1 and _refs_of(two, fact) == 3  # folded once: the cursor is shared too
    assert not (one.root / ".memctl" / "refs.log").exists() and not (two.root / ".memctl" / "refs.log").exists()

    state = {"goal": "move the build host off bk-02", "step": 3}
    one.ok("task", "save", "bk-02-move", input=json.dumps(state).encode(), env=at)
    assert two.ok("task", "list").startswith("bk-02-move\t2026-04-10T09:00:00\t1 saves")
    assert json.loads(two.ok("task", "show", "bk-02-move")) == state
    case = two.ok("task", "done", "bk-02-move", env=at).strip()
    assert one.ok("task", "list") == "" and b"move the build host" in one.ok("show", "L5:" + case).encode()
    missing = one.run("task", "show", "bk-02-move")
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
    assert not list(one.root.glob("working/*")) and not list(two.root.glob("working/*"))  # no file holds it


def test_init_migrates_refuses_a_newer_schema_and_other_commands_ask_for_init(run, tmp_path, pg_server, pg_memory_name):
    import psycopg

    memory = Memory(run, tmp_path / "m", {"MEMCTL_PG_DSN": pg_server}, "postgres")
    memory.ok("init")
    (memory.root / "memctl.toml").write_text(store_config(pg_memory_name))
    asked = memory.run("remember", "x", "--type", "event")
    assert asked.returncode == 2 and b"memctl init" in asked.stderr and len(asked.stderr.splitlines()) == 1
    assert b"longterm v4" in memory.run("init").stderr
    assert b"longterm v4" in memory.run("init").stderr  # again: nothing to do, the same answer
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"UPDATE memctl_{pg_memory_name}.schema_version SET version = 99 WHERE component = 'longterm'")
    for args in (("init",), ("remember", "x", "--type", "event")):
        refused = memory.run(*args)
        assert refused.returncode == 2 and b"newer" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_an_unreachable_server_is_one_line_naming_the_host_never_the_password(run, tmp_path):
    memory = Memory(run, tmp_path / "m", {"MEMCTL_PG_DSN": "postgresql://team:hunter2secret@127.0.0.1:9/memory"},
                    "postgres")
    memory.ok("init")
    (memory.root / "memctl.toml").write_text(store_config("team"))
    for args in (("init",), ("remember", "x", "--type", "event"), ("status",), ("export", "--to", tmp_path)):
        done = memory.run(*args)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, (args, done.stderr)
        assert b"127.0.0.1:9" in done.stderr and b"hunter2secret" not in done.stderr + done.stdout


def _pg_rows(dsn: str, schema: str) -> tuple:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        entries = conn.execute(f"SELECT seq, part, raw FROM {schema}.entries ORDER BY seq").fetchall()
        log = conn.execute(f"SELECT seq, raw FROM {schema}.dream_log ORDER BY seq").fetchall()
        parts = conn.execute(f"SELECT * FROM {schema}.entry_parts ORDER BY part").fetchall()
    return entries, log, parts


@pytest.mark.parametrize("command,label", [
    (["forget", "ID"], "pg-commit"),
    (["remember", "I switched to helix", "--type", "preference", "--topic", "editor"], "pg-commit"),
    (["remember", "the deploy host is bk-09", "--type", "event"], "pg-append"),  # one statement: row and last_seq
])
def test_a_process_killed_inside_its_transaction_leaves_the_rows_as_they_were(server_memory, memctl_bin, tmp_path,
                                                                               pg_memory_name, command, label):
    memory = server_memory
    kept = memory.ok("remember", "I use vim", "--type", "preference", "--topic", "editor").strip()
    memory.ok("remember", "the build host is bk-02", "--type", "event")
    schema = "memctl_" + pg_memory_name
    before = _pg_rows(memory.env["MEMCTL_PG_DSN"], schema)
    marker = tmp_path / "paused"
    args = [a.replace("ID", kept) for a in command]
    env = clean_env(MEMCTL_PG_DSN=memory.env["MEMCTL_PG_DSN"], MEMCTL_FAULT_PG_PAUSE=f"{label}:{marker}")
    child = subprocess.Popen([memctl_bin, "--root", str(memory.root), *args], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):  # bounded: at most 60 s for the child to reach its fault point
            if marker.exists() or child.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), "the child never reached its pause inside the transaction"
        assert _pg_rows(memory.env["MEMCTL_PG_DSN"], schema) == before  # written, not committed: invisible
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert _pg_rows(memory.env["MEMCTL_PG_DSN"], schema) == before
    assert memory.run("verify").returncode == 0
    memory.ok(*args)  # its locks went with its connection: the same change now goes through
    assert _pg_rows(memory.env["MEMCTL_PG_DSN"], schema) != before


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basalt cobalt dune").split()


def _fact(k: int) -> str:
    """Facts that share no word with each other (none is a near-duplicate of another)."""
    return f"{WORDS[k]} {WORDS[(k * 7 + 3) % 30]}x {WORDS[(k * 11 + 5) % 30]}y host{k}"


def test_the_same_fact_remembered_by_many_processes_at_once_is_added_once(server_memory, memctl_bin):
    """The type lock goes to the server with the reads it guards (one pipeline): each writer's
    near-duplicate check still sees every earlier writer's row."""
    env = clean_env(MEMCTL_PG_DSN=server_memory.env["MEMCTL_PG_DSN"])
    children = [subprocess.Popen([memctl_bin, "--root", str(server_memory.root), "remember", "--json",
                                  f"the release train leaves on thursday at 10:00{' sharp' * (n % 2)}",
                                  "--type", "event"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for n in range(6)]
    results = [child.communicate(timeout=300) for child in children]
    assert all(child.returncode == 0 for child in children), [err for _, err in results]
    actions = sorted(json.loads(out)["action"] for out, _ in results)
    assert actions == ["added"] + ["seen"] * 5
    assert len(server_memory.parts()["long_term.jsonl"].splitlines()) == 1


def test_concurrent_remembers_from_many_processes_lose_nothing_and_refuse_nothing(server_memory, memctl_bin):
    memory = server_memory
    env = clean_env(MEMCTL_PG_DSN=memory.env["MEMCTL_PG_DSN"])
    children = []
    for writer in range(4):
        texts = [_fact(writer * 4 + i) for i in range(4)]
        script = " && ".join(f'"$0" --root "$1" remember "{t}" --type {("event", "lesson")[writer % 2]}' for t in texts)
        children.append(subprocess.Popen(["sh", "-c", script, memctl_bin, str(memory.root)], env=env,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    failures = [err for child in children for err in [child.communicate(timeout=300)[1]] if child.returncode != 0]
    assert failures == []
    l5 = [json.loads(line) for line in memory.parts()["long_term.jsonl"].splitlines()]
    assert sorted(e["text"] for e in l5) == sorted(_fact(k) for k in range(16))
    assert memory.run("verify").returncode == 0


def test_the_write_path_queries_are_indexed_statements_with_the_file_backend_answers(tmp_path, pg_server,
                                                                                    pg_memory_name, monkeypatch):
    """The queries issue #13 gives the write path (count, holds, row, current, candidates,
    replace, remove, gone_for_good, departed_entry), answered by the server."""
    from memctl.core.config import init_root, load_settings
    from memctl.longterm.entries import Entry
    from memctl.longterm.store import open_store

    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    root = tmp_path / "m"
    init_root(root)
    (root / "memctl.toml").write_text(store_config(pg_memory_name))
    from memctl.ops.server import initialise

    initialise(load_settings(root))
    store = open_store(load_settings(root).layout)
    store.active.append([Entry(id="e1", text="vim", type="preference", topic="Editor"),
                         Entry(id="e2", text="the deploy needs sudo", type="lesson"),
                         Entry(id="e3", text="backups at 03:00", type="lesson")])
    store.archive.append([Entry(id="g1", text="old host bk-01", reason="forgotten"),
                          Entry(id="g2", text="back again", reason="forgotten"),
                          Entry(id="g3", text="", reason="purged", extra={"sha256": "sha256:x"})])
    store.active.append([Entry(id="g2", text="back again")])
    assert store.active.count() == 4 and store.active.holds("e2") and not store.active.holds("g1")
    assert store.active.current("preference", " editor ").entry.id == "e1"
    assert [r.entry_id for r in store.active.candidates("lesson", "sudo")] == ["e2", "e3"]
    assert store.active.candidates("lesson", "the deploy needs sudo!", 95).keys == ["deploy needs sudo the"]
    assert [e.id for e in store.gone_for_good("anything")] == ["g1", "g3"]
    assert store.departed_entry("g1").reason == "forgotten" and store.departed_entry("g2") is None
    store.active.replace("e1", store.row_for(Entry(id="e4", text="helix", type="preference", topic="editor")),
                         at_end=True)
    store.active.replace("e2", store.row_for(Entry(id="e2", text="the deploy needs sudo", type="lesson", seen=2)))
    store.active.remove(["e3"])
    assert [e.id for e in store.active.entries()] == ["e2", "g2", "e4"] and store.active.row("e2").entry.seen == 2


def test_a_server_restarted_mid_run_loses_no_acknowledged_write(run, tmp_path, pg_memory_name, memctl_bin):
    """Its own cluster (the shared one stays up): writers run while the server restarts
    (immediate shutdown, as a crash); every remember that exited 0 is there afterwards."""
    import subprocess as sp

    from pgcluster import start_cluster, why_unavailable

    if why_unavailable():
        pytest.skip(f"PostgreSQL half skipped: {why_unavailable()}")
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memctl-pg-"))  # the server user must reach it (tmp_path is 0700)
    cluster = start_cluster(folder)
    try:
        memory = make(run, tmp_path, "postgres", cluster.dsn, pg_memory_name)
        acked = tmp_path / "acked"
        env = clean_env(MEMCTL_PG_DSN=cluster.dsn)
        script = " ; ".join(f'out=$("$0" --root "$1" remember "{_fact(k)}" --type event) && echo "$out" >> "$2"'
                            for k in range(12))
        writer = sp.Popen(["sh", "-c", script, memctl_bin, str(memory.root), str(acked)], env=env,
                          stdout=sp.DEVNULL, stderr=sp.DEVNULL)
        for _ in range(600):  # bounded: at most 60 s for the first acknowledged write
            if acked.exists() or writer.poll() is not None:
                break
            time.sleep(0.1)
        cluster.restart()
        writer.wait(timeout=300)
        ids = acked.read_text().split()
        l5 = [json.loads(line)["id"] for line in memory.parts()["long_term.jsonl"].splitlines()]
        assert ids and set(ids) <= set(l5) and len(l5) == len(set(l5))
        assert memory.run("verify").returncode == 0
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_near_duplicate_check_reads_only_rows_of_reachable_length(server_memory, pg_server, pg_memory_name,
                                                                    monkeypatch):
    """The server narrows the candidates by key_length (an exact bound: the same answer as
    reading every row of the type) and sends their keys, not their lines; a row written before
    the columns (NULL) is sent whole and parsed, and still found."""
    import psycopg

    from memctl.longterm.pg_conn import server_for
    from memctl.longterm.pg_store import ServerPart

    short = server_memory.ok("remember", "bk-07 backups run at 03:00", "--type", "event").strip()
    for n in range(6):
        server_memory.ok("remember", f"the staging cluster {n} was rebuilt after the kernel upgrade of "
                         f"the storage nodes, whose disks had failed the nightly checks {n} times", "--type", "event")
    schema = f"memctl_{pg_memory_name}"
    server = server_for(pg_server, schema)
    part = ServerPart(server, "active", "L5", "long_term.jsonl", frozenset())
    sent = []
    real = server.execute
    monkeypatch.setattr(server, "execute", lambda sql, params=(): sent.append(real(sql, params)) or sent[-1])

    def candidate_rows(cutoff: float) -> tuple[list[str], list[tuple]]:
        found = part.candidates("event", "bk-07 backups run at 03:00 daily", cutoff)
        cursor = sent[-1]
        cursor.scroll(0, mode="absolute")
        return [entry_id for entry_id, *_ in found._found], cursor.fetchall()

    ids, rows = candidate_rows(80.0)
    assert ids == [short] and len(rows) == 1 and rows[0][3] is None  # its key, not its line
    ids, rows = candidate_rows(0.0)
    assert len(ids) == len(rows) == 7  # no bound: every row of the type

    with psycopg.connect(pg_server, autocommit=True) as conn:  # as a memory written before longterm v4 has them
        conn.execute(f"UPDATE {schema}.entries SET key_length = NULL, near_key = NULL")
    ids, rows = candidate_rows(80.0)
    assert ids == [short] and len(rows) == 7 and all(raw is not None for *_, raw in rows)
    seen = server_memory.run("remember", "bk-07 backups run at 03:00 daily", "--type", "event", "--json")
    assert seen.returncode == 0 and json.loads(seen.stdout)["action"] == "seen", seen.stderr
