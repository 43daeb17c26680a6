"""forget (soft, by id or --match), restore, and forget --purge across every layer."""

from __future__ import annotations

import json
import random
import zipfile
from datetime import datetime
from pathlib import Path

from memctl.l4 import loggen
from l4_helpers import every_byte_under, make_folder, zips_readable

NOW = {"MEMCTL_NOW": "2026-04-10T09:00:00"}
SECRET = "sk-vault-7f3a-purple-elephant"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def remember(run, root, text, type_="event", *extra):
    done = run("remember", text, "--type", type_, *extra, root=root, env=NOW)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def test_forget_by_id_moves_to_l6_and_restore_puts_it_back_in_place(run, root):
    run("init", root=root)
    keep = remember(run, root, "the build host is bk-02")
    gone = remember(run, root, "the old build host was bk-01")
    done = run("forget", gone, "--reason", "host retired", "--json", root=root, env=NOW)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["forgotten"] == [gone]
    assert [e["id"] for e in lines(root / "long_term.jsonl")] == [keep]
    [l6] = lines(root / "archive.jsonl")
    assert (l6["id"], l6["reason"], l6["note"], l6["left_at"]) == (gone, "forgotten", "host retired", "2026-04-10T09:00:00")
    assert run("restore", gone, root=root).stdout.decode().strip() == gone
    restored = lines(root / "long_term.jsonl")[-1]
    assert restored["text"] == "the old build host was bk-01" and "reason" not in restored
    assert len(lines(root / "archive.jsonl")) == 1  # L6 stays append-only
    assert run("restore", gone, root=root).returncode == 2
    missing = run("forget", "m000000000000", root=root)
    assert missing.returncode == 2 and b"not active" in missing.stderr


def test_forget_match_needs_yes_and_dry_run_changes_nothing(run, root):
    run("init", root=root)
    a = remember(run, root, "staging uses postgres 15")
    b = remember(run, root, "Staging deploys on fridays are banned")
    remember(run, root, "production uses postgres 16")
    before = (root / "long_term.jsonl").read_bytes()
    dry = run("forget", "--match", "staging", "--dry-run", root=root)
    assert dry.returncode == 0 and dry.stdout.decode().count("would forget:") == 2
    asked = run("forget", "--match", "staging", root=root)
    assert asked.returncode == 0 and b"--yes" in asked.stderr
    assert (root / "long_term.jsonl").read_bytes() == before
    done = run("forget", "--match", "staging", "--yes", "--json", root=root)
    assert sorted(json.loads(done.stdout)["forgotten"]) == sorted([a, b])
    assert len(lines(root / "long_term.jsonl")) == 1



def test_purge_erases_a_string_from_every_file_under_the_root(run, tmp_path):
    folder = make_folder(tmp_path)
    root = folder.root
    rng = random.Random(4)
    folder.add_log("model_responses_1.txt", loggen.format_b(datetime(2026, 4, 5, 9, 0), 6, rng, 200,
                                                            request=f"the vault key is {SECRET} keep it"))
    folder.add_log("model_responses_2.txt", loggen.format_a(datetime(2026, 4, 6, 9, 0), 3, rng, 200))
    assert run("archive", folder.raw_dir, "--keep-newest", "0", root=root).returncode == 0
    secret_id = remember(run, root, f"The vault key is {SECRET}")
    other = remember(run, root, "the vault lives on bk-07")
    # leave the text in L6 and the audit log too: forget, restore, a superseded version
    assert run("forget", secret_id, root=root, env=NOW).returncode == 0
    assert run("restore", secret_id, root=root, env=NOW).returncode == 0
    remember(run, root, f"vault key: {SECRET}", "tool", "--topic", "vault")
    remember(run, root, "vault key rotated, ask ops", "tool", "--topic", "vault")
    assert run("search", "vault", root=root).returncode in (0, 1)  # builds the index with the secret in it
    assert any(SECRET.encode() in data for _, data in every_byte_under(root))
    dry = run("forget", "--purge", "--match", SECRET, root=root)
    assert dry.returncode == 0 and b"irreversible" in dry.stderr
    done = run("forget", "--purge", "--match", SECRET, "--yes", "--reason", "leaked key", "--json", root=root, env=NOW)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert secret_id in report["purged"] and len(report["purged"]) == 2
    assert report["l4"], "the L4 half ran"
    run("search", "vault", root=root)  # rebuild the index from the purged layers
    leaks = [str(p) for p, data in every_byte_under(root) if SECRET.encode() in data]
    assert leaks == []
    zips_readable(folder.l4)
    for zip_path in folder.l4.glob("*.zip"):
        with zipfile.ZipFile(zip_path) as archive:
            assert archive.testzip() is None
    assert [e["id"] for e in lines(root / "long_term.jsonl")][0] == other
    tombstones = [e for e in lines(root / "archive.jsonl") if e["reason"] == "purged"]
    assert {t["id"] for t in tombstones} == set(report["purged"])
    assert all(set(t) <= {"id", "text", "type", "left_at", "reason", "note", "run", "sha256"} for t in tombstones)
    audit = (root / "dream_log.jsonl").read_text()
    assert "sha256:" in audit and "leaked key" in audit
    again = run("remember", f"The vault key is {SECRET}", "--type", "event", root=root)
    assert again.returncode == 2 and b"purged" in again.stderr
