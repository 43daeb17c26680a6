"""Shared fixtures: real temporary memory roots and the installed `memctl` as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent.parent / "memctl" / "samples"
# GenericAgent's example L1/L2 (invented content), copied from ../shared/samples so the
# suite does not depend on where shared/ lies.
MEMORY_EXAMPLE = Path(__file__).resolve().parent / "data" / "memory_example"


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker more than the machine has cores. A quarter of a
    worker's time in this suite is spent waiting (on `memctl` subprocesses, on servers' timeouts,
    on PostgreSQL), not computing: on 2 cores 3 workers took it from 9:21 to 8:00 with every test
    passing, where 2 left the cores idle for that wait."""
    return (os.cpu_count() or 1) + 1


def pytest_sessionstart(session) -> None:
    """memctl's modules byte-compiled once, as pip does at install: with PYTHONDONTWRITEBYTECODE
    set (as on this project's machines) an editable install has no .pyc files, and every `memctl`
    subprocess of the suite would compile its ~80 modules from source again (~0.13 s of CPU each)."""
    import compileall

    import memctl

    compileall.compile_dir(Path(memctl.__file__).parent, quiet=2)


def find_shared() -> Path | None:
    """The shared/ folder beside the checkout (as CI lays it), else /work/shared."""
    for candidate in (Path(__file__).resolve().parent.parent.parent / "shared", Path("/work/shared")):
        if (candidate / "bench").is_dir():
            return candidate
    return None


def memctl_executable() -> str:
    beside_python = Path(sys.executable).with_name("memctl")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("memctl")
    if not found:
        pytest.fail("the memctl console script is not installed; run the README's test command")
    return found


def clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    # every write in its own process unless a test asks for the resident writer (test_resident.py):
    # a writer per temporary root would outlive its test by its idle time
    env.update({"NO_COLOR": "1", "LANG": "C.UTF-8", "PYTHONUTF8": "1", "MEMCTL_RESIDENT": "0"})
    env.update(overrides)
    return env


@pytest.fixture
def memctl_bin() -> str:
    return memctl_executable()


@pytest.fixture
def run(memctl_bin):
    """run(*args, root=..., env={...}, input=bytes) -> CompletedProcess with bytes output."""

    def _run(*args: str, root: Path | None = None, env: dict | None = None, input: bytes | None = None,
             cwd: Path | None = None, timeout: float = 120):
        cmd = [memctl_bin]
        if root is not None:
            cmd += ["--root", str(root)]
        cmd += [str(a) for a in args]
        env = {**SERVER_ROOTS.get(str(root), {}), **(env or {})}  # a root on the server gets its DSN
        return subprocess.run(cmd, capture_output=True, input=input, env=clean_env(**env),
                              cwd=cwd, timeout=timeout)

    return _run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "memory"
    return path


@pytest.fixture
def sample_logs() -> list[Path]:
    return sorted(SAMPLES.glob("model_responses_*.txt"))


@pytest.fixture(scope="session")
def forked(tmp_path_factory):
    """Like `run`, but each command is forked from one pre-imported interpreter (tests/forkserver.py):
    for fault matrices, which keep one real `memctl` subprocess per command beside it."""
    from forkserver import start

    server = start(tmp_path_factory)
    yield server
    server.close()


# --- PostgreSQL (issue #14): one throwaway cluster for the whole run, started on first use

@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL on 127.0.0.1 (tests/pgcluster.py), or a skip saying why there is none.
    $MEMCTL_TEST_PG_DSN points the suite at a server started elsewhere instead."""
    from pgcluster import running_cluster, why_unavailable

    given = os.environ.get("MEMCTL_TEST_PG_DSN")
    if given:
        yield given
        return
    reason = why_unavailable()
    if reason:
        pytest.skip(f"PostgreSQL half skipped: {reason}")
    with running_cluster() as dsn:
        yield dsn


@pytest.fixture
def pg_memory_name(request) -> str:
    """A schema of its own for each test: `[store] memory` names it."""
    import uuid

    return "t" + uuid.uuid4().hex[:12]


# --- both backends (issue #14): the same test on the files and on the server

SERVER_ROOTS: dict[str, dict[str, str]] = {}  # root -> the environment its commands need (the DSN)


class Backend:
    """Where a test's memory lives: "files" (the folder, .memctl/index.sqlite) or "postgres" (its
    entries and index in a fresh schema on the suite's server). `use(root)` after `memctl init`
    points the root at it and sets the schema up (`memctl init` again, on the server)."""

    def __init__(self, name: str, dsn: str = ""):
        self.name, self.dsn = name, dsn

    def __repr__(self) -> str:
        return self.name

    @property
    def env(self) -> dict[str, str]:
        return {"MEMCTL_PG_DSN": self.dsn} if self.dsn else {}

    def use(self, root: Path, memory: str = "") -> Path:
        if self.name == "postgres":
            import uuid

            memory = memory or "t" + uuid.uuid4().hex[:12]
            with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
                handle.write(f'\n[store]\nbackend = "postgres"\nmemory = "{memory}"\n')
            SERVER_ROOTS[str(root)] = self.env
            done = subprocess.run([memctl_executable(), "--root", str(root), "init"], capture_output=True,
                                  env=clean_env(**self.env))  # the memory's schema on the server
            assert done.returncode == 0, done.stderr.decode()
        return root


@pytest.fixture(scope="module", params=["files", "postgres"])
def backend(request) -> Backend:
    """Runs the test once per backend; the postgres half skips with the reason when no server
    can be had (see pg_server)."""
    if request.param == "files":
        return Backend("files")
    return Backend("postgres", request.getfixturevalue("pg_server"))
