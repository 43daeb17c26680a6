"""The resident writer (memctl.cli.resident, memctl.residents.writer): a `remember` handed to
the root's writer prints and writes what the in-process command would; a writer that is
missing, stale, of another environment, disabled or killed at any step leaves every fact in L5
exactly once, and no client is told a write happened that is not durable."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_env
from test_lean_writes import NOW, _play, _script

from memctl.cli import resident

ID_LINE = re.compile(rb"^m[0-9a-f]{12}\n$")
RESIDENT = {"MEMCTL_RESIDENT": "1", "MEMCTL_NOW": NOW}


def _init(memctl_bin: str, root: Path) -> Path:
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    return root


def _remember(memctl_bin: str, root: Path, text: str, *more: str, env: dict | None = None, input: bytes | None = None):
    return subprocess.run([memctl_bin, "--root", str(root), "remember", text, "--type", "event", *more],
                          capture_output=True, input=input, env=clean_env(**{**RESIDENT, **(env or {})}), timeout=120)


def _socket_file(root: Path) -> Path:
    return root / ".memctl" / resident.SOCKET_NAME


def _start_writer(root: Path, preexec_fn=None, **env: str) -> subprocess.Popen:
    """A writer started by hand (as a remember starts one), serving once its socket answers."""
    writer = subprocess.Popen([sys.executable, "-P", "-m", "memctl.residents.writer", str(root), "-"],
                              env=clean_env(**{**RESIDENT, **env}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              preexec_fn=preexec_fn)
    _wait_for(lambda: _serving(root) or writer.poll() is not None, "the writer to listen")
    assert writer.poll() is None, writer.stderr.read()
    return writer


def _serving(root: Path) -> bool:
    connection = resident.connect(str(root))
    if connection is None:
        return False
    connection.close()
    return True


def _wait_for(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def _stop_writers(root: Path, socket_name: str = resident.SOCKET_NAME, lock_name: str = resident.LOCK_NAME) -> None:
    """End whatever writer (or other resident process: its socket and lock names) serves the root
    and wait until it is gone: its socket file removed until its lock is free (one still starting
    binds its socket only when ready)."""
    lock_path = root / ".memctl" / lock_name
    if not lock_path.exists():
        (root / ".memctl" / socket_name).unlink(missing_ok=True)
        return
    fd = os.open(lock_path, os.O_RDWR)

    def free() -> bool:
        (root / ".memctl" / socket_name).unlink(missing_ok=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True

    try:
        _wait_for(free, "the resident process to exit")
    finally:
        os.close(fd)


def _served(root: Path) -> int:
    """Requests the root's writers wrote, by their exit lines in .memctl/writer.log."""
    log = root / ".memctl" / "writer.log"
    text = log.read_text() if log.exists() else ""
    return sum(int(n) for n in re.findall(r"\t(\d+) requests in", text))


@pytest.fixture
def roots(tmp_path):
    """Memory roots made on demand; their writers stopped at the end."""
    made: list[Path] = []

    def make(name: str = "memory") -> Path:
        made.append(tmp_path / name)
        return made[-1]

    yield make
    for root in made:
        if (root / ".memctl").is_dir():
            _stop_writers(root)


def _l5_ids(root: Path) -> list[str]:
    return re.findall(r'"id": "(m[0-9a-f]{12})"', (root / "long_term.jsonl").read_text())


# --- the same answers


def test_a_remember_through_the_writer_prints_and_writes_what_the_in_process_one_does(memctl_bin, roots):
    served, alone = _init(memctl_bin, roots("served")), _init(memctl_bin, roots("alone"))
    _start_writer(served)
    through = _play(memctl_bin, served, False, RESIDENT)  # test_lean_writes' script: writes, errors, a held lock
    in_process = _play(memctl_bin, alone, False, {**RESIDENT, "MEMCTL_RESIDENT": "0"})
    for mine, theirs in zip(through, in_process):
        assert mine == theirs
    _stop_writers(served)
    remembers = [argv for argv, _ in _script(served) if argv[:1] == ["remember"] or argv[2:3] == ["remember"]]
    assert _served(served) >= len(remembers) - 2  # all but the calls retried in-process
    assert _served(alone) == 0 and not (alone / ".memctl" / resident.LOCK_NAME).exists()


def test_eight_concurrent_clients_are_each_written_once(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    _start_writer(root)
    env = clean_env(**RESIDENT)
    clients = [subprocess.Popen([memctl_bin, "--root", str(root), "remember", f"client {n} rotated host h{n:03d}",
                                 "--type", "event", "--wait", "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for n in range(8)]
    outputs = [client.communicate(timeout=120) + (client.returncode,) for client in clients]
    assert all(code == 0 and ID_LINE.match(out) and err == b"" for out, err, code in outputs), outputs
    acknowledged = [out.decode().strip() for out, _, _ in outputs]
    assert sorted(_l5_ids(root)) == sorted(acknowledged)
    _stop_writers(root)
    assert _served(root) == 8


def test_the_socket_is_private(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    _start_writer(root)
    assert _socket_file(root).stat().st_mode & 0o777 == 0o600


# --- no writer, or not this one


def test_a_stale_socket_file_means_in_process_then_a_writer_takes_its_place(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    folder = os.open(root / ".memctl", os.O_RDONLY)  # a short address for a long temporary path
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(f"/proc/self/fd/{folder}/{resident.SOCKET_NAME}")  # bound, never listening: a killed writer's
    left.close()
    os.close(folder)
    assert _socket_file(root).exists()
    first = _remember(memctl_bin, root, "the proxy listens on 7890")
    assert first.returncode == 0 and ID_LINE.match(first.stdout) and first.stderr == b""
    _wait_for(lambda: _serving(root), "the writer the remember started")
    second = _remember(memctl_bin, root, "the cache lives on n3")
    assert second.returncode == 0 and ID_LINE.match(second.stdout)
    _stop_writers(root)
    assert _served(root) == 1
    assert sorted(_l5_ids(root)) == sorted([first.stdout.decode().strip(), second.stdout.decode().strip()])


def test_a_writer_of_another_environment_declines_and_the_write_happens_in_process(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    writer = _start_writer(root, TZ="Asia/Tokyo")
    done = _remember(memctl_bin, root, "the proxy listens on 7890", env={"TZ": "UTC"})
    assert done.returncode == 0 and ID_LINE.match(done.stdout)
    assert writer.wait(timeout=60) == 0  # it declined, and left for a current one
    assert _l5_ids(root) == [done.stdout.decode().strip()]
    assert "exited: a client of another version" in (root / ".memctl" / "writer.log").read_text()


def test_the_identity_names_the_version_and_the_config(tmp_path, monkeypatch):
    import memctl

    (tmp_path / "memctl.toml").write_text("")
    before = resident.identity(str(tmp_path))
    monkeypatch.setattr(memctl, "__version__", "999")
    assert resident.identity(str(tmp_path)) != before
    monkeypatch.undo()
    (tmp_path / "memctl.toml").write_text("[dream]\nsimilarity = 90\n")
    assert resident.identity(str(tmp_path)) != before


def test_a_disabled_writer_is_never_started(memctl_bin, roots):
    off = _init(memctl_bin, roots("off"))
    done = _remember(memctl_bin, off, "the proxy listens on 7890", env={"MEMCTL_RESIDENT": "0"})
    assert done.returncode == 0
    idle_off = _init(memctl_bin, roots("idle_off"))
    (idle_off / "memctl.toml").write_text("[writes]\nresident_idle = 0\n")
    done = _remember(memctl_bin, idle_off, "the proxy listens on 7890")
    assert done.returncode == 0
    for root in (off, idle_off):  # a started writer takes the lock file first
        assert not (root / ".memctl" / resident.LOCK_NAME).exists()


def test_a_symlinked_state_folder_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "memory"
    root.mkdir()
    (root / ".memctl").symlink_to(elsewhere)
    assert resident.socket_address(str(root)) is None


# --- a writer killed at each step, a full disk


KILL_POINTS = [{"MEMCTL_FAULT_AT": "writer: requests read"},
               {"MEMCTL_FAULT_WRITE": "1:torn"},  # mid-append
               {"MEMCTL_FAULT_AT": "writer: request written"},
               {"MEMCTL_FAULT_AT": "unlocked, last append not yet synced"},  # after the append, before the fsync
               {"MEMCTL_FAULT_AT": "writer: synced, not replied"},
               {"MEMCTL_FAULT_AT": "writer: replied"}]  # mid-replies


@pytest.mark.parametrize("fault", KILL_POINTS, ids=lambda f: next(iter(f.values())))
def test_a_killed_writer_loses_no_fact_and_writes_none_twice(memctl_bin, roots, fault):
    root = _init(memctl_bin, roots())
    writer = _start_writer(root, **fault)
    outputs = _one_batch(memctl_bin, root, writer, [f"client {n} rotated host h{n:03d}" for n in range(3)])
    assert writer.wait(timeout=60) == -signal.SIGKILL, (outputs, _log(root))
    assert all(code == 0 and ID_LINE.match(out) for out, _, code in outputs), outputs
    acknowledged = sorted(out.decode().strip() for out, _, _ in outputs)
    assert sorted(_l5_ids(root)) == acknowledged  # each once
    verify = subprocess.run([memctl_bin, "--root", str(root), "verify"], capture_output=True, env=clean_env())
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize("fault", KILL_POINTS, ids=lambda f: next(iter(f.values())))
def test_a_killed_writer_counts_a_fact_said_again_once(memctl_bin, roots, fault):
    root = _init(memctl_bin, roots())
    texts = [f"client {n} rotated host h{n:03d}" for n in range(3)]
    for text in texts:  # in L5 already: each said again raises its `seen`, a rewrite of its line
        assert _remember(memctl_bin, root, text, env={"MEMCTL_RESIDENT": "0"}).returncode == 0
    ids = _l5_ids(root)
    writer = _start_writer(root, **fault)
    outputs = _one_batch(memctl_bin, root, writer, texts)
    assert writer.wait(timeout=60) == -signal.SIGKILL, (outputs, _log(root))
    assert sorted(out.decode().strip() for out, _, code in outputs if code == 0) == sorted(ids), outputs
    # the retry of a request the writer wrote but did not acknowledge finds its bump done
    entries = [json.loads(line) for line in (root / "long_term.jsonl").read_text().splitlines()]
    assert [(e["id"], e["seen"]) for e in entries] == [(entry_id, 2) for entry_id in ids]
    again = _remember(memctl_bin, root, texts[0], "--json", env={"MEMCTL_RESIDENT": "0"})
    assert json.loads(again.stdout)["seen"] == 3  # a new request is counted as ever


def _one_batch(memctl_bin: str, root: Path, writer: subprocess.Popen, texts: list[str]) -> list:
    """(stdout, stderr, exit status) of a remember of each text, sent while the writer was
    stopped: it reads them all at once, as one batch."""
    os.kill(writer.pid, signal.SIGSTOP)
    try:
        clients = [subprocess.Popen([memctl_bin, "--root", str(root), "remember", text, "--type", "event"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(**RESIDENT))
                   for text in texts]
        _wait_for(lambda: all(_waiting_for_reply(c.pid) or c.poll() is not None for c in clients),
                  "the clients to send their requests")
    finally:
        os.kill(writer.pid, signal.SIGCONT)
    return [client.communicate(timeout=120) + (client.returncode,) for client in clients]


def test_a_refused_request_does_not_refuse_the_rest_of_its_batch(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    writer = _start_writer(root)
    outputs = _one_batch(memctl_bin, root, writer, ["", "the proxy listens on 7890", "  ", "the cache lives on n3"])
    assert [code for _, _, code in outputs] == [2, 0, 2, 0]
    assert all(err == b"memctl: error: nothing to remember: the text is empty\n" for _, err, code in outputs if code)
    assert sorted(_l5_ids(root)) == sorted(out.decode().strip() for out, _, code in outputs if code == 0)
    _stop_writers(root)
    assert "4 requests in 1 batches" in _log(root)


def _waiting_for_reply(pid: int) -> bool:
    """Whether the client process sleeps reading its socket (it sent its request)."""
    try:  # a socket with a timeout is read after poll(): the only poll a client makes
        return Path(f"/proc/{pid}/wchan").read_text().startswith(("poll_schedule_timeout", "unix_stream_read"))
    except OSError:
        return False


@pytest.mark.parametrize("fault", [{"MEMCTL_FAULT_SYNC": "enospc"}, {"MEMCTL_FAULT_WRITE": "1:enospc"}],
                         ids=["fsync", "append"])
def test_a_full_disk_gives_the_clients_the_in_process_error(memctl_bin, roots, fault):
    served, alone = _init(memctl_bin, roots("served")), _init(memctl_bin, roots("alone"))
    _start_writer(served, **fault)
    through = _remember(memctl_bin, served, "a fact on a full disk")
    in_process = _remember(memctl_bin, alone, "a fact on a full disk", env={**fault, "MEMCTL_RESIDENT": "0"})
    assert through.returncode == in_process.returncode == 2
    assert through.stdout == in_process.stdout == b""
    assert through.stderr.replace(str(served).encode(), b"ROOT") == in_process.stderr.replace(str(alone).encode(), b"ROOT")
    _stop_writers(served)
    assert _served(served) == 1
    again = _remember(memctl_bin, served, "the disk has room again")  # no fault: in-process, a new writer
    assert again.returncode == 0


def test_a_writer_leaves_when_memctl_toml_changes(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    writer = _start_writer(root)
    (root / "memctl.toml").write_text("[dream]\nsimilarity = 90\n")
    assert writer.wait(timeout=60) == 0
    assert "exited: its socket file, memctl.toml or memctl's code changed" in _log(root)
    assert not _socket_file(root).exists()


# what a remember through the writer must not load: the settings, the entry format, SQLite,
# JSON, the scorer, and `socket` (its enum): the client sends and prints
NOT_ON_THE_CLIENT_PATH = ["socket", "enum", "json", "_json", "sqlite3", "_sqlite3", "rapidfuzz", "selectors",
                          "memctl.core.config", "memctl.core.fsutil", "memctl.longterm.entries",
                          "memctl.longterm.store", "memctl.cli.writes", "memctl.cli.render", "memctl.cli.lean"]


def test_a_remember_through_the_writer_loads_almost_nothing(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    _start_writer(root)
    python = str(Path(memctl_bin).with_name("python"))
    probe = ("import sys, runpy; sys.argv = ['memctl', '--root', %r, 'remember', 'the proxy listens on 7890', "
             "'--type', 'event']\n"
             "pinned = lambda: sorted({m for m in sys.modules for n in %r if m == n or m.startswith(n + '.')})\n"
             "for m in pinned():\n    del sys.modules[m]\n"
             "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
             "except SystemExit as exit:\n"
             "    sys.stderr.write('exit=%%s loaded=%%s' %% (exit.code, pinned()))\n"
             % (str(root), NOT_ON_THE_CLIENT_PATH))
    done = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(**RESIDENT), timeout=120)
    assert done.stderr.endswith(b"exit=0 loaded=[]"), done.stderr
    _stop_writers(root)
    assert _served(root) == 1


def test_a_writer_leaves_when_its_socket_file_is_removed(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    writer = _start_writer(root)
    _socket_file(root).unlink()
    assert writer.wait(timeout=60) == 0
    assert "exited: its socket file" in _log(root)


def _log(root: Path) -> str:
    log = root / ".memctl" / "writer.log"
    return log.read_text() if log.exists() else ""
