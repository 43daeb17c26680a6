"""`memctl archive` on the lean path (`memctl.cli.writes`, no typer or rich) answers exactly as the
full command line does: same stdout, stderr, exit codes, and the same files in L4."""

from __future__ import annotations

import random
import subprocess
from datetime import datetime
from pathlib import Path

from conftest import clean_env
from l4_helpers import assert_all_recoverable, make_folder

from memctl.core.fsutil import WriterLock
from memctl.l4 import loggen

NOW = "2099-06-01T09:00:00"  # later than the logs' mtimes, whenever the test runs


def _folder(base: Path):
    folder = make_folder(base)
    folder.add_log("model_responses_1.txt", loggen.format_a(datetime(2026, 4, 5, 9, 0), 3, random.Random(1)))
    folder.add_log("model_responses_2.txt", loggen.format_b(datetime(2026, 5, 5, 9, 0), 3, random.Random(2)))
    folder.add_log("model_responses_3.txt", loggen.format_b(datetime(2026, 5, 9, 9, 0), 2, random.Random(3)))
    folder.add_log("model_responses_4.txt", "", age_hours=1)
    return folder


def _script(folder):
    raw = str(folder.raw_dir)
    return [
        ["archive", raw, "--dry-run", "--keep-newest", "0"],
        ["archive", raw, "-n", "--json", "--min-age", "2h"],
        ["archive", raw, "--keep-newest", "abc"],
        ["archive", raw, "--min-age", "soon"],
        "lock",
        ["archive", raw, "--keep-newest", "0", "--wait", "0"],
        "unlock",
        ["archive", raw, "--keep-newest", "1", "--json"],
        ["archive", raw, "--keep-newest", "0"],
        ["archive", "--keep-newest", "0", "--quiet", raw],
        ["archive", str(folder.base / "nosuch"), "--quiet"],
    ]


def _play(memctl_bin: str, folder, full: bool) -> list:
    env = clean_env(MEMCTL_NOW=NOW, **({"MEMCTL_FULL_CLI": "1"} if full else {}))
    record = []
    lock = None
    for step, argv in enumerate(_script(folder)):
        if argv == "lock":
            lock = WriterLock(folder.root / ".memctl" / "lock").acquire()
            continue
        if argv == "unlock":
            lock.release()
            continue
        done = subprocess.run([memctl_bin, "--root", str(folder.root), *argv], capture_output=True, env=env,
                              timeout=120)
        base = str(folder.base).encode()
        record.append((step, done.returncode, done.stdout.replace(base, b"BASE"), done.stderr.replace(base, b"BASE")))
    for path in sorted(folder.l4.iterdir()):
        if path.is_file():
            record.append((path.name, path.read_bytes().replace(str(folder.base).encode(), b"BASE")))
    return record


def test_lean_and_full_archive_print_and_write_the_same(run, memctl_bin, tmp_path):
    lean_folder, full_folder = _folder(tmp_path / "lean"), _folder(tmp_path / "full")
    lean = _play(memctl_bin, lean_folder, full=False)
    full = _play(memctl_bin, full_folder, full=True)
    assert len(lean) == len(full)
    for mine, theirs in zip(lean, full):
        assert mine == theirs
    codes = [step[1] for step in full if len(step) == 4]
    assert {0, 2, 75} <= set(codes)  # the script met success, errors and a busy lock
    assert any(name == "2026-05.zip" for name, *_ in full)
    assert_all_recoverable(run, lean_folder)


def test_the_quiet_archive_imports_neither_typer_nor_rich(memctl_bin, tmp_path):
    folder = _folder(tmp_path)
    heavy = ["typer", "rich", "click", "memctl.cli.app", "memctl.cli.commands.l4"]
    python = str(Path(memctl_bin).with_name("python"))

    def probe(argv, **env):
        code = ("import sys, runpy; sys.argv = ['memctl', '--root', %r] + %r\n"
                "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
                "except SystemExit as exit:\n"
                "    sys.stderr.write('exit=%%s loaded=%%s' %% (exit.code, [m for m in %r if m in sys.modules]))\n"
                % (str(folder.root), argv, heavy))
        return subprocess.run([python, "-c", code], capture_output=True, env=clean_env(**env), timeout=120)

    for argv in (["archive", str(folder.raw_dir), "--dry-run", "--json"],
                 ["archive", str(folder.raw_dir), "--keep-newest", "0", "--quiet"]):
        done = probe(argv)
        assert done.stderr.endswith(b"exit=0 loaded=[]"), (argv, done.stderr)
    assert not [p for p in folder.raw_dir.iterdir() if p.stat().st_size]  # the quiet run archived them
    full = probe(["archive", str(folder.raw_dir), "--quiet"], MEMCTL_FULL_CLI="1")
    assert b"'typer'" in full.stderr  # the probe can see the full command line load

