"""`memctl` commands forked from one pre-imported interpreter, for the fault matrices.

A fault matrix runs a command hundreds of times: each `memctl` process spends ~0.5 s of CPU
starting Python and importing typer, rich and the command modules before its first write. The
server below imports memctl's modules once, runs no command itself, and forks one child per
command. The child is a real process with its own pid, file descriptors, cwd and
environment: it runs the console script's own entry (`sys.exit(memctl.entry.main())`), a fault
SIGKILLs it for real (no cleanup, no atexit), and on exit the interpreter shuts down as a
`memctl` process does (atexit handlers, threads joined, streams flushed). What it skips is the
exec and the imports; the fault matrices keep one real `memctl` subprocess per command.

`MEMCTL_TESTS_EXEC=1` in the test process's environment makes every forked run a real
`memctl` subprocess instead (the slow way, to compare).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import clean_env, memctl_executable

SERVER = r"""
import importlib, json, os, pkgutil, signal, sys

import memctl, memctl.entry

# What the commands import, at once or on first use (typer imports pydantic when it parses a
# command's options); every child starts from here.
LAZY = ["typer._adapters", "rich.console", "rich.markup", "rich.table", "dateutil.parser", "sqlite3", "tomllib",
        "zipfile", "tempfile", "subprocess", "jieba", "rjieba"]
for module in [m.name for m in pkgutil.walk_packages(memctl.__path__, "memctl.")] + LAZY:
    if not module.endswith("__main__"):
        try:
            importlib.import_module(module)
        except ImportError:  # an optional extra ([semantic]) that is not installed
            pass


def become(request):
    # The standard streams point at the request's files, opened as CPython opens them in UTF-8 mode.
    for fd, path, flags in ((0, request["stdin"], os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, "r", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["memctl", *request["args"]]
    signal.alarm(request["timeout"])  # a hung child dies of SIGALRM (exit -14), as a timeout


def serve():
    # One request a line, one exit status a line; the child leaves the loop to run its command.
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            become(request)
            return True
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
    return False


if serve():
    sys.exit(memctl.entry.main())
"""


class ForkServer:
    """run(*args, root=..., env=..., input=..., cwd=..., timeout=...) like conftest's `run`."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.memctl = memctl_executable()
        python = Path(self.memctl).with_name("python")
        self.exec_each = os.environ.get("MEMCTL_TESTS_EXEC") == "1"
        self.process = None if self.exec_each else subprocess.Popen(
            [str(python), "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env(),
            cwd=workdir)
        self.count = 0

    def __call__(self, *args: str, root: Path | None = None, env: dict | None = None, input: bytes | None = None,
                 cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = (["--root", str(root)] if root is not None else []) + [str(a) for a in args]
        if self.exec_each:
            return subprocess.run([self.memctl, *argv], capture_output=True, input=input,
                                  env=clean_env(**(env or {})), cwd=cwd, timeout=timeout)
        self.count += 1
        files = {name: self.workdir / f"{self.count}.{name}" for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_bytes(input or b"")
        files["stdout"].write_bytes(b"")
        files["stderr"].write_bytes(b"")
        request = {"args": argv, "env": clean_env(**(env or {})), "cwd": str(cwd or os.getcwd()),
                   "timeout": int(timeout), **{name: str(path) for name, path in files.items()}}
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        status = self.process.stdout.readline()
        assert status, "the fork server died"
        outputs = {name: files[name].read_bytes() for name in ("stdout", "stderr")}
        for path in files.values():
            path.unlink()
        return subprocess.CompletedProcess(argv, int(status), outputs["stdout"], outputs["stderr"])

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


def start(tmp_path_factory) -> ForkServer:
    return ForkServer(tmp_path_factory.mktemp("forkserver"))

