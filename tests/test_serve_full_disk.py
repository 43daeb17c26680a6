"""`memctl serve` on a full disk (issue #30): a files memory on a 4 MB tmpfs filled to the last
byte. A remember is answered with one line of JSON (507), never an exception's name; searches
keep answering; the service keeps serving; once space is freed the next remember is written;
nothing acknowledged is lost. Needs `mount -t tmpfs` (root, or a container that allows it):
skipped with the reason otherwise."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from serve_helpers import Server, add_key, l5_lines  # noqa: E402

EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b|Traceback|Errno")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 4 MB tmpfs mounted at a folder of tmp_path, unmounted at the end."""
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        pytest.skip("a full disk is made with Linux's mount -t tmpfs")
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.decode(errors='replace').strip()[:200]}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path) -> Path:
    """Writes zeros until the disk refuses one more byte; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * size)
    assert os.statvfs(folder).f_bavail == 0
    return filler


def test_a_full_disk_refuses_remembers_in_one_line_and_keeps_serving(run, small_disk):
    root = small_disk / "memory"
    assert run("init", root=root).returncode == 0
    key = add_key(run, root, "w", "write")
    acknowledged = []
    with Server(root) as server:
        for n in range(5):
            status, body = server.post("remember", {"text": f"deploy checklist item {n} before the disk filled"}, key)
            assert status == 200, body
            acknowledged.append(body["id"])
        assert server.post("search", {"query": "deploy checklist"}, key)[0] == 200  # the index built
        filler = fill(small_disk)

        refused = []
        for n in range(200):  # the first may fit in the pages the files already hold
            status, body = server.post("remember", {"text": f"budget review note {n} on a full disk " * 8}, key)
            if status == 200:
                acknowledged.append(body["id"])
                continue
            refused.append((status, body))
            if len(refused) == 3:
                break
        assert refused, "a full disk took every remember"
        for status, body in refused:
            assert status == 507, body
            message = body["error"]
            assert "\n" not in message and "no space" in message.lower() and not EXCEPTION_NAME.search(message), message

        status, found = server.post("search", {"query": "deploy checklist"}, key)
        assert status == 200 and found["hits"], found  # reads keep answering
        assert server.request("GET", "/health")[0] == 200
        status, entry = server.post("get", {"ref": acknowledged[0]}, key)
        assert status == 200, entry

        filler.unlink()  # space freed: the next remember is written, with no restart
        status, body = server.post("remember", {"text": "written once space was freed"}, key)
        assert status == 200, body
        acknowledged.append(body["id"])
        status, found = server.post("search", {"query": "space was freed"}, key)
        assert status == 200 and found["hits"], found
    assert server.process.returncode is not None
    ids = Counter(entry["id"] for entry in l5_lines(root))
    for entry_id in acknowledged:
        assert ids[entry_id] == 1, f"acknowledged write lost or doubled: {entry_id}"
    texts = Counter(entry["text"] for entry in l5_lines(root))
    assert all(count == 1 for count in texts.values())  # a refused one is there once or not at all
