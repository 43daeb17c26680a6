"""A throwaway PostgreSQL cluster for the suite, from the machine's own binaries.

`start_cluster(folder)` runs `initdb --no-sync` into a private folder, starts the server on
127.0.0.1 at a free port with its socket in that folder, and returns a `Cluster` (its DSN,
and `stop()`). As root, the server runs as the `postgres` user (PostgreSQL refuses root).
Where no server binaries or no psycopg can be found, `why_unavailable()` says why, so the
PostgreSQL half of the suite skips with that reason instead of silently.

A cluster's folder records the pid of the process that started it (`owner.pid`). A run that
was killed (SIGKILL, a CI timeout) never stops its server; the next `start_cluster` stops and
removes every cluster in the temp folder whose owner is gone.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def server_bin_dir() -> Path | None:
    """Where initdb, pg_ctl and postgres are: $MEMCTL_TEST_PG_BIN, PATH, or Debian's folders."""
    wanted = os.environ.get("MEMCTL_TEST_PG_BIN")
    candidates = [Path(wanted)] if wanted else []
    found = shutil.which("pg_ctl")
    if found:
        candidates.append(Path(os.path.realpath(found)).parent)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def why_unavailable() -> str | None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]' installs it)"
    if server_bin_dir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl, postgres): apt-get install postgresql"
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL will not start as root"
    return None


@dataclass
class Cluster:
    dsn: str
    data_dir: Path
    bin_dir: Path

    options: str = ""

    def stop(self) -> None:
        _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"],
                        check=False)

    def restart(self) -> None:
        """As after a crash: an immediate stop, then the same server started again."""
        self.stop()
        _start(self.bin_dir, self.data_dir, self.options)


@contextlib.contextmanager
def running_cluster(prefix: str = "memctl-pg-", settings: str = ""):
    """The DSN of a cluster in a temp folder, stopped and removed at the end (`settings`:
    more `-c name=value` options, which take the place of the suite's)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = start_cluster(folder, settings)
    try:
        yield cluster.dsn
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


OWNER_FILE = "owner.pid"


def start_cluster(folder: Path, settings: str = "") -> Cluster:
    bin_dir = server_bin_dir()
    assert bin_dir is not None, why_unavailable()
    reap_orphaned_clusters(bin_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    data_dir = folder / "data"
    _give_to_server_user(folder)
    _as_server_user([str(bin_dir / "initdb"), "--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8",
                     "--locale", "C", "-D", str(data_dir)])
    port = _free_port()
    options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={folder} " \
              "-c fsync=off -c max_connections=200 -c shared_buffers=64MB " + settings
    _start(bin_dir, data_dir, options)
    return Cluster(f"postgresql://postgres@127.0.0.1:{port}/postgres", data_dir, bin_dir, options)


def reap_orphaned_clusters(bin_dir: Path, parent: Path | None = None) -> list[Path]:
    """Stop and remove the clusters whose starting process no longer runs; returns their folders."""
    reaped = []
    for owner_file in Path(parent or tempfile.gettempdir()).glob(f"*/{OWNER_FILE}"):
        folder = owner_file.parent
        if (folder / "data").is_dir() and not _process_alive(owner_file):
            _as_server_user([str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-m", "immediate", "stop"],
                            check=False)
            shutil.rmtree(folder, ignore_errors=True)
            reaped.append(folder)
    return reaped


def _process_alive(owner_file: Path) -> bool:
    try:
        os.kill(int(owner_file.read_text()), 0)
    except (ValueError, OSError) as gone:
        return isinstance(gone, PermissionError)  # alive, owned by another user
    return True


def _start(bin_dir: Path, data_dir: Path, options: str) -> None:
    _as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-o", options,
                     "-l", str(data_dir.parent / "server.log"), "-w", "-t", "60", "start"])


def _server_user_prefix() -> list[str]:
    if os.name == "posix" and os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--"]
    return []


def _give_to_server_user(folder: Path) -> None:
    if _server_user_prefix():
        shutil.chown(folder, "postgres", "postgres")  # its parent must be traversable (the suite uses /tmp)


def _as_server_user(cmd: list[str], check: bool = True) -> None:
    subprocess.run(_server_user_prefix() + cmd, check=check, capture_output=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
