"""verify: each kind of damage is found by a real `memctl verify` process; a clean archive is clean."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from l4_helpers import make_folder
from conftest import SAMPLES


@pytest.fixture
def archived(run, tmp_path):
    """A memory with the two sample sessions archived into 2026-04.zip."""
    folder = make_folder(tmp_path)
    os.chmod(folder.root, 0o700)
    for path in sorted(SAMPLES.glob("model_responses_*.txt")):
        folder.add_log(path.name, path.read_bytes())
    assert run("init", root=folder.root).returncode == 0
    result = run("archive", folder.raw_dir, "--keep-newest", "0", root=folder.root)
    assert result.returncode == 0, result.stderr.decode()
    return folder


def findings(run, root: Path) -> tuple[int, list[dict], dict]:
    result = run("verify", "--json", root=root)
    lines = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert lines and lines[-1]["type"] == "summary"
    return result.returncode, lines[:-1], lines[-1]


def test_a_clean_archive_verifies_clean(run, archived):
    code, found, summary = findings(run, archived.root)
    assert code == 0 and found == [], found
    assert summary["ok"] and summary["checked"]["sessions"] == 2 and summary["checked"]["history_blocks"] == 2
    plain = run("verify", root=archived.root)
    assert plain.returncode == 0 and plain.stdout == b""


def _member_data_offset(zip_path: Path, member: str) -> tuple[int, int]:
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo(member)
    data = zip_path.read_bytes()
    header = info.header_offset
    name_len = int.from_bytes(data[header + 26:header + 28], "little")
    extra_len = int.from_bytes(data[header + 28:header + 30], "little")
    return header + 30 + name_len + extra_len, info.compress_size


def test_a_flipped_byte_in_a_zip_is_found(run, archived):
    record = archived.manifest()[1]
    zip_path = archived.l4 / record["zip"]
    start, size = _member_data_offset(zip_path, record["member"])
    data = bytearray(zip_path.read_bytes())
    data[start + size // 2] ^= 0x01
    zip_path.write_bytes(bytes(data))
    code, found, _ = findings(run, archived.root)
    assert code == 3  # an integrity error
    assert [(f["kind"], f["path"].endswith(record["member"])) for f in found] == [("member", True)], found
    assert record["name"] in found[0]["message"] and found[0]["severity"] == "error"
    plain = run("verify", root=archived.root)
    assert plain.returncode == 3
    line = plain.stdout.decode().strip()
    assert line.startswith(f"{zip_path}:{record['member']}: member: ")


def test_every_single_byte_flip_in_member_data_is_found(run, archived, tmp_path):
    """Not only the middle: a sample of positions across the member's deflate stream."""
    from memctl.core.config import Layout
    from memctl.ops.integrity import verify

    record = archived.manifest()[0]
    zip_path = archived.l4 / record["zip"]
    start, size = _member_data_offset(zip_path, record["member"])
    original = zip_path.read_bytes()
    for position in range(start, start + size, max(1, size // 25)):
        data = bytearray(original)
        data[position] ^= 0x40
        zip_path.write_bytes(bytes(data))
        report = verify(Layout(archived.root))
        assert any(f.kind in ("member", "zip") for f in report.findings), position
    zip_path.write_bytes(original)
    assert verify(Layout(archived.root)).ok


def test_a_manifest_record_without_its_member_is_found(run, archived):
    manifest = archived.l4 / "manifest.jsonl"
    ghost = dict(archived.manifest()[0], name="0101_0000-0101_0001", member="0101_0000-0101_0001.txt")
    with open(manifest, "a") as handle:
        handle.write(json.dumps(ghost) + "\n")
    code, found, _ = findings(run, archived.root)
    assert code == 3
    kinds = {(f["kind"], f["message"].split(":")[0]) for f in found}
    assert ("member", "0101_0000-0101_0001 is in the manifest but not in the zip") in kinds
    # and its history block is missing too
    assert any(f["kind"] == "history" and "0101_0000-0101_0001" in f["message"] for f in found)


def test_a_zip_member_without_a_manifest_record_is_found(run, archived):
    manifest = archived.l4 / "manifest.jsonl"
    lines = manifest.read_text().splitlines(keepends=True)
    manifest.write_text(lines[0])
    code, found, _ = findings(run, archived.root)
    assert code == 3
    orphan = [f for f in found if f["kind"] == "orphan"]
    assert len(orphan) == 1 and orphan[0]["path"].endswith(json.loads(lines[1])["member"])
    assert json.loads(lines[1])["name"] in orphan[0]["message"]


def test_a_group_readable_file_and_folder_are_found(run, archived):
    target = archived.l4 / "all_histories.txt"
    os.chmod(target, 0o644)
    os.chmod(archived.root / "working", 0o750)
    code, found, summary = findings(run, archived.root)
    assert code == 0 and summary["errors"] == 0 and summary["warnings"] == 2  # hygiene, not damage
    assert {f["severity"] for f in found} == {"warning"}
    strict = run("verify", "--strict", root=archived.root)
    assert strict.returncode == 3 and strict.stdout.decode().count("[warning]") == 2
    by_path = {f["path"]: f for f in found}
    assert set(by_path) == {str(target), str(archived.root / "working")}
    assert by_path[str(target)]["kind"] == "permissions" and "0644" in by_path[str(target)]["message"]
    assert "group" in by_path[str(archived.root / "working")]["message"]


def test_a_kept_raw_log_keeps_the_agents_mode_without_a_warning(run, archived):
    """A kept raw log is a hard link to GenericAgent's own log: `chmod 600` on it would change
    the agent's file, and the 0700 folders above it already keep others out."""
    folder = archived.root / ".memctl" / "kept-raw" / "4242"
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(archived.root / ".memctl" / "kept-raw", 0o700)
    (folder / "model_responses_1.txt").write_text("x")
    os.chmod(folder / "model_responses_1.txt", 0o644)
    code, found, summary = findings(run, archived.root)
    assert not [f for f in found if f["kind"] == "permissions"], found
    os.chmod(folder, 0o755)  # the folder that guards it is still checked
    code, found, summary = findings(run, archived.root)
    assert [f["path"] for f in found if f["kind"] == "permissions"] == [str(folder)]


def test_an_api_key_in_an_l3_file_is_found(run, archived):
    sop = archived.root / "deploy_sop.md"
    sop.write_text("# Deploy\n\nsteps:\nexport OPENAI_API_KEY=sk-proj-9fKx2LmQ7rTzV4bN8cW1yH6dT3BlbkFJ3eA0uP5sGq7Lm2Zx\n")
    os.chmod(sop, 0o600)
    code, found, _ = findings(run, archived.root)
    assert code == 0 and found[0]["severity"] == "warning"
    assert [(f["kind"], f["path"]) for f in found] == [("secret", f"{sop}:4")], found
    assert "sk-proj" not in json.dumps(found)  # the finding names the kind, never the secret


def test_history_duplicates_l1_limits_and_bad_entry_lines_are_found(run, archived):
    history = archived.l4 / "all_histories.txt"
    text = history.read_text()
    first_block = text[: text.index("\n" + "=" * 60, 2)]
    with open(history, "a") as handle:
        handle.write(first_block)
    insight = archived.root / "global_mem_insight.txt"
    insight.write_text("# [Global Memory Insight]\n" + "".join(f"line {i}\n" for i in range(40)))
    os.chmod(insight, 0o600)
    with open(archived.root / "long_term.jsonl", "a") as handle:
        handle.write('{"id": "m1", "type": "event", "text": "fine"}\n{"id": "m2", "te\n')
    code, found, _ = findings(run, archived.root)
    assert code == 3  # the torn L5 line; the repeated block and L1's length are warnings
    kinds = sorted((f["kind"], f["severity"]) for f in found)
    assert kinds == [("history", "warning"), ("insight-lines", "warning"), ("l5", "error")], found
    assert next(f for f in found if f["kind"] == "l5")["path"].endswith("long_term.jsonl:2")


def test_verify_of_a_missing_root_is_an_error(run, tmp_path):
    result = run("verify", root=tmp_path / "nowhere")
    assert result.returncode == 2 and b"not a memctl memory folder" in result.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_missing_or_unreadable_zip_is_found(archived):
    from memctl.core.config import Layout
    from memctl.ops.integrity import verify

    zip_path = archived.l4 / archived.manifest()[0]["zip"]
    data = zip_path.read_bytes()
    zip_path.write_bytes(data[: len(data) // 2])  # the central directory is gone
    assert [f.kind for f in verify(Layout(archived.root)).findings] == ["zip"]
    zip_path.unlink()
    found = verify(Layout(archived.root)).findings
    assert [f.kind for f in found] == ["member", "member"] and all("zip is missing" in f.message for f in found)
