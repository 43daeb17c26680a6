"""The write lookups (`.memctl/lookups.sqlite`) give exactly the answers of a full scan.

The same generated memory (merge and append types, near-duplicates, forgotten and purged
facts, restores) is driven through the same operations twice, once answered from the lookups
and once with `MEMCTL_LOOKUPS=0` (every query scans L5/L6): every result and the bytes of
L5, L6 and the dream log must be identical, including after L5 and L6 are changed behind
memctl's back between two writes.
"""

from __future__ import annotations

import itertools
import random
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memctl.core.config import init_root, load_settings
from memctl.core.errors import MemctlError
from memctl.longterm import forget as forget_mod
from memctl.longterm import remember as remember_mod
from memctl.longterm import store_scan
from memctl.longterm.entries import Entry, entry_line
from memctl.longterm.forget import forget_ids, purge, restore
from memctl.longterm.remember import RememberRequest, remember

START = datetime(2026, 5, 1, 9, 0, 0)
WORDS = ("deploy cache migration host backup editor shell queue index cluster token proxy "
         "rotate restart switch upgrade pin verify schedule review").split()


def _text(rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(3, 7))
    if rng.random() < 0.3:
        words.append(f"n{rng.randint(1, 9)}")
    return " ".join(words)


def _near(text: str, rng: random.Random) -> str:
    """A variant a similarity check may or may not call the same fact."""
    variants = [text.upper(), text + "!", text.replace(" ", "  "), text + " " + rng.choice(WORDS),
                " ".join(reversed(text.split())), text[:-1]]
    return rng.choice(variants)


def _memory(tmp_path: Path) -> Path:
    root = tmp_path / "base" / "memory"
    init_root(root)
    rng = random.Random(7)
    l5, l6 = [], []
    for i in range(160):
        kind = "preference" if i % 5 == 0 else "event"
        entry = Entry(id=f"a{i:04d}", text=_text(rng), type=kind, topic=f"t{i % 7}" if kind == "preference" else "",
                      created="2026-04-01T00:00:00", updated="2026-04-01T00:00:00")
        l5.append(entry)
    for i in range(240):
        reason = rng.choice(["archived", "forgotten", "superseded", "forgotten"])
        l6.append(Entry(id=f"b{i:04d}", text=_text(rng), type="event", left_at="2026-04-02T00:00:00", reason=reason,
                        note="gen"))
    l6 += [Entry(id="a0003", text=l5[3].text, type=l5[3].type, reason="forgotten", left_at="2026-04-03T00:00:00")]
    (root / "long_term.jsonl").write_bytes(b"".join(entry_line(e) for e in l5) + b"not json\n")
    (root / "archive.jsonl").write_bytes(b"".join(entry_line(e) for e in l6))
    settings = load_settings(root)
    purge(settings, ["b0001", "b0002"], [], "gen", START, 0)
    return root


def _operations(seed: int, count: int):
    rng = random.Random(seed)
    pool = [_text(rng) for _ in range(30)]
    for step in range(count):
        pick = rng.random()
        if pick < 0.45:
            base = rng.choice(pool) if rng.random() < 0.6 else _text(rng)
            yield ("remember", _near(base, rng) if rng.random() < 0.5 else base, "event", "", rng.random() < 0.05)
        elif pick < 0.65:
            yield ("remember", _text(rng), "preference", f"T{rng.randint(0, 8)}", False)
        elif pick < 0.8:
            yield ("forget", [f"{rng.choice('ab')}{rng.randint(0, 170):04d}" for _ in range(rng.randint(1, 3))])
        else:
            yield ("restore", f"{rng.choice('ab')}{rng.randint(0, 240):04d}")
        if step % 17 == 16:
            yield ("edit", rng.randint(0, 10 ** 6))


def _hand_edit(root: Path, seed: int) -> None:
    """What a person or another program does to L5/L6 between two writes."""
    rng = random.Random(seed)
    l5 = root / "long_term.jsonl"
    lines = l5.read_bytes().splitlines(keepends=True)
    choice = rng.randint(0, 3)
    if choice == 0 and lines:  # edit a line's text in place, same length
        index = rng.randrange(len(lines))
        lines[index] = lines[index].replace(b"deploy", b"DEPLOY").replace(b"cache", b"CACHE")
        l5.write_bytes(b"".join(lines))
    elif choice == 1:  # another program appends
        with open(l5, "ab") as handle:
            handle.write(entry_line(Entry(id=f"h{seed}", text=_text(rng), type="event")))
    elif choice == 2 and len(lines) > 3:  # a line deleted by hand
        del lines[rng.randrange(len(lines))]
        l5.write_bytes(b"".join(lines))
    else:  # L6 grows behind memctl's back: a forgotten fact
        with open(root / "archive.jsonl", "ab") as handle:
            handle.write(entry_line(Entry(id=f"g{seed}", text=_text(rng), type="event", reason="forgotten")))


SCANS = ("count", "rows_of", "active_row", "last_row", "current", "candidates", "replaced", "without",
         "gone_for_good")


def _count_scans(monkeypatch) -> list[str]:
    """Record every query answered by reading a whole file."""
    calls: list[str] = []
    for name in SCANS:
        original = getattr(store_scan, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        monkeypatch.setattr(store_scan, name, counted)
    return calls


def _drive(root: Path, monkeypatch, lookups: bool, seed: int) -> list:
    monkeypatch.setenv("MEMCTL_LOOKUPS", "1" if lookups else "0")
    counter = itertools.count()
    monkeypatch.setattr(remember_mod, "new_id", lambda prefix="m": f"{prefix}{next(counter):012x}")
    monkeypatch.setattr(forget_mod, "new_id", lambda prefix="m": f"{prefix}{next(counter):012x}")
    settings = load_settings(root)
    outcomes = []
    for step, op in enumerate(_operations(seed, 160)):
        now = START + timedelta(minutes=step)
        try:
            if op[0] == "remember":
                result = remember(settings, RememberRequest(op[1], op[2], op[3], force=op[4]), now, 0)
                outcomes.append(result.to_dict())
            elif op[0] == "forget":
                plan, result = forget_ids(settings, op[1], "test", now, 0)
                outcomes.append((result.forgotten, plan.missing, result.skipped))
            elif op[0] == "restore":
                outcomes.append(restore(settings, op[1], now, 0).to_dict())
            else:
                _hand_edit(root, op[1])
                outcomes.append("edit")
        except MemctlError as exc:
            outcomes.append(("error", str(exc)))
    return outcomes


def _files(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl")
            if (root / name).exists()}


@pytest.mark.parametrize("seed", [1, 2])
def test_lookups_answer_exactly_as_the_full_scan(tmp_path, monkeypatch, seed):
    base = _memory(tmp_path)
    fast, slow = tmp_path / "fast" / "memory", tmp_path / "slow" / "memory"
    shutil.copytree(base, fast)
    shutil.copytree(base, slow)
    scans = _count_scans(monkeypatch)
    with_lookups = _drive(fast, monkeypatch, True, seed)
    assert scans == []  # every answer came from the lookups, hand edits included (rebuilt or caught up)
    by_scan = _drive(slow, monkeypatch, False, seed)
    assert len(scans) > 100
    assert with_lookups == by_scan
    assert _files(fast) == _files(slow)
    assert (fast / ".memctl" / "lookups.sqlite").exists() and not (slow / ".memctl" / "lookups.sqlite").exists()
    actions = {o.get("action") for o in with_lookups if isinstance(o, dict)}
    assert {"added", "seen", "superseded"} <= actions  # the run met every write policy
    errors = " ".join(o[1] for o in with_lookups if isinstance(o, tuple) and o[0] == "error")
    assert "was forgotten as" in errors and "already active" in errors


def test_deleting_the_lookups_loses_nothing(tmp_path, monkeypatch):
    base = _memory(tmp_path)
    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    settings = load_settings(base)
    first = remember(settings, RememberRequest("deploy cache pinned on n3", "event"), START, 0)
    shutil.rmtree(base / ".memctl")
    (base / ".memctl").mkdir()
    again = remember(settings, RememberRequest("deploy cache pinned on n3", "event"), START, 0)
    assert first.action == "added" and again.action == "seen" and again.entry.id == first.entry.id


def test_the_key_match_is_the_reference_match_on_random_texts():
    """best_key_match over stored keys == best_match over the texts (scores, ties, numbers)."""
    from memctl.longterm.policies import best_key_match, best_match, match_key

    rng = random.Random(11)
    alphabet = ["deploy", "Deploy", "cache", "n3", "n4", "bk-01", "bk-02", "备份", "凌晨", "!", ",", "  ", "\t",
                "héllo", "x", "3"]
    checked = 0
    for _ in range(3000):
        texts = [" ".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(0, 30))]
        query = " ".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        cutoff = rng.choice([0, 50, 70, 88, 95, 100])
        expected = best_match(query, texts, cutoff)
        assert best_key_match(query, [match_key(t) for t in texts], cutoff) == expected, (query, texts, cutoff)
        checked += expected is not None
    assert checked > 500


def test_a_planted_link_in_place_of_the_lookups_is_never_written_through(tmp_path, monkeypatch):
    base = _memory(tmp_path)
    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    (base / ".memctl" / "lookups.sqlite").symlink_to(elsewhere)
    result = remember(load_settings(base), RememberRequest("deploy cache pinned on n3", "event"), START, 0)
    assert result.action == "added" and elsewhere.read_bytes() == b""


def _after_lookups_changed(tmp_path, monkeypatch, change):
    """A remember, the lookups changed by `change(db)`, then a near-duplicate remembered: it
    must find the first fact; returns the lookups for the checks."""
    import sqlite3

    base = _memory(tmp_path)
    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    settings = load_settings(base)
    first = remember(settings, RememberRequest("deploy cache pinned on n3", "event"), START, 0)
    db = sqlite3.connect(base / ".memctl" / "lookups.sqlite", isolation_level=None)
    change(db)
    db.close()
    again = remember(settings, RememberRequest("Deploy cache pinned on n3!", "event"), START, 0)
    assert again.action == "seen" and again.entry.id == first.entry.id
    return sqlite3.connect(base / ".memctl" / "lookups.sqlite")


@pytest.mark.parametrize("version", [2, 3, 4])
def test_older_lookups_are_migrated_in_place_not_rebuilt(tmp_path, monkeypatch, version):
    """Schema 3 added the candidates' covering index, 4 the class counts of each key, 5 their
    signature (and the digits' count in the index) and L6's fingerprint index: an upgrade
    fills them from the stored keys, not by a rebuild of both files (seconds at 300k)."""
    from memctl.longterm.policies import class_signature, key_classes

    classes = ", ".join(f"c{index}" for index in range(8))

    def downgrade(db):
        db.execute("DROP INDEX l5_cand")
        db.execute("DROP INDEX l6_sha")
        db.execute("ALTER TABLE l5 DROP COLUMN sig")
        if version < 4:
            for index in range(8):  # the table as versions 2 and 3 had it
                db.execute(f"ALTER TABLE l5 DROP COLUMN c{index}")
        if version == 2:
            db.execute("CREATE INDEX l5_len ON l5(type, klen)")
        elif version == 3:
            db.execute("CREATE INDEX l5_cand ON l5(type, klen, seq, key)")
        else:
            db.execute(f"CREATE INDEX l5_cand ON l5(type, klen, seq, {classes}, key)")
        planted = ", 0" * 8 if version == 4 else ""
        db.execute(f"INSERT INTO l5 VALUES (1000000, 'planted', 'never-queried', '', 1, 'x'{planted})")  # a rebuild drops it
        db.execute(f"PRAGMA user_version={version}")

    db = _after_lookups_changed(tmp_path, monkeypatch, downgrade)
    indexes = {name: sql for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type='index'")}
    assert db.execute("PRAGMA user_version").fetchone()[0] == 5
    assert "l5_len" not in indexes and "l5(type, klen, c1, sig, seq" in indexes["l5_cand"] and "l6_sha" in indexes
    assert db.execute("SELECT count(*) FROM l5 WHERE id='planted'").fetchone()[0] == 1
    for key, *counts, signature in db.execute(f"SELECT key, {classes}, sig FROM l5").fetchall():
        assert tuple(counts) == key_classes(key) and signature == class_signature(key_classes(key))
    db.close()


def _class_text(rng: random.Random, base: str | None) -> str:
    if base is not None and rng.random() < 0.6:  # a variant: a few characters changed
        chars = list(base)
        for _ in range(rng.randint(0, 5)):
            spot = rng.randrange(len(chars) + 1)
            if rng.random() < 0.5 and chars:
                del chars[min(spot, len(chars) - 1)]
            else:
                chars.insert(spot, rng.choice("abcehkqz 09缓存部署"))
        return "".join(chars) or "x"
    vocabulary = [*WORDS, "缓存", "部署", "迁移", "主机", "n3", "v2.1", "w07", "zq", "Ünïcode"]
    return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 9)))


VOCABULARY = ["deploy", "cache", "host", "rotated", "the", "on", "n3", "v2.1.3", "10.0.0.1", "8080", "w07",
              "缓存", "部署", "迁移", "主机", "服务器", "指标", "Ünïcode", "naïve", "!!", "--", "2026-05-01",
              "zq", "qq", "0", "99999", "ĳ", "ß", "ﬁ", "한국어", "カタカナ"]


def _adversarial_text(rng: random.Random, base: str | None) -> str:
    """Digits, punctuation, CJK, kana, Hangul, ligatures; near-duplicates made by words dropped,
    added or edited; and one key in ten long enough for the windows' ranges of lengths."""
    if base is not None and rng.random() < 0.6:
        words = base.split() or ["x"]
        for _ in range(rng.randint(0, 4)):
            edit, spot = rng.random(), rng.randrange(len(words))
            if edit < 0.3 and len(words) > 1:
                words.pop(spot)
            elif edit < 0.6:
                words.insert(spot, rng.choice(VOCABULARY))
            else:  # a digit, a letter or a CJK character swapped in: one class up, another down
                word = words[spot]
                at = rng.randrange(len(word))
                words[spot] = word[:at] + rng.choice("7aq缓.ß") + word[at + 1:]
        return " ".join(words)
    count = rng.randint(1, 9) if rng.random() < 0.9 else rng.randint(60, 140)
    return " ".join(rng.choice(VOCABULARY) for _ in range(count))


def _class_bound_keeps(query_key: str, key: str, cutoff: float) -> bool:
    """The class bound as SQL evaluates it (lookups._CLASS_BOUND: floats, the 1e-6 slack)."""
    from memctl.longterm.policies import key_classes

    classes = zip(key_classes(query_key), key_classes(key))
    return 200.0 * sum(min(q, c) for q, c in classes) >= (cutoff - 1e-6) * (len(query_key) + len(key))


@pytest.mark.parametrize("make_text, cutoffs, seed", [(_class_text, [40, 60, 75, 88, 95, 100], 11),
                                                      (_adversarial_text, [1, 10, 40, 60, 75, 88, 95, 100], 23)])
def test_the_class_bound_leaves_out_only_rows_that_cannot_reach_the_cutoff(tmp_path, monkeypatch, make_text,
                                                                          cutoffs, seed):
    """The candidates the lookups return (length bound, the digits' range and class signature of
    `policies.candidate_windows`, then the class counts, in SQL) are exactly the rows of the
    type the class bound alone keeps, in file order, and so hold every row that scores >=
    cutoff against the text: compared with the bound and with rapidfuzz over all the type's
    rows of L5, for Latin, Chinese and mixed texts and several cutoffs."""
    from rapidfuzz import fuzz

    from memctl.longterm.policies import match_key, reachable_lengths
    from memctl.longterm.recovery import writing
    from memctl.longterm.store import open_store

    monkeypatch.setenv("MEMCTL_LOOKUPS", "1")
    root = tmp_path / "memory"
    init_root(root)
    rng = random.Random(seed)
    texts: list[str] = []
    for _ in range(650):
        texts.append(make_text(rng, rng.choice(texts) if texts else None))
    entries = [Entry(id=f"c{i:04d}", text=text, type=rng.choice(["event", "lesson"]),
                     created="2026-04-01T00:00:00", updated="2026-04-01T00:00:00") for i, text in enumerate(texts)]
    (root / "long_term.jsonl").write_bytes(b"".join(entry_line(e) for e in entries))
    layout = load_settings(root).layout
    store = open_store(layout)
    compared = hits = left_out = 0
    with writing(layout, 5):
        for _ in range(150):
            query = make_text(rng, rng.choice(texts))
            kind = rng.choice(["event", "lesson"])
            cutoff = rng.choice(cutoffs)
            query_key = match_key(query)
            low, high = reachable_lengths(query, cutoff)
            rows = [(e.id, match_key(e.text)) for e in entries if e.type == kind]
            kept = [(i, k) for i, k in rows if low <= len(k) <= high and _class_bound_keeps(query_key, k, cutoff)]
            found = store.active.candidates(kind, query, cutoff)
            assert store.active._view() is not None  # answered by the lookups, not the scan
            assert found.keys == [k for _, k in kept], (query, cutoff)
            if kept:  # the row a caller picks is the row at that place
                place = rng.randrange(len(kept))
                assert found[place].entry.id == kept[place][0]
            expected = [k for _, k in rows if fuzz.ratio(query_key, k) >= cutoff]
            assert [k for k in found.keys if fuzz.ratio(query_key, k) >= cutoff] == expected, (query, cutoff)
            compared += 1
            hits += len(expected)
            left_out += len(rows) - len(found)
    assert compared == 150 and hits > 100 and left_out > 10_000  # the bound pruned, and lost nothing


@pytest.mark.parametrize("version", [1, 99])
def test_lookups_of_an_unknown_version_are_rebuilt_from_the_files(tmp_path, monkeypatch, version):
    """A version this code cannot migrate (older than 2, or newer) is emptied and rebuilt."""
    from memctl.longterm.lookups import SCHEMA_VERSION

    def unknown(db):
        db.execute("CREATE TABLE planted(x)")
        db.execute(f"PRAGMA user_version={version}")

    db = _after_lookups_changed(tmp_path, monkeypatch, unknown)
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert "planted" not in tables and db.execute("SELECT count(*) FROM l5").fetchone()[0] > 100
    db.close()
