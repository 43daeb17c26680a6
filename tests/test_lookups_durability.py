"""The write lookups under faults: a run killed just before a lookup update (SIGKILL at each
derived-write checkpoint), and every lookup write failing as on a full disk. The command's
own promise holds (exit 0 = written; the lookup failure costs nothing), and whatever the
lookups were left as, the next writes give exactly what a full scan gives."""

from __future__ import annotations

import itertools
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from durability_helpers import every_line_parses
from memctl.core.config import init_root, load_settings
from memctl.core.errors import MemctlError
from memctl.longterm import forget as forget_mod
from memctl.longterm import remember as remember_mod
from memctl.longterm.entries import Entry, entry_line
from memctl.longterm.forget import forget_ids, restore
from memctl.longterm.remember import RememberRequest, remember

ENV = {"MEMCTL_NOW": "2026-06-01T04:00:00"}
NOW = datetime(2026, 6, 1, 5, 0, 0)
FACTS = {f"k{i}": f"fact number {i} about the {word} host" for i, word in enumerate(
    ("backup", "proxy", "cache", "queue", "build", "mail"))}
SCENARIOS = {
    "add": ["remember", "a brand new fact about the deploy", "-t", "event"],
    "seen": ["remember", "Fact number 2 about the cache host!", "-t", "event"],
    "supersede": ["remember", "editor is helix", "-t", "preference", "--topic", "editor"],
    "forget": ["forget", "k3", "k4"],
    "restore": ["restore", "g1"],
    "after-hand-edit": ["remember", "another new fact", "-t", "event"],
}


def _base(run, root: Path, scenario: str) -> None:
    init_root(root)
    l5 = [Entry(id=i, text=t, type="event") for i, t in FACTS.items()]
    l5.append(Entry(id="p1", text="editor is vim", type="preference", topic="editor"))
    (root / "long_term.jsonl").write_bytes(b"".join(entry_line(e) for e in l5))
    (root / "archive.jsonl").write_bytes(entry_line(Entry(id="g1", text="the old proxy was squid", type="event",
                                                          reason="forgotten", left_at="2026-05-01T00:00:00")))
    assert run("remember", "warm-up: builds the lookups", "-t", "event", root=root, env=ENV).returncode == 0
    if scenario == "after-hand-edit":  # stale lookups: the faulted run rebuilds them first
        data = (root / "long_term.jsonl").read_bytes().replace(b"mail host", b"MAIL host")
        (root / "long_term.jsonl").write_bytes(data + entry_line(Entry(id="h1", text="typed by hand", type="event")))


def _follow_up(root: Path, monkeypatch, lookups: bool) -> list:
    """The next writes, in-process with fixed ids, with the lookups or by full scan."""
    monkeypatch.setenv("MEMCTL_LOOKUPS", "1" if lookups else "0")
    counter = itertools.count()
    monkeypatch.setattr(remember_mod, "new_id", lambda prefix="m": f"{prefix}{next(counter):012x}")
    monkeypatch.setattr(forget_mod, "new_id", lambda prefix="m": f"{prefix}{next(counter):012x}")
    settings = load_settings(root)
    steps = [
        lambda: remember(settings, RememberRequest("fact number 1 about the proxy host", "event"), NOW, 0).to_dict(),
        lambda: remember(settings, RememberRequest("a brand new fact about the deploy", "event"), NOW, 0).to_dict(),
        lambda: remember(settings, RememberRequest("editor is zed", "preference", "Editor"), NOW, 0).to_dict(),
        lambda: remember(settings, RememberRequest("the old proxy was squid", "event"), NOW, 0).to_dict(),
        lambda: forget_ids(settings, ["k0", "k3", "h1"], "t", NOW, 0)[1].forgotten,
        lambda: restore(settings, "k0", NOW, 0).to_dict(),
        lambda: remember(settings, RememberRequest("typed by hand", "event"), NOW, 0).to_dict(),
    ]
    out = []
    for step in steps:
        try:
            out.append(step())
        except MemctlError as exc:
            out.append(("error", str(exc)))
    return out + [(root / name).read_bytes() for name in ("long_term.jsonl", "archive.jsonl")]


def _next_writes_agree(root: Path, tmp_path: Path, monkeypatch, tag: str) -> None:
    every_line_parses(root)
    fast, slow = tmp_path / f"{tag}-fast", tmp_path / f"{tag}-slow"
    shutil.copytree(root, fast)
    shutil.copytree(root, slow)
    assert _follow_up(fast, monkeypatch, True) == _follow_up(slow, monkeypatch, False), tag


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_kill_before_any_lookup_update_leaves_the_next_writes_exact(run, tmp_path, monkeypatch, scenario):
    base = tmp_path / "base" / "memory"
    _base(run, base, scenario)
    kills = 0
    for number in range(1, 10):
        root = tmp_path / f"kill-{number}" / "memory"
        shutil.copytree(base, root)
        hit = run(*SCENARIOS[scenario], root=root, env={**ENV, "MEMCTL_FAULT_AFTER": str(number)})
        if hit.returncode == 0:
            break
        assert hit.returncode == -9, (number, hit.stderr)
        kills += 1
        _next_writes_agree(root, tmp_path, monkeypatch, f"kill-{number}")
    else:
        pytest.fail("the command never finished")
    assert kills >= 1  # the scenario reached a lookup update


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_failing_lookup_write_fails_nothing(run, tmp_path, monkeypatch, scenario):
    base = tmp_path / "base" / "memory"
    _base(run, base, scenario)
    clean, faulty = tmp_path / "clean" / "memory", tmp_path / "faulty" / "memory"
    shutil.copytree(base, clean)
    shutil.copytree(base, faulty)
    expected = run(*SCENARIOS[scenario], "--json", root=clean, env=ENV)
    got = run(*SCENARIOS[scenario], "--json", root=faulty, env={**ENV, "MEMCTL_FAULT_DERIVED": "enospc"})
    assert got.returncode == expected.returncode == 0, got.stderr
    assert got.stderr == expected.stderr
    strip = [(r.stdout.replace(b'"seen": 2', b"").split(b'"')[3:4], len(r.stdout)) for r in (expected, got)]
    assert strip[0][1] == strip[1][1]  # the same report (ids aside, which are random)
    for name in ("long_term.jsonl", "archive.jsonl"):
        assert len((faulty / name).read_bytes()) == len((clean / name).read_bytes()), name
    _next_writes_agree(faulty, tmp_path, monkeypatch, "enospc")
