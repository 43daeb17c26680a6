"""memctl on a GenericAgent checkout as it is (issue 10), with GenericAgent's own code as the
oracle: its archiver runs first, its scheduler's L4 path runs after `memctl init`, its plugin
loader fires the recall hook. See tests/ga_checkout.py for how the checkout is laid out."""

from __future__ import annotations

import collections
import hashlib
import random
import json
import shutil
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from conftest import clean_env
from ga_checkout import (REAL_WRITER, UPSTREAM, load_upstream_archiver, make_checkout, real_writer_logs,
                         run_scheduler_l4_path, upstream_name)


def _manifest(l4: Path) -> list[dict]:
    path = l4 / "manifest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ---------------------------------------------------------------- names (Must show 2)


def test_session_names_equal_genericagents_for_every_real_writer_log(tmp_path, run):
    checkout = make_checkout(tmp_path)
    hashes = checkout.add_real_writer_logs()
    archiver = load_upstream_archiver(tmp_path / "oracle")
    expected = {sha: upstream_name(archiver, REAL_WRITER / name, tmp_path / "scratch") for name, sha in hashes.items()}
    assert "0415_1000-0415_1000" in expected.values()  # last Prompt 10:00, a Response at 10:01 after it

    result = run("archive", "--keep-newest", "0", "--min-age", "0s", root=checkout.memory)
    assert result.returncode == 0, result.stderr

    records = {r["sha256"]: r["name"] for r in _manifest(checkout.l4)}
    assert set(records) == set(expected)
    clashes = collections.Counter(expected.values())
    for sha, name in records.items():
        if clashes[expected[sha]] > 1:  # two sessions with one name: memctl's suffix keeps both
            assert name in (expected[sha], f"{expected[sha]}_2")
        else:
            assert name == expected[sha]
    assert sorted(records.values()).count("0410_1100-0410_1100_2") == 1


def test_name_clock_sees_markers_split_across_reads():
    from memctl.l4.naming import NameClock

    data = (REAL_WRITER / "model_responses_738872.txt").read_bytes()
    whole, pieces = NameClock(), NameClock()
    whole.feed(data)
    whole.finish()
    for at in range(0, len(data), 7):
        pieces.feed(data[at: at + 7])
    pieces.finish()
    assert pieces.base_name() == whole.base_name() == "0405_0902-1224_0933"  # a quoted Prompt counts, as upstream


def _stamps_one_needle_at_a_time(data: bytes) -> tuple[dict, dict]:
    """The reference for NameClock: every newline + `=== KIND ===`, each needle searched on its
    own over the whole text, in order; (first, last) stamp of each kind."""
    def is_stamp(text: bytes) -> bool:
        return (len(text) == 20 and text[:1] == b" " and text[5:6] == b"-" and text[8:9] == b"-"
                and text[11:12] == b" " and text[14:15] == b":" and text[17:18] == b":"
                and all(text[i: i + 1].isdigit() for i in (1, 2, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19)))

    found = []
    for kind in (b"Prompt", b"Response"):
        for newline in (b"\n", b"\r"):
            needle = newline + b"=== " + kind + b" ==="
            at = data.find(needle)
            while at >= 0:
                found.append((at, kind, data[at + len(needle): at + len(needle) + 20]))
                at = data.find(needle, at + 1)
    first, last = {}, {}
    for _, kind, stamp in sorted(found):
        if is_stamp(stamp):
            first.setdefault(kind, stamp[1:])
            last[kind] = stamp[1:]
    return first, last


def test_name_clock_finds_what_one_search_per_needle_finds():
    from memctl.l4.naming import NameClock

    rng = random.Random(13)
    pieces = [b"\n", b"\r", b"\r\n", b"=== ", b"==== ", b"=== Prompt ===", b"=== Response ===", b" ===",
              b"=== USER ===", b"x", b" 2026-04-0x 09:10:00", b" 2026-04-01 09:10:0", "٢".encode()] + [
                  b" 2026-04-0%d 09:%d0:00" % (day, day) for day in range(1, 6)]
    named = 0
    for _ in range(400):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 80)))
        clock = NameClock()
        read = rng.choice((3, 7, 4096))
        for at in range(0, len(data), read):
            clock.feed(data[at: at + read])
        clock.finish()
        assert (clock.first, clock.last) == _stamps_one_needle_at_a_time(b"\n" + data), data
        named += bool(clock.first)
    assert named > 50  # the pieces do make markers


# ---------------------------------------------------------------- a checkout GenericAgent archived first (Must show 1)


def _ga_members(checkout) -> dict[str, str]:
    """Session name -> zip of each member GenericAgent's own archiver wrote."""
    found = {}
    for zip_path in sorted(checkout.l4.glob("*.zip")):
        with zipfile.ZipFile(zip_path) as archive:
            found.update({Path(n).stem: zip_path.name for n in archive.namelist()})
    return found


def _member_crcs(checkout) -> dict[tuple[str, str], int]:
    crcs = {}
    for zip_path in sorted(checkout.l4.glob("*.zip")):
        with zipfile.ZipFile(zip_path) as archive:
            crcs.update({(zip_path.name, i.filename): i.CRC for i in archive.infolist()})
    return crcs


def test_memctl_adopts_genericagents_archive_and_takes_over_its_12_hour_job(tmp_path, run):
    checkout = make_checkout(tmp_path)
    for days, prefix in ((-60, ""), (-30, "1"), (0, "2")):  # 21 logs: GenericAgent keeps the 10 newest
        checkout.add_real_writer_logs(days=days, prefix=prefix)
    first = run_scheduler_l4_path(checkout, clean_env())
    assert first.returncode == 0 and b"[L4 cron]" in first.stdout, first.stderr
    ga_sessions = _ga_members(checkout)
    assert len(ga_sessions) >= 2 and not (checkout.l4 / "manifest.jsonl").exists()
    ga_crcs = _member_crcs(checkout)
    raw_at_init = checkout.raw_hashes()
    assert len(raw_at_init) == 10

    init = run("init", cwd=checkout.base)
    assert init.returncode == 0, init.stderr
    said = init.stderr.decode()
    assert f"adopted {len(ga_sessions)} sessions GenericAgent archived" in said and "lossy" in said
    assert "compress_session.genericagent.py" in said and "memctl_recall.py" in said
    assert (checkout.l4 / "compress_session.genericagent.py").read_bytes() == \
        (UPSTREAM / "memory/L4_raw_sessions/compress_session.py").read_bytes()
    again = run("init", cwd=checkout.base)  # idempotent: nothing adopted or written twice
    assert again.returncode == 0 and "adopted" not in again.stderr.decode() and "wrote" not in again.stderr.decode()
    assert len(_manifest(checkout.l4)) == len(ga_sessions)

    archived = run("archive", "--keep-newest", "3", cwd=checkout.base)
    assert archived.returncode == 0, archived.stderr
    status = json.loads(run("status", "--json", cwd=checkout.base).stdout)
    assert status["l4_sessions"] == {"memctl": 7, "genericagent": len(ga_sessions)}
    assert status["layers"]["L4"]["entries"] == 7 + len(ga_sessions)
    plain = run("status", cwd=checkout.base).stdout.decode()
    assert f"L4 archived by\tmemctl 7 sessions\tGenericAgent {len(ga_sessions)} sessions" in plain
    shared_zip = checkout.l4 / ga_sessions[max(ga_sessions)]
    memctl_names = {r["member"] for r in _manifest(checkout.l4) if not r.get("origin") and r["zip"] == shared_zip.name}
    with zipfile.ZipFile(shared_zip) as archive:  # new sessions join GenericAgent's monthly zip
        assert memctl_names and memctl_names <= set(archive.namelist())

    name = min(ga_sessions)
    shown = run("show", name, cwd=checkout.base)
    assert shown.returncode == 0 and b"=== Prompt ===" in shown.stdout and len(shown.stdout) > 1000
    refused = run("show", "--raw", name, cwd=checkout.base)
    assert refused.returncode == 2 and b"archived by GenericAgent" in refused.stderr and refused.stdout == b""
    found = run("search", "华东区发布日志", "-k", "50", "--json", cwd=checkout.base)
    assert found.returncode == 0
    assert {json.loads(line).get("session") for line in found.stdout.splitlines()} & set(ga_sessions)
    recent = run("recent", "-n", "20", "--json", cwd=checkout.base)
    assert set(ga_sessions) <= {json.loads(line)["name"] for line in recent.stdout.splitlines()}
    verified = run("verify", "--json", cwd=checkout.base)
    assert verified.returncode == 0, verified.stdout
    assert not [f for f in map(json.loads, verified.stdout.splitlines()) if f.get("kind") == "orphan"]

    new_logs = {**checkout.add_real_writer_logs(days=30, prefix="3"),  # GenericAgent kept writing meanwhile
                **checkout.add_real_writer_logs(days=45, prefix="4")}
    expected = checkout.raw_hashes()
    assert len(expected) == 3 + len(new_logs)
    cron = run_scheduler_l4_path(checkout, clean_env())  # GenericAgent's own scheduler, its own L4 path
    assert cron.returncode == 0 and b"'by': 'memctl'" in cron.stdout and b"'index': 'refreshed'" in cron.stdout, cron.stderr
    remaining = checkout.raw_hashes()
    assert len(remaining) == 10 and len(set(new_logs) - set(remaining)) == 4  # the 10 newest kept
    for raw_name, sha in expected.items():
        if raw_name in remaining:
            assert remaining[raw_name] == sha
            continue
        restored = run("show", "--raw", raw_name, cwd=checkout.base)
        assert restored.returncode == 0, (raw_name, restored.stderr)
        assert hashlib.sha256(restored.stdout).hexdigest() == sha, raw_name
    for raw_name, sha in raw_at_init.items():  # also the ones memctl archived before the cron ran
        if raw_name not in remaining:
            assert hashlib.sha256(run("show", "--raw", raw_name, cwd=checkout.base).stdout).hexdigest() == sha
    assert run("verify", cwd=checkout.base).returncode == 0
    assert {k: v for k, v in _member_crcs(checkout).items() if k in ga_crcs} == ga_crcs  # GenericAgent's members untouched

    undo = run("init", "--undo-genericagent", cwd=checkout.base)
    assert undo.returncode == 0 and "restored" in undo.stderr.decode()
    assert (checkout.l4 / "compress_session.py").read_bytes() == \
        (UPSTREAM / "memory/L4_raw_sessions/compress_session.py").read_bytes()
    assert not (checkout.base / "plugins" / "memctl_recall.py").exists()
    assert not (checkout.l4 / "compress_session.genericagent.py").exists()


def test_the_shim_does_nothing_destructive_when_memctl_cannot_run(tmp_path, run):
    checkout = make_checkout(tmp_path)
    checkout.add_real_writer_logs(days=-60)
    checkout.add_real_writer_logs(days=-30, prefix="1")
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    assert not (checkout.base / "plugins" / "memctl_recall.py").exists()
    shim = checkout.l4 / "compress_session.py"
    shim.write_text(shim.read_text().replace("MEMCTL = [", "MEMCTL = ['/nonexistent/python', "), encoding="utf-8")
    before = checkout.raw_hashes()
    cron = run_scheduler_l4_path(checkout, clean_env())
    assert cron.returncode == 0 and b"'errors': 1" in cron.stdout and b"nothing archived or deleted" in cron.stderr
    assert checkout.raw_hashes() == before and not list(checkout.l4.glob("*.zip"))


# ---------------------------------------------------------------- verify on a stock checkout (Must show 4)


def test_verify_on_a_fresh_checkout_warns_and_a_flipped_member_byte_is_an_error(tmp_path, run):
    checkout = make_checkout(tmp_path)
    for days, prefix in ((-60, ""), (-30, "1")):
        checkout.add_real_writer_logs(days=days, prefix=prefix)
    assert run_scheduler_l4_path(checkout, clean_env()).returncode == 0  # GenericAgent's own archive
    before_init = run("verify", "--json", cwd=checkout.base)
    assert before_init.returncode == 0, before_init.stdout
    kinds = {f["kind"] for f in map(json.loads, before_init.stdout.splitlines()) if f["type"] == "finding"}
    assert "orphan" not in kinds and {"unadopted", "permissions", "insight-bytes"} <= kinds
    assert run("init", cwd=checkout.base).returncode == 0
    report = [json.loads(line) for line in run("verify", "--json", cwd=checkout.base).stdout.splitlines()]
    findings, summary = report[:-1], report[-1]
    assert summary["errors"] == 0 and summary["warnings"] > 0
    messages = " ".join(f["message"] for f in findings)
    assert "现空" not in messages  # `L2: 现空` says L2 is empty; it names no section
    assert run("verify", "--strict", cwd=checkout.base).returncode == 3

    (checkout.memory / "keychain.py").write_text("# stub\n")
    after = " ".join(f["message"] for f in map(json.loads, run("verify", "--json", cwd=checkout.base).stdout.splitlines())
                     if f["type"] == "finding")
    assert "'keychain'" not in after and "'procmem_scanner'" in after  # `name` resolves to name.py

    record = _manifest(checkout.l4)[0]
    zip_path = checkout.l4 / record["zip"]
    with zipfile.ZipFile(zip_path) as archive:
        info = archive.getinfo(record["member"])
    data = bytearray(zip_path.read_bytes())
    name_len = int.from_bytes(data[info.header_offset + 26: info.header_offset + 28], "little")
    extra_len = int.from_bytes(data[info.header_offset + 28: info.header_offset + 30], "little")
    data[info.header_offset + 30 + name_len + extra_len + info.compress_size // 2] ^= 0x01
    zip_path.write_bytes(bytes(data))
    flipped = run("verify", cwd=checkout.base)
    assert flipped.returncode == 3 and f"{record['member']}: member:".encode() in flipped.stdout


# ---------------------------------------------------------------- members GenericAgent can read (Must show 2)


def _long_logs(folder: Path) -> dict[str, Path]:
    """Logs long enough for sliding <history> windows (24 turns), both formats and languages."""
    import random
    from datetime import datetime

    from memctl.l4 import loggen

    logs = {}
    for number, (writer, chinese) in enumerate(((loggen.format_a, True), (loggen.format_b, False),
                                                (loggen.format_a, False), (loggen.format_b, True))):
        text = writer(datetime(2026, 3, 1 + number, 9, 0), 24, random.Random(number), output_size=1500, chinese=chinese)
        path = folder / f"model_responses_90000{number}.txt"
        path.write_text(text, encoding="utf-8")
        logs[path.name] = path
    return logs


def test_genericagents_extract_history_reads_memctls_members_fully(tmp_path, run):
    checkout = make_checkout(tmp_path)
    logs = {name: REAL_WRITER / name for name in real_writer_logs()} | _long_logs(tmp_path)
    for name, path in logs.items():
        checkout.add_log(name, path.read_bytes(), datetime.fromtimestamp(1767225600))
    assert run("archive", "--keep-newest", "0", cwd=checkout.base).returncode == 0
    archiver = load_upstream_archiver(tmp_path / "oracle")
    records = {r["source"]: r for r in _manifest(checkout.l4)}
    compared = 0
    for name, path in logs.items():
        own = tmp_path / "ga" / name
        own.mkdir(parents=True)
        destination, _ = archiver.compress_session(str(path), str(own))  # GenericAgent's own member
        theirs = collections.Counter(archiver.extract_history(destination)) if destination else collections.Counter()
        with zipfile.ZipFile(checkout.l4 / records[name]["zip"]) as archive:
            member = own / "memctl-member.txt"
            member.write_bytes(archive.read(records[name]["member"]))
        ours = collections.Counter(archiver.extract_history(str(member)))
        assert not theirs - ours, (name, theirs - ours)
        compared += sum(theirs.values())
        restored = run("show", "--raw", records[name]["name"], cwd=checkout.base)
        assert hashlib.sha256(restored.stdout).hexdigest() == records[name]["sha256"]
    assert compared >= 4 * 24  # the long logs' windows were really compared


def test_a_v1_member_still_decodes(tmp_path):
    import io
    import re

    from memctl.l4.codec import HEADER, HEADER_V1, decode_stream, encode_stream

    data = next(iter(_long_logs(tmp_path).values())).read_bytes()
    encoded = io.BytesIO()
    encode_stream(io.BytesIO(data), encoded.write)
    v2 = encoded.getvalue()
    assert "⟪memctl:window ".encode() in v2
    v1 = HEADER_V1 + re.sub("(⟪memctl:window \\d+⟫)(?:\\\\n|\\n)".encode(), rb"\1", v2[len(HEADER):])
    assert v1 != v2
    for stream in (v1, v2):
        sha, size = decode_stream(io.BytesIO(stream), lambda _: None)
        assert sha == hashlib.sha256(data).hexdigest() and size == len(data)


# ---------------------------------------------------------------- the recall plugin (Must show 5)


def _fire_agent_before(checkout, request: str) -> tuple[list[dict], float]:
    """Load plugins/ with GenericAgent's own hooks.discover_and_load, fire trigger('agent_before')."""
    import importlib
    import sys
    import time

    sys.path.insert(0, str(checkout.base))
    try:
        for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
            del sys.modules[name]
        hooks = importlib.import_module("plugins.hooks")
        hooks.discover_and_load()
        messages = [{"role": "system", "content": "system prompt"}, {"role": "user", "content": request}]
        started = time.monotonic()
        hooks.trigger("agent_before", {"messages": messages, "user_input": request, "handler": None})
        return messages, time.monotonic() - started
    finally:
        sys.path.remove(str(checkout.base))
        for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
            del sys.modules[name]


def test_the_recall_plugin_appends_compose_and_never_breaks_a_turn(tmp_path, run, monkeypatch, capfd):
    checkout = make_checkout(tmp_path)
    assert run("init", cwd=checkout.base).returncode == 0
    (checkout.memory / "global_mem.txt").write_text("## [NAS]\n- backup target: nas-07, port 2222\n", encoding="utf-8")
    monkeypatch.setenv("MEMCTL_RECALL_TIMEOUT", "20")  # a loaded machine; the default is 1.5 s
    messages, _ = _fire_agent_before(checkout, "what port does the NAS backup use?")
    assert messages[1]["content"].startswith("what port does the NAS backup use?\n\n")
    assert "2222" in messages[1]["content"] and "recalled memory" in messages[1]["content"].lower()

    fake = tmp_path / "fake"
    (fake / "memctl").mkdir(parents=True)
    (fake / "memctl" / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))  # `python -m memctl` now hangs
    monkeypatch.chdir(tmp_path)  # (-m looks in the current folder first: not in this checkout)
    monkeypatch.setenv("MEMCTL_RECALL_TIMEOUT", "1.5")
    capfd.readouterr()
    messages, took = _fire_agent_before(checkout, "what port does the NAS backup use?")
    assert messages[1]["content"] == "what port does the NAS backup use?"
    assert took < 30  # the limit stopped it, long before the 60 s hang
    err = capfd.readouterr().err
    assert err.count("[memctl_recall]") == 1 and "longer than 1.5s" in err

    (fake / "memctl" / "__main__.py").write_text("import sys\nsys.exit('boom')\n")
    messages, _ = _fire_agent_before(checkout, "what port does the NAS backup use?")
    assert messages[1]["content"] == "what port does the NAS backup use?"
    assert "exited 1: boom" in capfd.readouterr().err


# ---------------------------------------------------------------- L1 is never lost (Must show 3)


@pytest.mark.parametrize("template", ["global_mem_insight_template.txt", "global_mem_insight_template_en.txt"])
def test_insight_rebuild_keeps_every_hand_written_line_and_is_a_fixpoint(tmp_path, run, template):
    checkout = make_checkout(tmp_path)
    assert run("init", cwd=checkout.base).returncode == 0
    original = (UPSTREAM / "assets" / template).read_text(encoding="utf-8")
    head, rules = original.split("[RULES]", 1)
    added = ["部署: deploy_sop(蓝绿发布, 周五不发)", "note to self: the NAS is nas-07, ask before rebooting it"]
    written = head.rstrip("\n") + "\n" + "\n".join(added) + "\n\n[RULES]" + rules.rstrip("\n") + "\n9. 周五不上线\n"
    insight = checkout.memory / "global_mem_insight.txt"
    insight.write_text(written, encoding="utf-8")
    for name in ("deploy_sop.md", "tmwebdriver_sop.md", "ljqCtrl_sop.md"):
        (checkout.memory / name).write_text("# sop\n", encoding="utf-8")
    generated_kinds = ("L0", "L2", "L3", "L4", "|")  # the index lines memctl regenerates from the files
    hand_written = [line for line in written.splitlines() if line and not line.startswith(generated_kinds)]
    assert any("浏览器特殊操作" in line for line in hand_written) or any("Browser" in line for line in hand_written)

    first = run("insight", "rebuild", cwd=checkout.base)
    assert first.returncode == 0, first.stderr
    after_one = insight.read_bytes()
    second = run("insight", "rebuild", cwd=checkout.base)
    assert second.returncode == 0 and insight.read_bytes() == after_one  # a fixpoint
    text = after_one.decode("utf-8")
    assert text.splitlines()[0] == written.splitlines()[0]  # the header, in its language
    lines = text.splitlines()
    assert [line for line in lines if line in hand_written] == hand_written  # all kept, in order
    assert "L4_raw_sessions/" in text and "deploy_sop" in text
    if len(after_one) > 1024:
        assert b"they are kept" in first.stderr

    backups = sorted((checkout.memory / ".memctl" / "insight").iterdir())
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == written  # the second run saved nothing
    restored = run("insight", "restore", cwd=checkout.base)
    assert restored.returncode == 0 and insight.read_text(encoding="utf-8") == written
    assert run("insight", "restore", cwd=checkout.base).returncode == 0 and insight.read_bytes() == after_one


def test_a_history_block_without_its_zip_member_is_adopted_too(tmp_path, run):
    """GenericAgent appends all_histories.txt before it writes the zip (its defect 3): when the
    zip write fails, the session is known from its block alone."""
    checkout = make_checkout(tmp_path)
    checkout.l4.mkdir(parents=True, exist_ok=True)
    archiver = load_upstream_archiver(tmp_path / "oracle")
    block = archiver.format_history_block("0101_0900-0101_0930", ["[USER]: rotate the bk-02 key", "[Agent] rotated"])
    (checkout.l4 / "all_histories.txt").write_text("\n" + block, encoding="utf-8")
    init = run("init", "--no-plugin", cwd=checkout.base)
    assert init.returncode == 0 and "1 known only from all_histories.txt" in init.stderr.decode()
    assert json.loads(run("status", "--json", cwd=checkout.base).stdout)["l4_sessions"]["genericagent"] == 1
    shown = run("show", "0101_0900-0101_0930", cwd=checkout.base)
    assert shown.returncode == 0 and b"[USER]: rotate the bk-02 key" in shown.stdout
    assert run("verify", cwd=checkout.base).returncode == 0
    (checkout.l4 / "all_histories.txt").write_text("", encoding="utf-8")  # the block is lost: an error
    assert run("verify", cwd=checkout.base).returncode == 3


def test_verify_warns_when_genericagents_archiver_comes_back(tmp_path, run):
    checkout = make_checkout(tmp_path)
    checkout.add_real_writer_logs(days=-60)
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    assert run("archive", "--keep-newest", "0", cwd=checkout.base).returncode == 0
    assert b"archiver" not in run("verify", cwd=checkout.base).stdout
    shutil.copyfile(UPSTREAM / "memory/L4_raw_sessions/compress_session.py", checkout.l4 / "compress_session.py")  # git pull
    came_back = run("verify", cwd=checkout.base)
    assert came_back.returncode == 0 and b": archiver: GenericAgent's own archiver is active" in came_back.stdout
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0  # the same file: handed over again
    assert b"archiver" not in run("verify", cwd=checkout.base).stdout


def test_forget_purge_reaches_into_genericagents_members(tmp_path, run):
    checkout = make_checkout(tmp_path)
    for days, prefix in ((-60, ""), (-30, "1")):
        checkout.add_real_writer_logs(days=days, prefix=prefix)
    assert run_scheduler_l4_path(checkout, clean_env()).returncode == 0
    assert run("init", "--no-plugin", cwd=checkout.base).returncode == 0
    assert run("archive", "--keep-newest", "0", cwd=checkout.base).returncode == 0
    needle = "华东区发布日志".encode()

    def holding() -> list[str]:
        found = []
        for zip_path in checkout.l4.glob("*.zip"):
            with zipfile.ZipFile(zip_path) as archive:
                found += [f"{zip_path.name}:{n}" for n in archive.namelist() if needle in archive.read(n)]
        return found

    ga_members = {f"{r['zip']}:{r['member']}" for r in _manifest(checkout.l4) if r.get("origin")}
    assert set(holding()) & ga_members
    before = json.loads(run("status", "--json", cwd=checkout.base).stdout)["l4_sessions"]
    purged = run("forget", "--purge", "--match", "华东区发布日志", "--yes", cwd=checkout.base)
    assert purged.returncode == 0, purged.stderr
    assert holding() == [] and needle not in (checkout.l4 / "all_histories.txt").read_bytes()
    assert json.loads(run("status", "--json", cwd=checkout.base).stdout)["l4_sessions"] == before
    assert run("verify", cwd=checkout.base).returncode == 0
