"""Hostile local input to the resident writer that only it meets (issue #32): something that is
not a socket at the socket's path, a --wait no clock can wait, a fact past the size limit, a
writer out of file descriptors. Each is refused alone: the writer keeps serving, and the next
`remember` through it succeeds. The hostile messages and connection hogs every long-lived
process meets are tests/test_hostile_services.py's.

Every wait on the writer is bounded by a socket timeout; nothing asserts how long anything took.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import clean_env
from test_hostile_services import unix_connection, writer_log
from test_resident import ID_LINE, RESIDENT, _init, _l5_ids, _remember, _serving, _socket_file, _start_writer, _stop_writers, roots  # noqa: F401

from memctl.cli import resident
from memctl.residents import local_socket

pytestmark = pytest.mark.skipif(not local_socket.usable(), reason="needs Unix sockets with SO_PEERCRED")

BOUND = 60.0  # seconds any one wait on the writer may take before the test fails


def _still_serves(memctl_bin: str, root, text: str) -> None:
    done = _remember(memctl_bin, root, text, "--wait", "10")
    assert done.returncode == 0 and ID_LINE.match(done.stdout) and done.stderr == b"", done
    assert done.stdout.decode().strip() in _l5_ids(root)


# --- not a socket at the socket's path


@pytest.mark.parametrize("kind", ["folder", "file", "symlink"])
def test_something_else_at_the_socket_path_is_left_alone_and_no_writer_is_started(memctl_bin, roots, tmp_path, kind):
    root = _init(memctl_bin, roots())
    place = _socket_file(root)
    if kind == "folder":
        place.mkdir()
        (place / "keep").write_text("someone's")
    elif kind == "file":
        place.write_text("someone's")
    else:
        place.symlink_to(tmp_path / "elsewhere")
    for n in range(2):
        done = _remember(memctl_bin, root, f"the proxy listens on 789{n}")
        assert done.returncode == 0 and ID_LINE.match(done.stdout), done
        lines = done.stderr.decode().splitlines()
        assert lines == [f"warning: {place} is not a socket; remove it to let memctl serve this root"], lines
    assert not (root / ".memctl" / resident.LOCK_NAME).exists()  # no writer was spawned to die
    assert len(_l5_ids(root)) == 2
    assert os.path.lexists(place) and not place.is_socket()
    _clear(place)


def test_a_writer_started_with_a_folder_at_its_socket_path_exits_with_a_line_in_its_log(memctl_bin, roots):
    root = _init(memctl_bin, roots())
    _socket_file(root).mkdir()
    writer = subprocess.run([sys.executable, "-P", "-m", "memctl.residents.writer", str(root), "-"],
                            env=clean_env(**RESIDENT), capture_output=True, timeout=BOUND)
    assert writer.returncode == 0 and writer.stderr == b"", writer
    assert _socket_file(root).is_dir()
    assert f"exited: {_socket_file(root)} is not a socket" in writer_log(root)
    _clear(_socket_file(root))


def _clear(place) -> None:
    """The test's own planted path gone, for the fixture's stop of the writers."""
    shutil.rmtree(place) if place.is_dir() and not place.is_symlink() else place.unlink()


# --- a --wait no clock can wait


@pytest.mark.parametrize("wait", ["inf", "nan", "1e400", "-inf", "86401", "-1e300"])
@pytest.mark.parametrize("path", ["resident", "in-process", "full command line"])
def test_a_wait_that_is_not_a_number_of_seconds_is_one_line_exit_2(memctl_bin, roots, wait, path):
    root = _init(memctl_bin, roots())
    env = {"resident": {}, "in-process": {"MEMCTL_RESIDENT": "0"},
           "full command line": {"MEMCTL_RESIDENT": "0", "MEMCTL_FULL_CLI": "1"}}[path]
    if path == "resident":
        _start_writer(root)
    done = _remember(memctl_bin, root, "the proxy listens on 7890", f"--wait={wait}", env=env)
    assert done.returncode == 2, done
    assert done.stderr.decode().splitlines() == [
        f"memctl: error: --wait must be a number of seconds up to 86400, got {float(wait)}"], done.stderr
    assert done.stdout == b"" and _l5_ids(root) == []
    if path == "resident":
        assert _serving(root)
        _still_serves(memctl_bin, root, "the cache lives on n3")


@pytest.mark.parametrize("args", [["forget", "m0123456789ab"], ["restore", "m0123456789ab"], ["archive"]])
def test_every_lean_write_refuses_an_endless_wait(memctl_bin, roots, args):
    root = _init(memctl_bin, roots())
    done = subprocess.run([memctl_bin, "--root", str(root), *args, "--wait", "inf"], capture_output=True,
                          env=clean_env(), timeout=BOUND)
    assert done.returncode == 2, done
    assert done.stderr.decode().splitlines() == ["memctl: error: --wait must be a number of seconds up to 86400, got inf"]


# --- a fact past the size limit


TOO_LONG = ("memctl: error: the text is more than {limit} bytes, the most one fact holds ([writes] max_fact_bytes); "
            "keep a long document as a file in the memory folder and remember where it is")
PATHS = {"resident": {}, "in-process": {"MEMCTL_RESIDENT": "0"},
         "full command line": {"MEMCTL_RESIDENT": "0", "MEMCTL_FULL_CLI": "1"}}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_fact_past_the_size_limit_is_one_line_exit_2_on_every_path(memctl_bin, roots, path):
    """A 6 MB fact took 12 s through the writer (49 s in-process); now a fact holds 64 KiB."""
    root = _init(memctl_bin, roots())
    if path == "resident":
        _start_writer(root)
    big = ("the proxy listens on 7890 " * 250_000).encode()  # 6.5 MB, on stdin
    multibyte = "部署" * 600_000  # 3.6 MB of 3-byte characters: the stdin read stops past 1 MiB characters
    past_a_message = "😀" * 1_100_000  # 4-byte characters: past what a request may carry, never sent
    for text in (big, multibyte.encode(), past_a_message.encode(), b"x" * 65537):
        done = _remember(memctl_bin, root, "-", env=PATHS[path], input=text)
        assert done.returncode == 2, done
        assert done.stderr.decode().splitlines() == [TOO_LONG.format(limit=65536)]
    at_the_limit = _remember(memctl_bin, root, "-", env=PATHS[path], input=("é" * 32768).encode())
    assert at_the_limit.returncode == 0 and ID_LINE.match(at_the_limit.stdout), at_the_limit
    assert len(_l5_ids(root)) == 1
    if path == "resident":
        assert _serving(root)


def test_the_size_limit_is_a_setting_shown_by_rules_and_bounded(run, memctl_bin, roots):
    root = _init(memctl_bin, roots())
    (root / "memctl.toml").write_text("[writes]\nmax_fact_bytes = 2048\n")
    refused = _remember(memctl_bin, root, "y" * 2049, env={"MEMCTL_RESIDENT": "0"})
    assert refused.returncode == 2 and refused.stderr.decode().splitlines() == [TOO_LONG.format(limit=2048)]
    assert _remember(memctl_bin, root, "y" * 2048, env={"MEMCTL_RESIDENT": "0"}).returncode == 0
    shown = run("rules", root=root)
    assert "writes.max_fact_bytes = 2048  [" in shown.stdout.decode()
    (root / "memctl.toml").write_text("[writes]\nmax_fact_bytes = 2000000\n")
    past = run("rules", root=root)
    assert past.returncode == 2 and "writes.max_fact_bytes must be between 1024 and 1048576" in past.stderr.decode()


def test_a_writer_out_of_file_descriptors_keeps_serving(memctl_bin, roots):
    """A descriptor limit below the connections it is sent (EMFILE at accept ended the writer)."""
    import resource

    root = _init(memctl_bin, roots())
    writer = _start_writer(root, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40)))
    try:
        flood = [unix_connection(str(_socket_file(root))) for _ in range(60)]  # past its 40 descriptors: some wait in the backlog
        _still_serves(memctl_bin, root, "the cache lives on n3")  # once the overdue ones are dropped
        assert writer.poll() is None
        for connection in flood:
            connection.close()
    finally:
        _stop_writers(root)
    assert writer.wait(timeout=BOUND) == 0, writer.stderr.read()
    assert "\t1 requests in 1 batches\t" in writer_log(root)
