"""Planted symlinks: at every path memctl writes under the root and `.memctl/`, a link to a
file (or folder) outside the root. The command that writes there must refuse it — exit 2
with one line naming the path, or carry on without that path (a warning) — and no byte
outside the root may change (the sentinel is hashed before and after)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES

RAW_LOG = "model_responses_100001.txt"


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def template(tmp_path_factory, memctl_bin_module):
    """A memory with L5 entries, a reference, an L4 zip and a task; a raw log left to archive."""
    import subprocess

    from conftest import clean_env

    base = tmp_path_factory.mktemp("links") / "ga"
    root = base / "memory"

    def run(*args, input=None):
        done = subprocess.run([memctl_bin_module, "--root", str(root), *args], capture_output=True,
                              env=clean_env(), input=input)
        assert done.returncode == 0, (args, done.stderr)
        return done

    run("init")
    text = (root / "memctl.toml").read_text()
    (root / "memctl.toml").write_text(text.replace("[dream]\n", "[dream]\nauto_trigger_entries = 1\n", 1))
    first = run("remember", "--type", "lesson", "the proxy listens on port 7890").stdout.decode().strip()
    run("remember", "--type", "lesson", "backups run at night on the nas")
    run("search", "proxy")
    run("task", "save", "t1", input=b'{"goal": "tidy the notes"}')
    (base / "temp" / "model_responses").mkdir(parents=True)
    logs = sorted(SAMPLES.glob("model_responses_*.txt"))
    shutil.copyfile(logs[0], base / "temp" / "model_responses" / "model_responses_100000.txt")
    run("archive", "--min-age", "0s", "--keep-newest", "0")
    shutil.copyfile(logs[1], base / "temp" / "model_responses" / RAW_LOG)
    # the automatic dream the remembers started may have folded the search's reference by now
    # (a fast remember makes that likely): wait for it, then leave a reference unfolded, so
    # that a case's dream has an offset to write
    _wait_for_background_dreams(root)
    run("search", "proxy")
    return base, first


def _wait_for_background_dreams(root: Path, seconds: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(
            b"dream" in cmdline and str(root).encode() in cmdline for cmdline in _command_lines()):
        time.sleep(0.1)


def _command_lines() -> list[bytes]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            found.append((proc / "cmdline").read_bytes())
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def memctl_bin_module():
    from conftest import memctl_executable

    return memctl_executable()


def _zip_name(root: Path) -> str:
    return next(p.name for p in (root / "L4_raw_sessions").glob("*.zip"))


IMPORT_LINE = b'{"text": "imported fact about the proxy", "type": "event"}\n'

# (label, path under the root to plant, command); "{first}" is an L5 id, "{zip}" the month zip
CASES = [
    ("auto_dream marker", ".memctl/auto_dream", ["remember", "--type", "lesson", "the vpn needs mfa"]),
    ("writer lock", ".memctl/lock", ["remember", "--type", "lesson", "the vpn needs mfa"]),
    ("index", ".memctl/index.sqlite", ["search", "proxy"]),
    ("index on the full path", ".memctl/index.sqlite", ["search", "proxy", "--json", "--wide"]),
    ("index journal", ".memctl/index.sqlite-journal", ["index", "rebuild"]),
    ("index wal", ".memctl/index.sqlite-wal", ["search", "proxy"]),
    ("index lock", ".memctl/index.lock", ["search", "proxy"]),
    ("index lock on rebuild", ".memctl/index.lock", ["index", "rebuild"]),
    ("index rebuild", ".memctl/index.sqlite", ["index", "rebuild"]),
    ("index refresh", ".memctl/index.sqlite", ["index", "refresh"]),
    ("refs log", ".memctl/refs.log", ["search", "proxy"]),
    ("refs offset", ".memctl/refs.offset", ["dream"]),
    ("dream lock", ".memctl/dream.lock", ["dream"]),
    ("state folder", ".memctl", ["search", "proxy"]),
    ("state folder on remember", ".memctl", ["remember", "--type", "lesson", "the vpn needs mfa"]),
    ("L5 on remember", "long_term.jsonl", ["remember", "--type", "lesson", "the vpn needs mfa"]),
    ("L5 on forget", "long_term.jsonl", ["forget", "{first}"]),
    ("L6 on forget", "archive.jsonl", ["forget", "{first}"]),
    ("dream log on forget", "dream_log.jsonl", ["forget", "{first}"]),
    ("L5 on dream", "long_term.jsonl", ["dream"]),
    ("L5 on import", "long_term.jsonl", ["import", "-", "--layer", "L5"]),
    ("L6 on import", "archive.jsonl", ["import", "-"]),
    ("L1 on insight rebuild", "global_mem_insight.txt", ["insight", "rebuild"]),
    ("task file", "working/t1.json", ["task", "save", "t1"]),
    ("working folder", "working", ["task", "save", "t2"]),
    ("history on archive", "L4_raw_sessions/all_histories.txt", ["archive", "--min-age", "0s", "--keep-newest", "0"]),
    ("manifest on archive", "L4_raw_sessions/manifest.jsonl", ["archive", "--min-age", "0s", "--keep-newest", "0"]),
    ("zip on archive", "L4_raw_sessions/{zip}", ["archive", "--min-age", "0s", "--keep-newest", "0"]),
    ("L4 folder on archive", "L4_raw_sessions", ["archive", "--min-age", "0s", "--keep-newest", "0"]),
]


@pytest.mark.parametrize("label,planted,command", CASES, ids=[c[0] for c in CASES])
def test_a_planted_symlink_is_refused(run, template, tmp_path, label, planted, command):
    base_template, first = template
    base = tmp_path / "ga"
    shutil.copytree(base_template, base, symlinks=True)
    root = base / "memory"
    planted = planted.format(zip=_zip_name(root))
    command = [arg.format(first=first) for arg in command]
    target = root / planted
    outside = tmp_path / "outside"
    outside.mkdir()
    if target.is_dir():
        shutil.copytree(target, outside / "dir")  # a plausible copy, so only a write changes it
        shutil.rmtree(target)
        os.symlink(outside / "dir", target)
    else:
        (outside / "sentinel").write_bytes(target.read_bytes() if target.exists() else b"")
        target.unlink(missing_ok=True)
        os.symlink(outside / "sentinel", target)
    before = _tree_digest(outside)

    stdin = IMPORT_LINE if command[0] == "import" else b'{"goal": "x"}' if command[0] == "task" else None
    out = run(*command, root=root, input=stdin)

    assert _tree_digest(outside) == before, f"{label}: a byte outside the root changed"
    assert target.is_symlink(), f"{label}: the link was replaced instead of refused"
    stderr = out.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr and "Error:" not in stderr, stderr
    assert out.returncode in (0, 2, 3), (out.returncode, stderr)
    assert "symlink" in stderr and planted.split("/")[-1] in stderr, stderr
    if out.returncode == 2:
        assert len(stderr.strip().splitlines()) == 1, stderr


def _with_a_link_outside(template, tmp_path: Path, planted: str) -> tuple[Path, str]:
    """A copy of the template whose `planted` file is a link to one outside the root that looks
    like an L5 entry (its text must never reach the output)."""
    base_template, first = template
    base = tmp_path / "ga"
    shutil.copytree(base_template, base, symlinks=True)
    root = base / "memory"
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b'{"id": "%s", "text": "text from outside the root", "type": "lesson"}\n' % first.encode())
    (root / planted).unlink(missing_ok=True)
    os.symlink(outside, root / planted)
    return root, first


READ_CASES = [
    ("L5 on show", "long_term.jsonl", ["show", "{first}"]),
    ("L5 on status", "long_term.jsonl", ["status"]),
    ("L6 on status", "archive.jsonl", ["status", "--json"]),
    ("dream log on status", "dream_log.jsonl", ["status"]),
    ("L5 on a dry-run dream", "long_term.jsonl", ["dream", "--dry-run"]),
    ("L6 on verify", "archive.jsonl", ["verify"]),
]


@pytest.mark.parametrize("label,planted,command", READ_CASES, ids=[c[0] for c in READ_CASES])
def test_a_planted_symlink_is_not_read_through(run, template, tmp_path, label, planted, command):
    """A read follows no link either: the file it points at could be anyone's (here one that
    looks like an L5 entry, whose text must not reach the output)."""
    root, first = _with_a_link_outside(template, tmp_path, planted)

    out = run(*[arg.format(first=first) for arg in command], root=root)

    stderr, stdout = out.stderr.decode("utf-8", "replace"), out.stdout.decode("utf-8", "replace")
    assert "outside the root" not in stdout + stderr
    assert "symlink" in stderr + stdout and planted in stderr + stdout, (stdout, stderr)
    assert "Traceback" not in stderr
    assert out.returncode == (3 if command[0] == "verify" else 2), (out.returncode, stderr)
    if out.returncode == 2:
        assert len(stderr.strip().splitlines()) == 1, stderr


SEARCH_CASES = [
    ("L5 on a piped search", "long_term.jsonl", ["search", "outside"]),
    ("L5 on a table search", "long_term.jsonl", ["search", "outside", "--wide"]),
    ("L6 on a deep search", "archive.jsonl", ["search", "outside", "--mode", "deep", "--json"]),
]


@pytest.mark.parametrize("label,planted,command", SEARCH_CASES, ids=[c[0] for c in SEARCH_CASES])
def test_a_search_names_the_layer_file_it_left_out_for_being_a_link(run, template, tmp_path, label, planted,
                                                                   command):
    """A search never reads through the link, and says so, instead of a silent "no match"
    (the lean path and the full command line alike)."""
    root, first = _with_a_link_outside(template, tmp_path, planted)

    out = run(*command, root=root)

    stderr, stdout = out.stderr.decode("utf-8", "replace"), out.stdout.decode("utf-8", "replace")
    assert "outside the root" not in stdout + stderr
    assert out.returncode == 1, (out.returncode, stderr)
    warnings = [line for line in stderr.splitlines() if "symlink" in line]
    assert len(warnings) == 1 and planted in warnings[0] and "not searched" in warnings[0], stderr
    assert "Traceback" not in stderr


def test_a_resident_process_never_takes_its_lock_or_log_through_a_symlinked_state_folder(tmp_path):
    """O_NOFOLLOW guards only a path's last part: `.memctl` itself a symlink was followed, and a
    remember whose state folder lacked writer.lock created one outside the root (a flaky
    failure of the "state folder on remember" case above)."""
    from memctl.residents import local_socket, service as resident_service

    root, outside = tmp_path / "memory", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / ".memctl")
    local_socket.start_detached(str(root), "writer.sock", "writer.lock", "memctl.residents.writer", dict(os.environ))
    local_socket._spawn(str(root), "writer.lock", "memctl.residents.writer", dict(os.environ))
    assert resident_service.take_lock(str(root), "semantic.lock") is None
    assert local_socket.open_state_file(str(root), "semantic.log", os.O_WRONLY | os.O_CREAT) is None
    assert list(outside.iterdir()) == []
    (root / ".memctl").unlink()
    (root / ".memctl").mkdir()
    os.symlink(outside / "planted", root / ".memctl" / "semantic.log")
    assert local_socket.open_state_file(str(root), "semantic.log", os.O_WRONLY | os.O_CREAT) is None
    assert list(outside.iterdir()) == []


def test_the_write_lookups_are_never_opened_through_a_symlinked_state_folder(run, tmp_path):
    """SQLite makes a WAL database's -wal and -shm files beside it even on a read-only open: with
    `.memctl` a link, a `remember` that read the lookups' state before refusing the folder left
    both outside the root (the flaky "state folder on remember" case, every time once
    lookups.sqlite exists)."""
    root, outside = tmp_path / "memory", tmp_path / "outside"
    quiet = {"MEMCTL_RESIDENT": "0"}
    assert run("init", root=root).returncode == 0
    assert run("remember", "--type", "lesson", "the first fact", root=root, env=quiet).returncode == 0
    assert (root / ".memctl" / "lookups.sqlite").is_file()
    outside.mkdir()
    shutil.move(str(root / ".memctl"), str(outside / "state"))
    os.symlink(outside / "state", root / ".memctl")
    before = _tree_digest(outside)
    out = run("remember", "--type", "lesson", "the vpn needs mfa", root=root, env=quiet)
    assert out.returncode == 2 and b"symlink" in out.stderr, out.stderr
    assert sorted(p.name for p in (outside / "state").iterdir() if "lookups" in p.name) == ["lookups.sqlite"]
    assert _tree_digest(outside) == before
