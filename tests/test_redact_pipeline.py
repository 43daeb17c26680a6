"""Secrets pasted into a session never reach history, the index or search output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_redact import SHAPES  # tests/ is on sys.path (rootdir conftest, prepend import mode)

SAMPLE = Path(__file__).resolve().parent.parent / "memctl" / "samples" / "model_responses_571204.txt"
REQUEST = "Check why the nightly backup job on host bk-02 failed"
# one secret of each shape that fits on one line inside a user request (a .pgpass line is a
# line of its own by its format)
INLINE = [(name, text) for name, text, secret in SHAPES
          if "\n" not in text and "json" not in name and not name.startswith("pgpass")]
PEM = next(text for name, text, _ in SHAPES if name == "private key block")


@pytest.fixture
def archived(run, root, tmp_path) -> tuple[Path, list[str]]:
    assert run("init", root=root).returncode == 0
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    planted = " ; ".join(text for _, text in INLINE)
    log = SAMPLE.read_text(encoding="utf-8").replace(REQUEST, f"{REQUEST} zebracorn {planted}")
    log = log.replace("[2026-04-05 02:00:01] start snapshot", PEM + "\n[2026-04-05 02:00:01] start snapshot", 1)
    (raw_dir / SAMPLE.name).write_text(log, encoding="utf-8")
    old = 1_700_000_000
    os.utime(raw_dir / SAMPLE.name, (old, old))
    result = run("archive", raw_dir, "--min-age", "0", "--keep-newest", "0", "--json", root=root)
    assert result.returncode == 0, result.stderr
    secrets = [secret for name, _, secret in SHAPES if any(name == n for n, _ in INLINE)]
    secrets.append(next(secret for name, _, secret in SHAPES if name == "private key block"))
    return root, secrets


def _leaks(data: str, secrets: list[str]) -> list[str]:
    return [s[:12] + "…" for s in secrets if s in data or s[len(s) // 2 :] in data]


def test_history_holds_no_secret(archived):
    root, secrets = archived
    history = (root / "L4_raw_sessions" / "all_histories.txt").read_text(encoding="utf-8")
    assert "zebracorn" in history
    assert _leaks(history, secrets) == []
    assert "[REDACTED:" in history


def test_index_and_search_output_hold_no_secret(run, archived):
    root, secrets = archived
    plain = run("search", "zebracorn", "-k", "20", "--layers", "L4", root=root)
    assert plain.returncode == 0, plain.stderr
    as_json = run("search", "zebracorn", "-k", "20", "--layers", "L4", "--json", root=root)
    assert as_json.returncode == 0
    texts = [json.loads(line)["text"] for line in as_json.stdout.splitlines()]
    assert any("zebracorn" in t for t in texts)
    for output in (plain.stdout.decode(), "\n".join(texts)):
        assert _leaks(output, secrets) == []
    index = root / ".memctl" / "index.sqlite"
    assert index.exists()
    stored = b"".join(p.read_bytes() for p in index.parent.glob("index.sqlite*"))
    assert _leaks(stored.decode("utf-8", "replace"), secrets) == []


def test_remembered_secret_is_not_searchable(run, root):
    assert run("init", root=root).returncode == 0
    token = "gh" + "p_" + "Kq7" * 12
    assert run("remember", f"deploy uses quokkafish with {token}", "--type", "event", root=root).returncode == 0
    out = run("search", "quokkafish", "--json", root=root)
    assert out.returncode == 0, out.stderr
    assert b"quokkafish" in out.stdout and token.encode() not in out.stdout
