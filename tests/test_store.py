"""The entry store seam: the only code that names L5, L6 and the dream log, and what it keeps."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from memctl.core.config import init_root, load_settings
from memctl.longterm.entries import Entry
from memctl.longterm.store import open_store

PACKAGE = Path(__file__).resolve().parent.parent / "memctl"
STORE_FILES = {"long_term", "cold_archive", "dream_log"}
FILE_PRIMITIVES = {"iter_entries", "load_entries", "append_entries", "write_entries", "read_snapshot", "write_rows",
                   "append_durably"}
# the modules that read or write L5/L6/the dream log, through the store only
CLIENTS = sorted([p for p in (PACKAGE / "longterm").glob("*.py") if p.name not in ("store.py", "entries.py")]
                 + [PACKAGE / "agent" / "tasks.py", PACKAGE / "recall" / "importer.py"]
                 + list((PACKAGE / "cli" / "commands").glob("*.py")))
PLANNERS = [PACKAGE / "longterm" / name for name in ("dream_plan.py", "dream_similar.py")]


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    used |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return used


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found


def test_only_the_store_names_the_entry_files_or_writes_them():
    offenders = {}
    for path in CLIENTS:
        bad = _names_used(path) & (STORE_FILES | FILE_PRIMITIVES)
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert offenders == {}
    assert len(CLIENTS) > 10  # the glob found the modules it means to check


def test_the_planners_reach_no_store_and_no_file():
    for path in PLANNERS:
        imports = _imports(path)
        assert "memctl.longterm.store" not in imports and "memctl.core.fsutil" not in imports, path.name
        assert not {"open", "read_bytes", "read_text", "write_bytes"} & _names_used(path), path.name


def _store(tmp_path):
    root = tmp_path / "memory"
    init_root(root)
    return open_store(load_settings(root).layout), root


def test_rewrite_keeps_untouched_and_unreadable_lines_byte_for_byte(tmp_path):
    store, root = _store(tmp_path)
    hand_written = b'{"text": "hand written", "id": "h1",  "type": "event"}\n'
    (root / "long_term.jsonl").write_bytes(hand_written + b"not json\n")
    store.active.append([Entry(id="a", text="alpha"), Entry(id="b", text="beta")])
    rows = store.active.snapshot().rows
    kept = [r for r in rows if r.entry is None or r.entry.id != "a"]
    store.active.rewrite(kept)
    data = (root / "long_term.jsonl").read_bytes()
    assert data.startswith(hand_written + b"not json\n")
    assert b'"alpha"' not in data and b'"beta"' in data
    assert store.active.ids() == {"h1", "b"}
    assert store.active.count() == 3


def test_departed_is_the_last_l6_line_of_each_id_not_in_l5(tmp_path):
    store, _ = _store(tmp_path)
    store.active.append([Entry(id="back", text="restored")])
    store.archive.append([Entry(id="gone", text="v1", reason="archived"), Entry(id="back", text="x", reason="forgotten"),
                          Entry(id="gone", text="v1", reason="forgotten")])
    departed = store.departed()
    assert sorted(departed) == ["gone"] and departed["gone"].reason == "forgotten"
    assert store.departed_entry("gone").reason == "forgotten" and store.departed_entry("back") is None
    assert store.archive.row("gone").entry.reason == "forgotten" and store.departed_entry("never") is None


def test_the_log_round_trips_and_a_scrub_drops_only_what_mentions_the_string(tmp_path):
    store, root = _store(tmp_path)
    store.append_log([{"run": "d-1", "op": "forget", "before": {"id": "s", "text": "the secret"}},
                      {"run": "d-1", "op": "end"}])
    with open(root / "dream_log.jsonl", "ab") as handle:
        handle.write(b"broken the secret\nbroken but harmless\n")
    assert [r["op"] for r in store.log_records()] == ["forget", "end"]
    assert not store.scrub_log({"zzz"}, [b"nowhere"], lambda record: record)
    assert store.scrub_log({"s"}, [b"the secret"], lambda record: {**record, "before": None})
    lines = (root / "dream_log.jsonl").read_bytes().splitlines()
    assert b"the secret" not in b"".join(lines) and lines[-1] == b"broken but harmless"
    assert [json.loads(line)["before"] for line in lines[:2]] == [None, None]
