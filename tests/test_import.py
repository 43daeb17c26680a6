"""`memctl import`: JSON Lines into L6 (default) or L5, bad lines reported by number, good ones kept."""

from __future__ import annotations

import json

from memctl.longterm.entries import load_entries


def test_bad_lines_are_reported_with_numbers_and_good_ones_kept(run, root, tmp_path):
    run("init", root=root)
    source = tmp_path / "items.jsonl"
    source.write_text("\n".join([
        json.dumps({"id": "t1", "text": "Melanie painted a sunrise in 2022", "session": "D1", "speaker": "Melanie"}),
        "{not json",
        json.dumps({"text": ""}),
        json.dumps({"id": "t2", "text": "Caroline joined a support group", "date": "2023-05-07"}),
        json.dumps(["a list"]),
        json.dumps({"id": "t1", "text": "a duplicate id"}),
    ]) + "\n", encoding="utf-8")
    result = run("import", source, root=root)
    assert result.returncode == 3  # partial: some lines were bad
    errors = result.stderr.decode()
    for number in (2, 3, 5, 6):
        assert f"items.jsonl:{number}:" in errors
    assert "items.jsonl:1:" not in errors and "items.jsonl:4:" not in errors
    stored = {e.id: e for e in load_entries(root / "archive.jsonl")}
    assert set(stored) == {"t1", "t2"}
    assert stored["t1"].session == "D1" and stored["t1"].speaker == "Melanie"
    assert stored["t2"].date == "2023-05-07"


def test_imported_items_come_back_from_search_with_their_id(run, root, tmp_path):
    run("init", root=root)
    source = tmp_path / "items.jsonl"
    source.write_text(json.dumps({"id": "conv-26|D1:3", "text": "I went to the LGBTQ support group"}) + "\n")
    assert run("import", source, root=root).returncode == 0
    result = run("search", "support group", "--layers", "L6", "--json", root=root)
    assert result.returncode == 0
    assert json.loads(result.stdout.decode().splitlines()[0])["id"] == "conv-26|D1:3"


def test_layer_l5_and_stdin(run, root):
    run("init", root=root)
    lines = b'{"text": "prefers tea", "type": "preference"}\n{"text": "x", "type": "nonsense-type"}\n'
    result = run("import", "-", "--layer", "L5", "--json", root=root, input=lines)
    assert result.returncode == 3
    summary = json.loads(result.stdout.decode().splitlines()[-1])
    assert summary["imported"] == 1 and summary["bad"][0]["line"] == 2
    entries = load_entries(root / "long_term.jsonl")
    assert [e.text for e in entries if e.source.startswith("import")] == ["prefers tea"]


def test_nothing_importable_exits_2(run, root, tmp_path):
    run("init", root=root)
    source = tmp_path / "bad.jsonl"
    source.write_text("nope\n")
    assert run("import", source, root=root).returncode == 2
    assert run("import", tmp_path / "missing.jsonl", root=root).returncode == 2


def test_imported_history_ages_from_its_own_date(run, root, tmp_path):
    """An imported item is as old as its `date` (any format search reads, if it names its year),
    not as its import: the dream archives old imported history like any old entry."""
    items = tmp_path / "history.jsonl"
    items.write_text("\n".join(json.dumps(item) for item in [
        {"id": "iso", "text": "we moved the office to Lyon", "date": "2020-03-04T10:00:00"},
        {"id": "locomo", "text": "the cat is called Miso", "date": "1:56 pm on 8 May, 2021"},
        {"id": "undated", "text": "no date at all"},
        {"id": "no-year", "text": "a day without its year", "date": "May 8"},
        {"id": "future", "text": "a date after the import", "date": "2999-01-01"},
    ]) + "\n")
    assert run("init", root=root).returncode == 0
    now = {"MEMCTL_NOW": "2026-12-05T12:00:00"}
    assert run("import", str(items), "--layer", "L5", root=root, env=now).returncode == 0
    stored = {entry["id"]: entry for entry in map(json.loads, (root / "long_term.jsonl").read_text().splitlines())}
    assert stored["locomo"]["created"] == "2021-05-08T13:56:00" and stored["locomo"]["date"] == "1:56 pm on 8 May, 2021"
    for identifier in ("undated", "no-year", "future"):
        assert stored[identifier]["created"] == "2026-12-05T12:00:00", stored[identifier]
    plan = json.loads(run("dream", "--dry-run", "--json", root=root, env=now).stdout)
    aged = {identifier for change in plan["changes"] for identifier in change["remove"]}
    assert aged == {"iso", "locomo"}, plan


def test_an_earlier_import_stamped_with_its_import_time_ages_from_its_date(run, root):
    """Imports made before items kept their own date as `created`: the dream reads `date` for an
    item never rewritten since; one rewritten later (updated after created) is as old as that."""
    assert run("init", root=root).returncode == 0
    lines = [{"id": "legacy", "text": "an old imported fact", "type": "event", "date": "2019-06-01T08:00:00",
              "created": "2026-11-30T09:00:00", "updated": "2026-11-30T09:00:00", "source": "import"},
             {"id": "rewritten", "text": "an imported fact seen again", "type": "event", "date": "2019-06-01T08:00:00",
              "created": "2026-11-30T09:00:00", "updated": "2026-12-01T09:00:00", "source": "import"}]
    (root / "long_term.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    plan = json.loads(run("dream", "--dry-run", "--json", root=root,
                          env={"MEMCTL_NOW": "2026-12-05T12:00:00"}).stdout)
    assert {identifier for change in plan["changes"] for identifier in change["remove"]} == {"legacy"}, plan
