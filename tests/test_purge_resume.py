"""`forget --purge` killed at every file operation (MEMCTL_FAULT_AFTER), by id and by
--match, with zips present, then rerun: the string is in no byte under the root (zip
members decoded), its tombstone keeps the real hash, verify exits 0. And with an unrelated
damaged zip: everything else is scrubbed, the purge is reported pending, and it completes
once that zip is removed."""

from __future__ import annotations

import hashlib
import io
import json
import random
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from durability_helpers import ENV, fresh_copy, l6
from l4_helpers import make_folder
from memctl.l4 import loggen
from memctl.l4.codec import HEADER, decode_stream

SECRET = "hunter2-purple-elephant-vault"
FACT = f"The vault phrase is {SECRET}"  # by id, a purge erases the entry's text; by --match, the string
MAX_POINTS = 60


def _decoded(data: bytes) -> bytes:
    if not data.startswith(HEADER):
        return data
    out = bytearray()
    decode_stream(io.BytesIO(data), out.extend)
    return bytes(out)


def leaks(root: Path, needle: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Every file (and zip member, decoded) under root that still holds the string."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or any(part in str(path) for part in skip):
            continue
        data = path.read_bytes()
        if needle.encode() in data:
            found.append(str(path))
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    if needle.encode() in _decoded(archive.read(name)):
                        found.append(f"{path}:{name}")
    return found


def _remember(run, root, text, *args) -> str:
    done = run("remember", text, "-t", *args, root=root)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


@pytest.fixture(scope="module")
def base(tmp_path_factory, forked):
    """A root with the string in L5, L6, the dream log, history, two zips' sessions and the index."""
    run = forked
    folder = make_folder(tmp_path_factory.mktemp("purge"))
    rng = random.Random(7)
    folder.add_log("model_responses_1.txt", loggen.format_b(datetime(2026, 3, 5, 9, 0), 6, rng, 200,
                                                            request=f"note: The vault phrase is {SECRET}"))
    folder.add_log("model_responses_2.txt", loggen.format_a(datetime(2026, 4, 6, 9, 0), 3, rng, 200,
                                                            request=f"again: {SECRET}"))
    folder.add_log("model_responses_3.txt", loggen.format_a(datetime(2026, 4, 7, 9, 0), 3, rng, 200))
    root = folder.root
    root.chmod(0o700)
    assert run("archive", folder.raw_dir, "--keep-newest", "0", root=root).returncode == 0
    secret_id = _remember(run, root, f"The vault phrase is {SECRET}", "lesson")
    _remember(run, root, "the vault lives on bk-07", "lesson")
    assert run("forget", secret_id, root=root).returncode == 0
    assert run("restore", secret_id, root=root).returncode == 0
    assert run("search", "vault phrase", root=root).returncode == 0  # the index holds it too
    assert len(list((root / "L4_raw_sessions").glob("*.zip"))) == 2
    assert leaks(root, SECRET) and leaks(root, FACT)
    return {"root": root, "id": secret_id, "hash": "sha256:" + hashlib.sha256(
        f"The vault phrase is {SECRET}".encode()).hexdigest()}


def _erased(run, root: Path, base: dict, needle: str) -> None:
    assert leaks(root, needle) == []
    tombstones = [e for e in l6(root) if e["id"] == base["id"]]
    assert [t["sha256"] for t in tombstones] == [base["hash"]]  # one tombstone, the real hash
    assert not list(root.glob(".memctl/journal/*.json"))  # nothing left pending, the strings gone with it
    verified = run("verify", root=root)
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
    again = run("remember", f"The vault phrase is {SECRET}", "-t", "lesson", root=root, env=ENV)
    assert again.returncode == 2 and b"purged" in again.stderr  # the deletion sticks


@pytest.mark.parametrize("how", ["id", "match"])
def test_a_purge_killed_at_every_file_operation_completes_on_rerun(run, forked, tmp_path, base, how):
    args = ["forget", "--purge", "--yes"] + ([base["id"]] if how == "id" else ["--match", SECRET])
    needle = FACT if how == "id" else SECRET
    kills = 0
    for point in range(1, MAX_POINTS + 1):
        # the first kill goes through the installed `memctl`, the others through children forked
        # from an interpreter that has imported memctl already (tests/forkserver.py)
        runner = run if point == 1 else forked
        root = fresh_copy(base["root"], tmp_path / f"kill-{point}" / "memory")
        hit = runner(*args, root=root, env={**ENV, "MEMCTL_FAULT_AFTER": str(point)})
        if hit.returncode == 0:
            break
        assert hit.returncode == -9, (point, hit.stderr)
        kills += 1
        rerun = runner(*args, root=root, env=ENV)
        assert rerun.returncode == 0, (point, rerun.stderr)
        _erased(runner, root, base, needle)
    else:
        pytest.fail("the purge never finished")
    _erased(run, root, base, needle)  # the uncut run too
    assert kills >= 8, f"only {kills} kill points"
    print(f"\npurge by {how}: killed at {kills} file operations, each rerun erased the string everywhere")


def test_a_damaged_zip_leaves_the_purge_pending_and_everything_else_scrubbed(run, tmp_path, base):
    root = fresh_copy(base["root"], tmp_path / "memory")
    damaged = root / "L4_raw_sessions" / "2025-01.zip"
    damaged.write_bytes(b"PK\x03\x04 this is not a zip any more")
    done = run("forget", "--purge", "--yes", base["id"], root=root, env=ENV)
    assert done.returncode == 3, done.stderr
    assert b"pending" in done.stderr and b"2025-01.zip" in done.stderr
    # everything but the damaged zip and the purge's own journal is clean
    assert leaks(root, FACT, skip=("2025-01.zip", ".memctl/journal")) == []
    [journal] = (root / ".memctl" / "journal").glob("purge-*.json")
    assert journal.stat().st_mode & 0o777 == 0o600
    other = run("remember", "the backup runs at 02:00", "-t", "event", root=root, env=ENV)
    assert other.returncode == 0  # other writers are not blocked by a pending purge
    still = run("verify", "--repair", root=root)
    assert b"pending" in still.stderr
    damaged.unlink()
    finished = run("forget", "--purge", "--yes", base["id"], root=root, env=ENV)
    assert finished.returncode == 0, finished.stderr
    assert b"completed" in finished.stderr
    assert not journal.exists()
    _erased(run, root, base, FACT)
