"""A GenericAgent checkout built from GenericAgent's own files, for tests that use its code
as the oracle: its archiver (`compress_session.py`), its scheduler's L4 path, its plugin
loader. Nothing of GenericAgent is copied into memctl; the files are laid into a temp folder
exactly as shipped (0644) and run from there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

SHARED_GA = Path("/work/shared/samples/genericagent")
for _candidate in (Path(__file__).resolve().parent.parent.parent / "shared" / "samples" / "genericagent", SHARED_GA):
    if (_candidate / "upstream").is_dir():
        SHARED_GA = _candidate
        break
UPSTREAM = SHARED_GA / "upstream"
REAL_WRITER = SHARED_GA / "real-writer"
UPSTREAM_FILES = (
    "memory/L4_raw_sessions/compress_session.py",
    "memory/memory_management_sop.md",
    "reflect/scheduler.py",
    "plugins/__init__.py",
    "plugins/hooks.py",
    "plugins/project_mode.py",
    "agent_loop.py",
)
_STAMP = re.compile(rb"(?m)^(=== (?:Prompt|Response) === )(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def real_writer_logs() -> dict[str, datetime]:
    """Each real-writer log by name, with the mtime INDEX.txt gives it (UTC)."""
    logs = {}
    for line in (REAL_WRITER / "INDEX.txt").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith("model_responses_"):
            logs[parts[0]] = datetime.fromisoformat(parts[2].replace("Z", "+00:00"))
    return logs


def shifted(data: bytes, days: int) -> bytes:
    """The same log `days` earlier: every marker timestamp moved (a distinct session)."""
    def move(match: re.Match) -> bytes:
        moment = datetime.strptime(match.group(2).decode(), "%Y-%m-%d %H:%M:%S") + timedelta(days=days)
        return match.group(1) + moment.strftime("%Y-%m-%d %H:%M:%S").encode()
    return _STAMP.sub(move, data)


class Checkout:
    def __init__(self, base: Path):
        self.base = base

    @property
    def memory(self) -> Path:
        return self.base / "memory"

    @property
    def l4(self) -> Path:
        return self.memory / "L4_raw_sessions"

    @property
    def raw_dir(self) -> Path:
        return self.base / "temp" / "model_responses"

    def add_log(self, name: str, data: bytes, mtime: datetime) -> Path:
        path = self.raw_dir / name
        path.write_bytes(data)
        os.chmod(path, 0o644)
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
        return path

    def add_real_writer_logs(self, days: int = 0, prefix: str = "") -> dict[str, str]:
        """The real-writer logs, moved `days` (timestamps and mtimes); name -> sha256."""
        added = {}
        for name, mtime in real_writer_logs().items():
            data = shifted((REAL_WRITER / name).read_bytes(), days) if days else (REAL_WRITER / name).read_bytes()
            target = name.replace("model_responses_", f"model_responses_{prefix}")
            self.add_log(target, data, mtime + timedelta(days=days))
            added[target] = hashlib.sha256(data).hexdigest()
        return added

    def raw_hashes(self) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in self.raw_dir.glob("model_responses_*.txt")}


def make_checkout(tmp_path: Path) -> Checkout:
    """GenericAgent's files as shipped (0644 under umask 022) and its default Chinese L1."""
    checkout = Checkout(tmp_path / "GenericAgent")
    for relative in UPSTREAM_FILES:
        target = checkout.base / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(UPSTREAM / relative, target)
    (checkout.memory / "global_mem_insight.txt").write_bytes(
        (UPSTREAM / "assets" / "global_mem_insight_template.txt").read_bytes())
    (checkout.memory / "global_mem.txt").write_text("## [ENV]\n- os: linux\n", encoding="utf-8")
    checkout.raw_dir.mkdir(parents=True)
    for path in [checkout.base, *checkout.base.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return checkout


def load_upstream_archiver(folder: Path, name: str = "ga_compress_session"):
    """GenericAgent's own compress_session.py, imported from a private copy in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "compress_session.py"
    shutil.copyfile(UPSTREAM / "memory/L4_raw_sessions/compress_session.py", path)
    spec = importlib.util.spec_from_file_location(f"{name}_{abs(hash(str(folder)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upstream_name(archiver, log: Path, scratch: Path) -> str:
    """The name GenericAgent's compress_session gives a log. Its size gate (it skips a session
    under 4,500 bytes) is lifted by handing it a large stand-in compressed text; the name is
    still computed by its own code from the log's own text."""
    archiver._detect_format, archiver._compress_raw = (lambda text: "raw"), (lambda text: "x" * 5000)
    scratch.mkdir(parents=True, exist_ok=True)
    destination, _ = archiver.compress_session(str(log), str(scratch))
    return Path(destination).stem


def run_scheduler_l4_path(checkout: Checkout, env: dict[str, str]) -> subprocess.CompletedProcess:
    """GenericAgent's own `reflect/scheduler.py` imported and its `check()` called: its L4
    block imports memory/L4_raw_sessions/compress_session and runs batch_process(raw, False).
    The module binds a fixed port at import unless `_lock` exists; a builtin `_lock` stands in
    so tests never take the port."""
    script = (
        "import builtins, sys\n"
        "builtins._lock = None\n"
        "sys.path.insert(0, 'reflect')\n"
        "import scheduler\n"
        "scheduler.check()\n"
    )
    return subprocess.run([sys.executable, "-c", script], cwd=checkout.base, capture_output=True,
                          env=env, timeout=300)


def archived_by_genericagent(tmp_path: Path, env: dict[str, str]) -> Checkout:
    """A checkout with the real-writer logs of two months, which GenericAgent's own 12-hour job
    has archived (its zips and all_histories.txt; it keeps the 10 newest raw logs)."""
    checkout = make_checkout(tmp_path)
    for days, prefix in ((-60, ""), (-30, "1")):
        checkout.add_real_writer_logs(days=days, prefix=prefix)
    done = run_scheduler_l4_path(checkout, env)
    assert done.returncode == 0 and b"[L4 cron]" in done.stdout, done.stderr
    return checkout
