"""Issue 5, must-show 7: 60 simulated days with a fixed, advancing clock (MEMCTL_NOW).

Agents write session logs during the day (some still being written when an archive runs),
`archive` runs at 00:00 and 12:00, `dream` at 04:00, facts are remembered, searched and
forgotten in between. At the end every session is recoverable byte for byte, `verify` is
clean, L1 is within its limits, and a fact remembered on day one is found by `search` and
is in `compose`.

The daily commands run in-process through `memctl.cli.app.main` (the same entry point as the
console script, a few ms each instead of a Python start-up); the final checks run the
installed `memctl` as real processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from datetime import datetime, timedelta


from memctl.l4 import loggen
from memctl.cli.app import main
from l4_helpers import assert_all_recoverable, make_folder, raw_sha_from_show

DAYS = 60
FACT = "The NAS share only mounts with vers=3.0 (smb); older protocol versions hang the mount"


def _call(monkeypatch, capsysbinary, now: datetime, *args: str) -> tuple[int, bytes]:
    monkeypatch.setenv("MEMCTL_NOW", now.isoformat(timespec="seconds"))
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    out, err = capsysbinary.readouterr()
    assert code in (0, 1), (args, now, code, err.decode(errors="replace")[-2000:])
    return code, out


def _write_session(folder, number: int, start: datetime, rng: random.Random, topic: str) -> datetime:
    """An agent's log, written as a whole, its mtime the time of its last entry."""
    turns = rng.randint(1, 3)
    if number % 3 == 0:
        text = loggen.format_a(start, turns, rng, output_size=300, request=f"请检查 {topic} 的配置并记录结果")
    elif number % 3 == 1:
        text = loggen.format_b(start, turns, rng, output_size=300, request=f"Check the {topic} setup and report")
    else:
        text = loggen.no_tool_session(start, f"What do we know about {topic}?", f"{topic}: nothing unusual today.")
    stamps = [line[len("=== Response === "):][:19] for line in text.splitlines() if line.startswith("=== Response === ")]
    end = datetime.fromisoformat(stamps[-1]) if stamps else start
    path = folder.add_log(f"model_responses_{number:05d}.txt", text)
    os.utime(path, (end.timestamp(), end.timestamp()))
    return end


def test_sixty_days_of_memory_life(run, tmp_path, monkeypatch, capsysbinary):
    rng = random.Random(60)
    folder = make_folder(tmp_path)
    monkeypatch.delenv("MEMCTL_HOME", raising=False)
    root = str(folder.root)
    day0 = datetime(2026, 3, 1)
    _call(monkeypatch, capsysbinary, day0, "--root", root, "init")
    config = folder.root / "memctl.toml"
    config.write_text('[archive]\nraw_dir = "../temp/model_responses"\nkeep_newest = 1\n')
    os.chmod(config, 0o600)
    topics = ["nas", "proxy", "deploy", "backup", "router", "invoice", "atlas", "beacon"]
    remembered: list[str] = []
    fact_id = ""
    number = 0
    for day in range(DAYS):
        base = day0 + timedelta(days=day)
        _call(monkeypatch, capsysbinary, base, "--root", root, "archive", "--quiet")
        _call(monkeypatch, capsysbinary, base + timedelta(hours=4), "--root", root, "dream", "--json")
        # morning session, and on some days one that is still open at the 12:00 run
        _write_session(folder, number, base + timedelta(hours=9, minutes=rng.randint(0, 59)), rng, rng.choice(topics))
        number += 1
        if day % 4 == 1:
            _write_session(folder, number, base + timedelta(hours=11, minutes=40), rng, rng.choice(topics))
            number += 1
        _call(monkeypatch, capsysbinary, base + timedelta(hours=12), "--root", root, "archive", "--quiet")
        afternoon = base + timedelta(hours=15)
        if day == 0:
            _, out = _call(monkeypatch, capsysbinary, afternoon, "--root", root, "remember", FACT,
                           "--type", "tool", "--topic", "nas-mount", "--confidence", "8", "--json")
            fact_id = json.loads(out)["id"]
        if day % 2 == 0:
            _, out = _call(monkeypatch, capsysbinary, afternoon, "--root", root, "remember",
                           f"Day {day}: {rng.choice(topics)} check done, ticket {1000 + day}", "--type", "event", "--json")
            remembered.append(json.loads(out)["id"])
        if day % 5 == 4 and remembered:  # a recent event turns out wrong (older ones the dream archives)
            _call(monkeypatch, capsysbinary, afternoon, "--root", root, "forget", remembered.pop(),
                  "--reason", "resolved")
        if day % 7 == 3:  # an agent recalls the fact now and then: it keeps its references
            _call(monkeypatch, capsysbinary, afternoon, "--root", root, "search", "nas mount vers", "-k", "3")
        _write_session(folder, number, base + timedelta(hours=20, minutes=rng.randint(0, 30)), rng, rng.choice(topics))
        number += 1
        if day % 10 == 9:
            _call(monkeypatch, capsysbinary, afternoon, "--root", root, "insight", "rebuild")
    end = day0 + timedelta(days=DAYS, hours=12)
    _call(monkeypatch, capsysbinary, end, "--root", root, "archive", "--quiet")
    _call(monkeypatch, capsysbinary, end, "--root", root, "insight", "rebuild")

    # every session is recoverable: still raw, or restorable byte for byte from its zip
    assert len(folder.originals) == number
    manifest = folder.manifest()
    assert len(manifest) >= number - 1  # at most keep_newest = 1 raw log left
    assert_all_recoverable(run, folder, via_cli=False)
    for record in rng.sample(manifest, 3):  # and through the real command line
        assert raw_sha_from_show(run, folder.root, record["name"]) == record["sha256"]
    assert len({r["zip"] for r in manifest}) == 2  # March and April

    env = {"MEMCTL_NOW": end.isoformat()}
    verify = run("verify", root=folder.root, env=env)
    assert verify.returncode == 0, verify.stdout.decode() + verify.stderr.decode()
    check = run("insight", "check", root=folder.root, env=env)
    assert check.returncode == 0, check.stdout.decode()
    insight = (folder.root / "global_mem_insight.txt").read_bytes()
    assert len(insight) <= 1024 and len(insight.splitlines()) <= 30

    found = run("search", "how do I mount the NAS share", "--json", root=folder.root, env=env)
    assert found.returncode == 0, found.stderr.decode()
    assert fact_id in [json.loads(line).get("id") for line in found.stdout.decode().splitlines()]
    composed = run("compose", "how do I mount the NAS share", "--budget", "800", root=folder.root, env=env)
    assert composed.returncode == 0 and FACT in composed.stdout.decode()
    status = json.loads(run("status", "--json", root=folder.root, env=env).stdout)
    assert status["last_archive"] == end.isoformat() and status["pending_raw"] <= 1
    assert status["last_dream"]["at"].startswith((day0 + timedelta(days=DAYS - 1)).date().isoformat())
    assert hashlib.sha256(b"").hexdigest() not in {r["sha256"] for r in manifest}
