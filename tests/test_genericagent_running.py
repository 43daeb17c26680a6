"""GenericAgent as it really runs (issue 32): a process that imported its own archiver before
`memctl init`, logs that are not archived yet, a purge's dry run over adopted sessions, the
shim and the plugin after the venv that ran init is gone, and L1 after each archive run.
GenericAgent's own code is the oracle (tests/ga_checkout.py)."""

from __future__ import annotations

import json
import zipfile

from conftest import clean_env
from ga_checkout import make_checkout, run_scheduler_l4_path


def _manifest(l4) -> list[dict]:
    path = l4 / "manifest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _members_holding(checkout, needle: bytes) -> set[str]:
    found = set()
    for zip_path in checkout.l4.glob("*.zip"):
        with zipfile.ZipFile(zip_path) as archive:
            found |= {f"{zip_path.name}:{n}" for n in archive.namelist() if needle in archive.read(n)}
    return found


# ---------------------------------------------------------------- forget --purge --dry-run (item 3)


def test_purge_dry_run_names_genericagents_members_and_changes_nothing(tmp_path, run):
    checkout = make_checkout(tmp_path)
    for days, prefix in ((-60, ""), (-30, "1")):
        checkout.add_real_writer_logs(days=days, prefix=prefix)
    assert run_scheduler_l4_path(checkout, clean_env()).returncode == 0  # GenericAgent's own archive
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    needle = "华东区发布日志".encode()
    adopted = {f"{r['zip']}:{r['member']}" for r in _manifest(checkout.l4) if r.get("origin")}
    holding = _members_holding(checkout, needle)
    assert holding and holding <= adopted
    before = {p: p.read_bytes() for p in checkout.l4.iterdir() if p.is_file()}

    preview = run("forget", "--purge", "--match", "华东区发布日志", "--dry-run", cwd=checkout.base)
    assert preview.returncode == 0, preview.stderr
    said = preview.stdout.decode()
    for zip_member in holding:
        zip_name, member = zip_member.split(":")
        assert zip_name in said and member[:-len(".txt")] in said, said
    assert {p: p.read_bytes() for p in checkout.l4.iterdir() if p.is_file()} == before

    purged = run("forget", "--purge", "--match", "华东区发布日志", "--yes", cwd=checkout.base)
    assert purged.returncode == 0, purged.stderr
    assert _members_holding(checkout, needle) == set()
