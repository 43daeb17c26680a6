"""The search table on a terminal (memctl.cli.table): at 80 columns the snippet shows the
query's words, not the start of a window cut before them (issue #32)."""

from __future__ import annotations

import json

from conftest import clean_env
from terminal import in_terminal

from memctl.cli.table import cells, cut_around, hits_table

LONG = ("The weekly report lists every host of the fleet and the state of its disks, then the "
        "nightly backup job on bk-02 failed at 02:00 because the archive volume was full.")


def test_the_snippet_is_cut_around_the_first_match():
    shown = cut_around(LONG, ["backup"], 30)
    assert "backup" in shown and shown.startswith("…") and shown.endswith("…") and cells(shown) <= 30
    assert cut_around(LONG, ["weekly"], 30) == LONG[:29] + "…"  # already in view: cut at the end, as before
    assert cut_around(LONG, ["nomatch"], 30) == LONG[:29] + "…"
    assert cut_around("short text", ["text"], 30) == "short text"
    tail = cut_around(LONG, ["full"], 30)
    assert tail.endswith("was full.") and tail.startswith("…") and cells(tail) == 30  # the room filled


def test_the_window_counts_terminal_cells_and_finds_words_in_any_case():
    chinese = "周报列出了所有主机和磁盘状态，然后说明 bk-02 上的夜间备份任务在凌晨两点失败了，因为归档卷已满。"
    shown = cut_around(chinese, ["备份"], 24)
    assert "备份" in shown and cells(shown) <= 24
    assert "BACKUP" in cut_around(LONG.upper(), ["backup"], 30)


def test_an_80_column_table_shows_the_matched_words():
    rows = [("1", "1.714", "L4", "2026-04-05", "L4:0405_0902-0405_0908#h19", LONG)]
    line = hits_table(rows, ["nightly", "backup"], 80)[1]
    assert cells(line) <= 80 and "nightly" in line


def test_a_terminal_search_at_80_columns_shows_the_match(run, memctl_bin, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "bk-02-report", "text": LONG}) + "\n")
    assert run("import", str(items), "--layer", "L5", root=root).returncode == 0
    for args in (["search", "volume"], ["search", "volume", "--wide"]):  # the lean path, the full command line
        status, screen = in_terminal([memctl_bin, "--root", str(root), *args], clean_env(), columns=80)
        assert status == 0, screen
        row = next(line for line in screen.splitlines() if line.startswith("1 "))
        assert "volume" in screen and cells(row) <= 80, screen
