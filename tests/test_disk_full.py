"""A real full disk: a small tmpfs holds the memory root and is filled to the last byte.

`remember`, `import`, `dream`, `index rebuild` and `archive` each exit 2 with one line and
leave L5, L6 and the dream log byte for byte as they were; once space is freed the same
commands succeed, and every entry acknowledged before is still there exactly once.
Skipped (with the reason) where mounting a tmpfs is not permitted.
"""

from __future__ import annotations

import errno
import json
import os
import random
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from durability_helpers import every_line_parses, one_line, present_once, repaired_and_verified
from memctl.l4 import loggen

DISK_BYTES = 4 << 20
PAGE = 4096
# longer than a page: an append cannot fit in the slack of a file's last page
BIG_FACT = "the disk-full drill: " + " ".join(f"step{i}" for i in range(900))


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700", "tmpfs", str(mount_point)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip() or done.returncode}); "
                    "the injector in test_torn_writes.py covers ENOSPC instead")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write a filler file until the file system refuses another byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 64 << 10, PAGE, 1):
            while True:
                try:
                    if os.write(fd, b"\0" * size) < size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def _stores(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() if (root / name).exists() else b""
            for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")}


def test_a_full_disk_fails_each_command_cleanly_and_loses_nothing(run, small_disk):
    root = small_disk / "memory"
    raw_dir = small_disk / "temp" / "model_responses"
    raw_dir.mkdir(parents=True)
    assert run("init", root=root).returncode == 0
    ack = {}
    for text in ("the staging host is bk-07", "deploys go through jenkins", "the wiki moved to notion"):
        done = run("remember", text, "-t", "lesson", root=root)
        assert done.returncode == 0, done.stderr
        ack[done.stdout.decode().strip()] = text
    items = small_disk / "items.jsonl"
    items.write_text("".join(json.dumps({"text": f"{BIG_FACT} item {i}"}) + "\n" for i in range(3)))
    rng = random.Random(3)
    log = raw_dir / "model_responses_1.txt"
    log.write_text(loggen.format_a(datetime(2026, 4, 6, 9, 0), 40, rng, 400))
    old = log.stat().st_mtime - 3 * 86400
    os.utime(log, (old, old))
    assert run("search", "staging", root=root).returncode == 0  # an index to rebuild

    commands = {
        "remember": ["remember", BIG_FACT, "-t", "event"],
        "import": ["import", str(items)],
        "dream": ["dream", "--force"],
        "index rebuild": ["index", "rebuild"],
        "archive": ["archive", str(raw_dir), "--keep-newest", "0"],
    }
    filler = fill(small_disk)
    before = _stores(root)
    for name, args in commands.items():
        refused = run(*args, root=root)
        assert refused.returncode == 2, (name, refused.returncode, refused.stdout, refused.stderr)
        if name == "archive":
            # memctl/l4 reports per raw file, then its summary line (two lines; its wording is
            # the L4 rewrite's to fix: "cannot read: [Errno 28]")
            message = refused.stderr.decode()
            assert "Traceback" not in message and message.count("\n") <= 2, message
        else:
            message = one_line(refused.stderr)
        assert "no space left" in message.lower(), (name, message)
        print(f"\n{name}: exit 2: {message.strip()}")
        assert _stores(root) == before, f"{name} changed a store while failing"
    assert log.exists()  # the raw log was not deleted by the failed archive

    filler.unlink()
    for name, args in commands.items():
        done = run(*args, root=root)
        assert done.returncode == 0, (name, done.stderr)
    repaired_and_verified(run, root)
    every_line_parses(root)
    new = {e["id"]: e["text"] for e in _lines(root / "long_term.jsonl") if e["text"] == BIG_FACT}
    assert len(new) == 1
    imported = [e for e in _lines(root / "archive.jsonl") if e.get("reason") == "imported"]
    assert len(imported) == 3
    checked = present_once(root, {**ack, **new})
    assert list((root / "L4_raw_sessions").glob("*.zip")) and not log.exists()
    print(f"\ndisk full: {len(commands)} commands refused with one line, {checked + len(imported)} entries "
          "checked after space was freed, lost 0")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
