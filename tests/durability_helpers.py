"""Helpers for the durability tests: read the stores as a user would, and check the promise
(every acknowledged entry present exactly once, every JSON line parses) on a real root."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from memctl.longterm.entries import Entry, write_entries

NOW = "2026-06-01T04:00:00"
ENV = {"MEMCTL_NOW": NOW}
RECENT = "2026-05-30T10:00:00"
OLD = "2026-01-01T10:00:00"
JSONL_FILES = ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl", ".memctl/imports.jsonl")


def lines_of(path: Path) -> list[dict]:
    """Every line parsed; a line that does not is an assertion failure."""
    if not path.exists():
        return []
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: torn last line after repair"
    out = []
    for number, raw in enumerate(data.splitlines(), start=1):
        if raw.strip():
            try:
                out.append(json.loads(raw))
            except ValueError:
                raise AssertionError(f"{path}:{number} does not parse: {raw[:80]!r}") from None
    return out


def every_line_parses(root: Path) -> None:
    for name in JSONL_FILES:
        lines_of(root / name)


def l5(root: Path) -> list[dict]:
    return lines_of(root / "long_term.jsonl")


def l6(root: Path) -> list[dict]:
    return lines_of(root / "archive.jsonl")


def present_once(root: Path, ids_and_texts: dict[str, str]) -> int:
    """Each id is on at most one L5 line, and is in L5 or L6 with its text; no L5 id twice.
    Returns how many entries were checked."""
    active = l5(root)
    ids = [e["id"] for e in active]
    assert len(ids) == len(set(ids)), f"an id is twice in L5: {sorted(i for i in ids if ids.count(i) > 1)}"
    archived = {e["id"]: e for e in l6(root)}
    texts = {e["id"]: e["text"] for e in active}
    for entry_id, text in ids_and_texts.items():
        where = texts.get(entry_id, archived.get(entry_id, {}).get("text"))
        assert where is not None, f"{entry_id} is lost: in neither L5 nor L6"
        assert where == text, f"{entry_id} holds {where!r}, not {text!r}"
    return len(ids_and_texts)


def texts_in_l5(root: Path, text: str) -> int:
    return sum(1 for e in l5(root) if e["text"] == text)


def seed(root: Path, entries: list[Entry]) -> None:
    write_entries(root / "long_term.jsonl", entries)


def entry(id_: str, text: str, type_: str = "event", created: str = RECENT, **kw) -> Entry:
    return Entry(id=id_, text=text, type=type_, created=created, updated=created, **kw)


def fresh_copy(base: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(base, target, symlinks=True)
    return target


def repaired_and_verified(run, root: Path) -> None:
    repaired = run("verify", "--repair", root=root)
    assert repaired.returncode == 0, repaired.stderr.decode()
    verified = run("verify", root=root)
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()


def one_line(stderr: bytes) -> str:
    text = stderr.decode().strip()
    assert text.count("\n") == 0, f"more than one line: {text!r}"
    assert "Traceback" not in text and not re.search(r"\b[A-Z]\w+(Error|Exception)\b", text), text
    return text
