"""The opt-in `memctl serve` unit of `schedule install --serve PORT`: systemd, launchd, Windows."""

from __future__ import annotations

import os
import plistlib
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from memctl.ops import schedule
from tests.test_schedule import SYSTEMD_ANALYZE, _unit_command, _verify, needs_systemd_analyze


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_without_serve_the_install_is_unchanged(run, root, tmp_path):
    assert run("init", root=root).returncode == 0
    done = run("schedule", "install", "--systemd", "--unit-dir", tmp_path / "units", root=root)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "units" / "memctl-serve.service").exists()


def test_serve_writes_a_restarting_loopback_service(run, root, tmp_path, memctl_bin):
    assert run("init", root=root).returncode == 0
    units = tmp_path / "units"
    done = run("schedule", "install", "--systemd", "--serve", "8765", "--unit-dir", units, root=root)
    assert done.returncode == 0, done.stderr
    text = (units / "memctl-serve.service").read_text()
    assert f"ExecStart={memctl_bin} serve --http 127.0.0.1:8765\n" in text
    assert "Restart=on-failure\n" in text and "NoNewPrivileges=yes\n" in text
    assert "[Install]\nWantedBy=default.target\n" in text
    assert b"systemctl --user enable --now memctl-serve.service" in done.stderr
    assert b"http://127.0.0.1:8765/health" in done.stderr
    again = run("schedule", "install", "--systemd", "--serve", "8765", "--unit-dir", units, root=root)
    assert again.stdout.decode().count("unchanged") == 5


@needs_systemd_analyze
def test_the_serve_unit_passes_verify(run, root, tmp_path):
    run("init", root=root)
    units = tmp_path / "units"
    assert run("schedule", "install", "--systemd", "--serve", "8765", "--unit-dir", units, root=root).returncode == 0
    result = _verify(units, tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("port", ["0", "65536", "-1", "abc", "1e3"])
def test_a_bad_port_is_refused_in_one_line(run, root, tmp_path, port):
    run("init", root=root)
    result = run("schedule", "install", "--systemd", "--serve", port, "--unit-dir", tmp_path / "u", root=root)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr and not (tmp_path / "u").exists()


def test_cron_cannot_keep_a_service_running(run, root):
    run("init", root=root)
    result = run("schedule", "install", "--cron", "--serve", "8765", root=root)
    assert result.returncode == 2 and b"cron cannot keep" in result.stderr and not result.stdout


def test_launchd_and_windows_serve_units(run, root, tmp_path, memctl_bin):
    run("init", root=root)
    for flag in ("--launchd", "--windows"):
        result = run("schedule", "install", flag, "--serve", "8765", "--unit-dir", tmp_path / flag, root=root)
        assert result.returncode == 0, result.stderr
        assert b"http://127.0.0.1:8765/health" in result.stderr
    plist = plistlib.loads((tmp_path / "--launchd" / "io.memctl.serve.plist").read_bytes())
    assert plist["ProgramArguments"] == [memctl_bin, "serve", "--http", "127.0.0.1:8765"]
    assert plist["KeepAlive"] == {"SuccessfulExit": False} and plist["EnvironmentVariables"]["MEMCTL_HOME"] == str(root)
    task = ET.parse(tmp_path / "--windows" / "memctl-serve.xml").getroot()
    ns = {"t": schedule.TASK_NS}
    assert task.find("t:Triggers/t:LogonTrigger", ns) is not None
    assert task.find("t:Settings/t:RestartOnFailure", ns) is not None
    assert task.find("t:Settings/t:ExecutionTimeLimit", ns).text == "PT0S"
    assert "serve --http 127.0.0.1:8765" in task.find("t:Actions/t:Exec/t:Arguments", ns).text


def test_the_units_command_serves_health(run, root, tmp_path, memctl_bin):
    """The ExecStart the unit names, run as systemd would, answers GET /health."""
    assert run("init", root=root).returncode == 0
    port = _free_port()
    argv, env = _unit_command(schedule.serve_systemd_unit_for(port, [memctl_bin], root).text)
    server = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        status, deadline = None, time.monotonic() + 60
        while status is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    status = response.status
            except OSError:
                time.sleep(0.2)
        assert status == 200, server.stderr.read1() if server.poll() is not None else "no answer"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
