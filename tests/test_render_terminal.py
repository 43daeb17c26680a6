"""What reaches a terminal: a stored escape sequence (a fetched page's, in an agent's session or
a fact) is shown as `?` there, never run by the terminal; piped, the bytes stay as they are."""

from __future__ import annotations

import os
import pty
import subprocess

from conftest import clean_env, memctl_executable

HOSTILE = "zebra \x1b]0;pwned\x07\x1b[2J fact"


def _on_a_terminal(root, *args: str) -> bytes:
    master, follower = pty.openpty()
    try:
        done = subprocess.run([memctl_executable(), "--root", str(root), *args], stdout=follower,
                              stderr=subprocess.PIPE, env=clean_env(), timeout=120)
    finally:
        os.close(follower)
    assert done.returncode == 0, done.stderr
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other side is closed and drained
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out


def test_control_characters_reach_a_terminal_as_question_marks(tmp_path, run):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    message = '{"role": "user", "content": "%s"}\n' % HOSTILE.replace("\x1b", "\\u001b").replace("\x07", "\\u0007")
    assert run("turn", "--session", "s1", root=root, input=message.encode()).returncode == 0
    assert run("remember", HOSTILE, "-t", "lesson", root=root).returncode == 0
    for args in (["compact", "--session", "s1"], ["compose", "zebra"], ["show", "--json", "L5:" + run(
            "search", "zebra", "--json", root=root).stdout.split(b'"id": "')[1].split(b'"')[0].decode()]):
        shown = _on_a_terminal(root, *args)
        assert b"zebra" in shown and b"\x1b]0;" not in shown and b"\x07" not in shown and b"\x1b[2J" not in shown, args
    piped = run("compact", "--session", "s1", root=root)
    assert HOSTILE.encode() in piped.stdout  # data for a program: as it was sent
