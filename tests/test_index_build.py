"""The faster index build gives the same index: rjieba's tokens are jieba's on the MemDaily dev
set, a custom dictionary keeps jieba, a parallel build has the rows, rowids and terms of a
serial one with jieba (today's path), and `archive` / `import` leave the index current."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import signal
from datetime import datetime
from itertools import chain
from pathlib import Path

import pytest

from conftest import find_shared
from l4_helpers import make_folder
from memctl.core.config import Layout
from memctl.l4 import loggen
from memctl.recall.indexing import core_sample, prepare
from memctl.recall.indexing.documents import IndexOptions
from memctl.recall.indexing.index import SearchIndex
from memctl.recall.indexing.text import (CHINESE_STOP_WORDS, CJK_RUN, JiebaSegmenter, RJiebaSegmenter, Tokenizer, _WORD,
                                _WORD_CACHE, segmenter_for_root)

SHARED = find_shared()
needs_dev_sets = pytest.mark.skipif(SHARED is None, reason="the shared dev sets are not beside the checkout")


def dev_texts(name: str) -> list[str]:
    """Every string of a dev set's JSON (messages, questions, names, dates)."""
    data = json.loads((SHARED / "bench" / name).read_text(encoding="utf-8"))
    texts: list[str] = []
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return texts


def tokens_as_before(segmenter, text: str) -> list[str]:
    """Tokenizer.tokens as it was before the faster build (frozen here as the reference)."""
    out: list[str] = []
    for number, part in enumerate(CJK_RUN.split(text)):
        if number % 2:
            words = [w for w in segmenter(part) if w.strip() and w not in CHINESE_STOP_WORDS]
            words += [c for c in dict.fromkeys(part) if c not in CHINESE_STOP_WORDS and c not in words]
            out.extend(words)
            continue
        out.extend(chain.from_iterable(_WORD_CACHE[word] for word in _WORD.findall(part)))
    return out


@needs_dev_sets
def test_rjieba_gives_jieba_tokens_on_the_memdaily_dev_set():
    texts = dev_texts("memdaily/memdaily_dev.json")
    runs = {run for text in texts for run in CJK_RUN.findall(text)}
    assert len(runs) > 10_000  # the test looks at the real dev set, not an empty one
    fast, reference = Tokenizer.for_root(None), JiebaSegmenter(None)
    assert isinstance(fast.cjk_segmenter, RJiebaSegmenter)
    differing = [text for text in texts if fast.tokens(text) != tokens_as_before(reference, text)]
    assert differing == []


def ascii_edge_texts() -> list[str]:
    """ASCII texts made of the characters the word regex turns on: identifiers, dots and dashes
    at word edges and doubled, underscores, case, every punctuation byte, control bytes."""
    rng = random.Random(11)
    pieces = ["a", "Bk", "02", "-", ".", "_", "..", "--", "v3", "11", "Running", "THE", "sk_live", " ", "\t", "\n",
              "\x00", "\x1f", "\x7f", "'", "!", "/", "é"[:0], "x-", "-y", "3.11.", "_x_", "A-B.c"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    return texts + ["".join(map(chr, range(128))), "end. Start-up, co-op... e.g. U.S.A. -- v1.2.3-rc.1"]


@needs_dev_sets
def test_an_index_body_is_the_tokens_of_its_text_joined():
    """Tokenizer.body (ASCII: one pass over the bytes, a cache of chunks) gives the frozen
    tokenizer's terms joined by spaces, and collects the same surface words (those of ASCII
    text, and of a mixed text's ASCII parts, lowercased)."""
    texts = dev_texts("locomo/locomo_dev.json") + dev_texts("memdaily/memdaily_dev.json") + ascii_edge_texts()
    assert sum(text.isascii() for text in texts) > 5_000
    tokenizer = Tokenizer.for_root(None)
    tokenizer.collect_words = True
    reference = RJiebaSegmenter()  # jieba's tokens (the test above)
    differing = [text for text in texts if tokenizer.body(text) != " ".join(tokens_as_before(reference, text))]
    assert differing == []
    words = tokenizer.take_words(set())
    expected = {word.lower() if part.isascii() else word
                for text in texts for part in CJK_RUN.split(text)[::2] for word in _WORD.findall(part)}
    assert words == expected and tokenizer.take_words(set()) == set()
    given = {b"alpha", b"beta."}  # chunks given before (a chunk keeps its dots)
    tokenizer.start_pass()  # a new pass: every chunk is new again
    tokenizer.body("Alpha beta gamma")
    assert tokenizer.take_words(given) == {"beta", "gamma"} and b"gamma" in given
    tokenizer.body("gamma Delta")  # a chunk is collected where it is new in the pass
    assert tokenizer.take_words(set()) == {"delta"}


def test_characters_outside_jiebas_han_range_come_out_as_jieba_gives_them():
    text = "㐀㐁我们鿐鿿北京大学𠀀𠀁清华 豈更車 中华人民共和国"
    assert Tokenizer.for_root(None).tokens(text) == tokens_as_before(JiebaSegmenter(None), text)
    # a body segments its runs in one call (RJiebaSegmenter.cut_many), these among them
    assert Tokenizer.for_root(None).body(text) == " ".join(tokens_as_before(JiebaSegmenter(None), text))


def test_runs_segmented_together_are_cut_as_each_alone():
    """RJiebaSegmenter.cut_many joins the runs with newlines: each comes back as `self(run)`
    gives it, a run with a character outside jieba's blocks too."""
    segmenter = RJiebaSegmenter()
    runs = ["北京大学", "我们", "中华人民共和国", "的", "㐀我们", "清华大学生物系"]
    assert segmenter.cut_many(runs) == [segmenter(run) for run in runs]
    assert segmenter.cut_many(runs[:4]) == [segmenter(run) for run in runs[:4]]


def test_a_custom_dictionary_keeps_jieba_and_its_words(tmp_path):
    custom = tmp_path / "custom_dict.txt"
    custom.write_text("绿洲家园 20 n\n亚瑟士跑鞋\n", encoding="utf-8")
    tokenizer = Tokenizer.for_root(custom)
    assert isinstance(tokenizer.cjk_segmenter, JiebaSegmenter)
    text = "我住的小区叫绿洲家园，穿亚瑟士跑鞋。"
    terms = tokenizer.tokens(text)
    assert "绿洲家园" in terms and "亚瑟士跑鞋" in terms
    assert terms == tokens_as_before(JiebaSegmenter(custom), text)
    assert isinstance(segmenter_for_root(tmp_path / "missing.txt"), RJiebaSegmenter)


def write_dev_memory(root: Path) -> None:
    """Both dev sets' texts as L5 entries and a history file: Chinese, English, mixed."""
    texts = [t for t in dev_texts("memdaily/memdaily_dev.json") + dev_texts("locomo/locomo_dev.json") if len(t) > 3]
    (root / ".memctl").mkdir(parents=True)  # a memory root: its index lives in .memctl/
    with open(root / "long_term.jsonl", "w", encoding="utf-8") as handle:
        for number, text in enumerate(texts[: len(texts) // 2]):
            handle.write(json.dumps({"id": f"e{number}", "type": "event", "text": text,
                                     "session": f"s{number // 50}"}, ensure_ascii=False) + "\n")
    history = root / "L4_raw_sessions" / "all_histories.txt"
    history.parent.mkdir()
    lines = []
    for number, text in enumerate(texts[len(texts) // 2:]):
        if number % 40 == 0:
            lines += ["=" * 60, f"SESSION: 0101_{number % 10000:04d}-0101_0000", "=" * 60]
        lines.append("[USER]: " + " ".join(text.split()))
    history.write_text("\n".join(lines) + "\n", encoding="utf-8")


def index_contents(path: Path) -> dict[str, list]:
    db = sqlite3.connect(path)
    try:
        return {
            "items": db.execute("SELECT * FROM items ORDER BY rowid").fetchall(),
            "bodies": db.execute("SELECT rowid, body FROM fts ORDER BY rowid").fetchall(),
            "vocab": db.execute("SELECT term, df FROM vocab ORDER BY term").fetchall(),
            "surface": db.execute("SELECT word, term FROM surface ORDER BY word").fetchall(),
            "sessions": db.execute("SELECT sessions.key, sfts.body FROM sessions JOIN sfts ON sfts.rowid = "
                                   "sessions.rowid ORDER BY sessions.key").fetchall(),
        }
    finally:
        db.close()


@needs_dev_sets
def test_a_parallel_build_with_rjieba_equals_a_serial_build_with_jieba(tmp_path, monkeypatch):
    reference_root, fast_root = tmp_path / "reference", tmp_path / "fast"
    write_dev_memory(reference_root)
    write_dev_memory(fast_root)
    monkeypatch.setenv("MEMCTL_INDEX_WORKERS", "1")
    SearchIndex(Layout(reference_root), tokenizer_factory=Tokenizer.reference).rebuild()
    monkeypatch.setenv("MEMCTL_INDEX_WORKERS", "2")
    monkeypatch.setattr(prepare, "PARALLEL_AFTER_CHARS", 100_000)  # the dev sets are ~2 MB: a pool anyway
    pools = []
    real_pool = prepare.Preparer._pool_if_worth_it
    monkeypatch.setattr(prepare.Preparer, "_pool_if_worth_it", lambda self: pools.append(real_pool(self)) or pools[-1])
    SearchIndex(Layout(fast_root)).rebuild()
    assert any(pool is not None for pool in pools)  # the build did run in a pool
    reference, fast = index_contents(reference_root / ".memctl" / "index.sqlite"), \
        index_contents(fast_root / ".memctl" / "index.sqlite")
    assert len(reference["items"]) > 20_000
    for table in reference:
        assert fast[table] == reference[table], table


@needs_dev_sets
def test_a_build_that_started_on_one_core_takes_the_pool_when_the_cores_are_free_again(tmp_path, monkeypatch):
    """A busy moment at a big pass's start kept it serial for its whole length: it samples the
    cores again every RESAMPLE_CHARS and forks the pool part-way, with the same index."""
    reference_root, late_root = tmp_path / "reference", tmp_path / "late"
    write_dev_memory(reference_root)
    write_dev_memory(late_root)
    monkeypatch.setenv("MEMCTL_INDEX_WORKERS", "1")
    SearchIndex(Layout(reference_root)).rebuild()
    monkeypatch.delenv("MEMCTL_INDEX_WORKERS")
    monkeypatch.setattr(prepare, "PARALLEL_AFTER_CHARS", 100_000)
    monkeypatch.setattr(prepare.Preparer, "RESAMPLE_CHARS", 300_000)
    decided = []
    monkeypatch.setattr(prepare, "usable_cores", lambda sample=None: decided.append(1) or (1 if len(decided) == 1 else 2))
    pools = []
    real_pool = prepare.Preparer._pool_if_worth_it
    monkeypatch.setattr(prepare.Preparer, "_pool_if_worth_it", lambda self: pools.append(real_pool(self)) or pools[-1])
    SearchIndex(Layout(late_root)).rebuild()
    first_pool = next(n for n, pool in enumerate(pools) if pool is not None)
    assert len(decided) == 2 and first_pool > 2  # serial at first, the pool part-way
    reference, late = (index_contents(root / ".memctl" / "index.sqlite") for root in (reference_root, late_root))
    for table in reference:
        assert late[table] == reference[table], table


def write_sessions(l4: Path, rng: random.Random, words: list[str]) -> None:
    """Loose compressed sessions and a monthly zip of them (cut into documents with their batch)."""
    import zipfile

    l4.mkdir(exist_ok=True)

    def session(number: int) -> str:
        lines = ["⟪memctl-session v1 source=test⟫"]
        for entry in range(rng.randint(1, 12)):
            kind = "Prompt" if entry % 2 == 0 else "Response"
            lines.append(f"=== {kind} === 2026-01-{number % 28 + 1:02d} 10:{entry:02d}:00")
            lines += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 400))) for _ in range(rng.randint(1, 6))]
        return "\n".join(lines) + "\n"

    for number in range(40):
        (l4 / f"0101_{number:04d}-0101_{number:04d}.txt").write_text(session(number), encoding="utf-8")
    with zipfile.ZipFile(l4 / "2025-12.zip", "w") as archive:
        for number in range(40, 70):
            archive.writestr(f"1201_{number:04d}-1201_{number:04d}.txt", session(number))


def test_a_build_in_a_pool_equals_one_in_this_process(tmp_path, monkeypatch):
    """Same rows with the pool on and off (entries, loose sessions, a zip), and a refresh that
    removes and adds sources in between."""
    roots = [tmp_path / "serial", tmp_path / "pool"]
    for root in roots:
        (root / ".memctl").mkdir(parents=True)
        rng = random.Random(5)
        words = ["deploy", "server", "密码", "数据库", "token=abcdef123456XYZ", "bk-02", "v3.11", "会议", "日程",
                 "οδός", "Running"]
        with open(root / "long_term.jsonl", "w", encoding="utf-8") as handle:
            for number in range(3000):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
                handle.write(json.dumps({"id": f"e{number}", "type": "fact", "text": text}, ensure_ascii=False) + "\n")
        write_sessions(root / "L4_raw_sessions", rng, words)
    monkeypatch.setattr(prepare, "PARALLEL_AFTER_CHARS", 0)
    monkeypatch.setattr(prepare, "BATCH_CHARS", 5_000)
    here, sent = [], []  # batches prepared in this process while a pool ran; batches sent to it
    real_prepare, real_send = prepare.prepare_batch, prepare.ForkedWorkers.send
    monkeypatch.setattr(prepare, "prepare_batch", lambda *a: here.append(os.getpid()) or real_prepare(*a))
    monkeypatch.setattr(prepare.ForkedWorkers, "send", lambda self, parts: sent.append(1) or real_send(self, parts))
    monkeypatch.setattr(prepare.Preparer, "PREPARE_HERE_AFTER", -1.0)  # whenever the worker is busy: both sides prepare
    contents = []
    for root, workers in zip(roots, ("1", "2")):
        monkeypatch.setenv("MEMCTL_INDEX_WORKERS", workers)
        index = SearchIndex(Layout(root))
        index.rebuild()
        (root / "global_mem.txt").write_text("## [deploy]\nthe server token=abcdef123456XYZ\n", encoding="utf-8")
        (root / "long_term.jsonl").write_text("", encoding="utf-8")
        for gone in sorted((root / "L4_raw_sessions").glob("0101_000*.txt")):
            gone.unlink()
        index.ensure_fresh(wait=True)
        contents.append(index_contents(root / ".memctl" / "index.sqlite"))
        vocabulary, expected = vocabulary_and_bodies_count(root / ".memctl" / "index.sqlite")
        assert vocabulary == expected  # counted by FTS5 at the rebuild, in Python at the refresh
    assert contents[0] == contents[1] and contents[0]["items"]
    assert {row[3] for row in contents[0]["items"]} == {"L2", "L4"}  # the zip's and loose sessions' items
    assert sent and len(here) > len(sent) and set(here) == {os.getpid()}  # both sides prepared batches
    assert "[REDACTED" in contents[1]["items"][0][-1]


def archive_folder(tmp_path):
    folder = make_folder(tmp_path)
    (folder.root / ".memctl").mkdir()  # set up: the index lives in .memctl/ before and after the archive
    rng = random.Random(3)
    for number in range(3):
        folder.add_log(f"model_responses_{number}.txt", loggen.format_a(datetime(2026, 4, 5 + number, 9, 0), 4, rng))
    (folder.root / "global_mem.txt").write_text("## [deploy]\nthe canary goes first\n", encoding="utf-8")
    return folder


def test_archive_leaves_the_index_current(run, tmp_path):
    folder = archive_folder(tmp_path)
    assert run("index", "rebuild", root=folder.root).returncode == 0
    result = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["new_sessions"] == 3
    after = run("index", "refresh", root=folder.root)
    assert b"+0 -0 item(s) from 0 changed source(s)" in after.stderr + after.stdout


def test_a_failed_refresh_after_archive_is_only_a_warning(run, tmp_path):
    folder = archive_folder(tmp_path)
    assert run("index", "rebuild", root=folder.root).returncode == 0
    lock = folder.root / ".memctl" / "index.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # the index lock cannot be opened: the refresh fails
    result = run("archive", folder.raw_dir, "--keep-newest", "0", "--json", root=folder.root)
    assert result.returncode == 0
    assert json.loads(result.stdout)["new_sessions"] == 3
    assert b"warning" in result.stderr and b"not refreshed" in result.stderr
    assert b"Error" not in result.stderr  # one clear line, no exception name
    assert not list(folder.raw_dir.glob("model_responses_*.txt"))


def test_import_leaves_the_index_current(run, tmp_path):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    (root / "global_mem.txt").write_text("## [deploy]\nthe canary goes first\n", encoding="utf-8")
    assert run("index", "rebuild", root=root).returncode == 0
    lines = "".join(json.dumps({"text": f"the gazebo number {n} was painted"}) + "\n" for n in range(20))
    assert run("import", "-", "--layer", "L5", root=root, input=lines.encode()).returncode == 0
    after = run("index", "refresh", root=root)
    assert b"+0 -0 item(s) from 0 changed source(s)" in after.stderr + after.stdout
    assert run("search", "gazebo", root=root).returncode == 0


def test_a_pass_known_to_be_big_starts_its_pool_at_the_first_batch():
    """A rebuild says how much it will read: the pool takes the first batch (not only the
    batches after 2 MB, done on one core), and gives back what this process would have."""
    texts = ["the deploy token=abcdef123456XYZ went out", "会议 在 北京 bk-02 v3.11", "Running servers quickly"]

    def tokenizer() -> Tokenizer:
        made = Tokenizer.for_root(None)
        made.collect_words = True  # as the index's own
        return made

    reference = prepare.prepare_batch(tokenizer(), IndexOptions(), texts)
    small = prepare.Preparer(tokenizer(), IndexOptions(), workers=2)
    assert [prepared for _, prepared in small.submit("batch", texts)] != []  # at once, in this process
    assert small._pool is None
    big = prepare.Preparer(tokenizer(), IndexOptions(), workers=2)
    big.expected_bytes = prepare.PARALLEL_AFTER_CHARS
    try:
        assert big.submit("batch", texts) == []  # in the pool's hands
        assert big._pool is not None
        (batch, pooled), = big.drain()
    finally:
        big.close()
    assert batch == "batch"
    assert (pooled.texts, pooled.bodies, pooled.document_frequencies, pooled.words) == \
        (reference.texts, reference.bodies, reference.document_frequencies, reference.words)
    # ASCII texts give their words lowercased (the writer lowercases every surface word)
    assert "[REDACTED" in pooled.texts[0] and pooled.words == {"deploy", "token", "redacted", "went", "running",
                                                               "servers", "quickly"}


def test_prepared_batches_cross_a_pipe_unchanged():
    import pickle

    empty = prepare.Prepared([], [], {}, set())
    full = prepare.Prepared([None, "x [REDACTED:sk-key]"], ["a b", ""], {"a": 1, "b": 2, "北京": 1}, {"Alpha", "beta"})
    for original in (empty, full):
        copy = pickle.loads(pickle.dumps(original))
        assert (copy.texts, copy.bodies, copy.document_frequencies, copy.words) == \
            (original.texts, original.bodies, original.document_frequencies, original.words)


def test_index_rebuild_on_the_lean_path_reports_as_the_full_command_line(memctl_bin, tmp_path):
    """`index rebuild [--json]` runs without typer and rich, and says what the full command line says."""
    import subprocess

    from conftest import clean_env

    root = tmp_path / "memory"
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    (root / "global_mem.txt").write_text("## [deploy]\nthe canary goes first\n", encoding="utf-8")
    python = str(Path(memctl_bin).with_name("python"))
    # the console script leaves a rebuild with os._exit (no teardown): here it raises SystemExit
    lean = ("import os, sys, runpy; sys.argv = ['memctl', '--root', %r, 'index', 'rebuild'] + sys.argv[1:]\n"
            "os._exit = sys.exit\n"
            "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
            "except SystemExit as exit:\n"
            "    sys.stderr.write('exit=%%s typer=%%s' %% (exit.code, 'typer' in sys.modules))\n" % str(root))
    full = "import sys; from memctl.cli.app import main; main(['--root', %r, 'index', 'rebuild'] + sys.argv[1:])" % str(root)
    outputs = {}
    for name, probe in (("lean", lean), ("full", full)):
        for flags in ((), ("--json",)):
            done = subprocess.run([python, "-c", probe, *flags], capture_output=True, env=clean_env(), timeout=120)
            outputs[name, flags] = done
    assert outputs["lean", ()].stderr.endswith(b"exit=0 typer=False"), outputs["lean", ()].stderr
    lean_json, full_json = (json.loads(outputs[name, ("--json",)].stdout) for name in ("lean", "full"))
    assert lean_json.pop("seconds") >= 0 and full_json.pop("seconds") >= 0
    assert lean_json == full_json and lean_json["items"] == 1
    lean_line, full_line = outputs["lean", ()].stderr.split(b"exit=")[0], outputs["full", ()].stderr
    assert lean_line.split(b" in ")[0] == full_line.split(b" in ")[0] == b"indexed 1 item(s) from 34 B"


def test_the_pool_reads_how_busy_the_cores_are_now_not_the_load_average_of_the_last_minute():
    """/proc/stat sampled around a busy child: the core it keeps busy is counted; a build
    decides this only once its pass is big enough to want a pool."""
    import subprocess
    import sys

    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat here: the pool falls back to the load average")
    cores = len(os.sched_getaffinity(0))
    idle_now = core_sample.busy_cores_now(cores)
    assert idle_now is not None and 0.0 <= idle_now <= cores + 1e-9
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = core_sample.busy_cores_now(cores, window=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.5  # at least half a core: the spinner runs whatever else does
    assert prepare.Preparer(Tokenizer.for_root(None), IndexOptions()).workers is None  # not decided yet


def test_the_cores_are_sampled_while_the_first_batch_is_prepared_less_this_process_own_cpu(monkeypatch):
    """No waiting: CoreSample is read at the start of a big pass and again after its first
    batch (prepared here); what this process used meanwhile is not someone else's."""
    ticks = iter([(1000, 500), (1100, 550)])  # 100 ticks over the cores, 50 of them busy
    clock = iter([10.0, 10.25])  # this process: 0.25 cpu-s over 0.5 s, half a core
    wall = iter([100.0, 100.5])
    monkeypatch.setattr(core_sample, "_cpu_ticks", lambda: next(ticks))
    monkeypatch.setattr(core_sample.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(core_sample.time, "monotonic", lambda: next(wall))
    sample = core_sample.CoreSample()
    assert sample.others(2) == pytest.approx(0.5)  # 2 cores x half busy = 1 core, less this process's half


def test_a_big_pass_starts_with_a_small_batch_and_ends_with_smaller_ones():
    preparer = prepare.Preparer(Tokenizer.for_root(None), IndexOptions())
    assert preparer.batch_chars() == prepare.BATCH_CHARS  # a pass of unknown size: the usual batches
    preparer.expect(10_000_000)
    assert preparer.batch_chars() == preparer.FIRST_BATCH_CHARS < prepare.BATCH_CHARS
    preparer.chars_seen = 5_000_000
    assert preparer.batch_chars() == prepare.BATCH_CHARS
    preparer.chars_seen = 9_800_000
    assert preparer.FIRST_BATCH_CHARS // 2 <= preparer.batch_chars() == 200_000 // preparer.LAST_BATCHES
    preparer.chars_seen = 9_990_000
    assert preparer.batch_chars() == preparer.FIRST_BATCH_CHARS // 2
    preparer.chars_seen = 12_000_000  # more than it said it would read: the usual batches again
    assert preparer.batch_chars() == prepare.BATCH_CHARS
    grown = prepare.Preparer(Tokenizer.for_root(None), IndexOptions())  # size unknown, grown big
    grown.chars_seen = 3 * prepare.PARALLEL_AFTER_CHARS
    assert grown.batch_chars() == prepare.BATCH_CHARS


# non-ASCII letters beside plain ASCII and CJK terms: FTS5's tokenizer folds some otherwise than
# memctl (the final sigma: memctl's `οδος` is FTS5's `οδοσ`)
ODD_TEXTS = ["İstanbul'da toplantı", "Ǆungla ǅemal", "café crème brûlée naïve", "Ｆｕｌｌ ｗｉｄｔｈ",
             "ΟΔΟΣ οδός σίσυφος", "㐀㐁 extension 𠀀𠀁 supplementary 﨎 compatibility", "the deploy went out",
             "会议 在 北京 bk-02 v3.11", "² ³ ½ numbers", "Straße STRASSE"]


def vocabulary_and_bodies_count(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The index's vocabulary, and each term's count of the items whose body holds it."""
    from collections import Counter

    db = sqlite3.connect(path)
    try:
        counts: Counter[str] = Counter()
        for (body,) in db.execute("SELECT body FROM fts"):
            counts.update(set(body.split()[1:]))
        return dict(db.execute("SELECT term, df FROM vocab")), dict(counts)
    finally:
        db.close()


def test_a_rebuild_counts_its_vocabulary_as_its_bodies_hold_the_terms(tmp_path):
    """A new index takes its document frequencies from FTS5, and counts itself the documents
    whose terms FTS5 would cut otherwise: the vocabulary is still the bodies' own terms."""
    (tmp_path / ".memctl").mkdir()
    rng = random.Random(3)
    with open(tmp_path / "long_term.jsonl", "w", encoding="utf-8") as handle:
        for number in range(600):
            text = " ".join(rng.sample(ODD_TEXTS, rng.randint(1, 4)))
            handle.write(json.dumps({"id": f"e{number}", "type": "fact", "text": text}, ensure_ascii=False) + "\n")
    SearchIndex(Layout(tmp_path)).rebuild()
    path = tmp_path / ".memctl" / "index.sqlite"
    vocabulary, expected = vocabulary_and_bodies_count(path)
    assert vocabulary == expected
    assert "οδος" in vocabulary and "οδοσ" not in vocabulary and vocabulary["bk-02"] > 0
    db = sqlite3.connect(path)
    db.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, fts, 'row')")
    assert db.execute("SELECT doc FROM temp.terms WHERE term = 'οδοσ'").fetchone()  # FTS5 did fold it
    db.close()


def test_a_document_removed_from_a_new_index_leaves_its_vocabulary(tmp_path):
    from memctl.recall.indexing.documents import Doc
    from memctl.recall.indexing.store import SQLiteStore

    store = SQLiteStore.create(tmp_path / "index.sqlite")
    try:
        with store.transaction():
            writer = store.writer(Tokenizer.for_root(None), IndexOptions())
            assert writer.new_index
            writer.add("a", [Doc("a#1", "L5", "οδός trip"), Doc("a#2", "L5", "plain bk-02 words")])
            writer.remove_source("a")  # written, then removed
            writer.add("b", [Doc("b#1", "L5", "οδός again, bk-02")])
            writer.finish()
        assert not store.writer(Tokenizer.for_root(None), IndexOptions()).new_index  # only its first writer
    finally:
        store.close()
    vocabulary, expected = vocabulary_and_bodies_count(tmp_path / "index.sqlite")
    assert vocabulary == expected and vocabulary["οδός"] == 1 and "trip" not in vocabulary


def test_fts5_keeps_as_they_are_the_terms_called_plain():
    """The terms whose counts a new index takes from FTS5: every word character of the ranges
    called plain, lowercased as memctl lowercases, comes out of FTS5's tokenizer as it went in;
    the characters left out are those FTS5 folds further."""
    import re

    from memctl.recall.indexing.store import FTS_TOKENIZE

    ranges = ((0x80, 0x3000), (0x3400, 0x4DC0), (0x4E00, 0xA000), (0x1E00, 0x1F00))
    word = re.compile(r"\w")
    candidates = {("x" + chr(c)).lower() for low, high in ranges for c in range(low, high) if word.match(chr(c))}
    terms = sorted(t for t in candidates if prepare.fts5_keeps_terms(t))
    terms += ["bk-02", "v3.11", "sk_live", "a.b-c_d", "0123456789abcdefghijklmnopqrstuvwxyz", "北京-2"]
    assert len(terms) > 20_000 + 6_000 + 1_000  # the ideographs, and the letters of the other blocks
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(body, tokenize=\"{FTS_TOKENIZE}\")")
    db.execute("INSERT INTO fts(body) VALUES(?)", (" ".join(terms),))
    db.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, fts, 'row')")
    assert {term for (term,) in db.execute("SELECT term FROM temp.terms")} == set(terms)
    assert not any(prepare.fts5_keeps_terms(t) for t in ("οδος", "ſ", "µ", "i\u0307stanbul", "𠀀", "ª"))
    assert prepare.fts5_keeps_terms("café crème οδοί μύθοι москва việt")


def test_forked_workers_give_results_in_order_and_their_errors_back(monkeypatch):
    """Batches come back in the order sent, a worker's error is raised in the writer, a worker
    that died is a clear failure (not a hang), and stopping leaves no process behind."""

    from memctl.core.errors import WriteFailed

    real = prepare.prepare_batch

    def failing_on_boom(tokenizer, options, parts):
        if parts == ["boom"]:
            raise ValueError("no such batch")
        return real(tokenizer, options, parts)

    monkeypatch.setattr(prepare, "prepare_batch", failing_on_boom)  # before the fork: the workers' too
    monkeypatch.setattr(prepare, "_WORKER", (Tokenizer.for_root(None), prepare.BatchOptions(IndexOptions())))
    workers = prepare.ForkedWorkers(2)
    try:
        for number in range(4):
            workers.send([f"deploy number{number}"])
            assert workers.receive().bodies == [f"deploi number{number}"]
        workers.send(["boom"])
        with pytest.raises(ValueError, match="no such batch"):
            workers.receive()
        os.kill(workers._processes[workers.sent % 2].pid, signal.SIGKILL)
        with pytest.raises(WriteFailed, match="ended without its results"):
            workers.send(["after the kill"])
            workers.receive()
    finally:
        processes = list(workers._processes)
        workers.stop(at_once=True)
    assert processes and not any(process.is_alive() for process in processes)


def test_a_worker_takes_its_next_batch_while_it_sends_a_big_result(monkeypatch):
    """Two batches in a worker's hands, each result far bigger than a pipe holds, sent before
    either is read: the worker's receiving thread takes the second while the first result
    waits to be read (without it, the writer sending and the worker sending would wait for
    each other forever: the alarm ends the test then)."""
    monkeypatch.setattr(prepare, "_WORKER", (Tokenizer.for_root(None), prepare.BatchOptions(IndexOptions())))
    texts = [[f"deploy{number} " * 200_000] for number in range(2)]  # ~2 MB each way
    workers = prepare.ForkedWorkers(1)
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the writer and the worker waited for each other"))
    signal.alarm(60)
    try:
        assert workers.free()
        workers.send(texts[0])
        assert workers.free()  # a second batch goes to the same worker while it prepares the first
        workers.send(texts[1])
        assert not workers.free()
        assert [workers.receive().bodies[0][:8] for _ in texts] == ["deploy0 ", "deploy1 "]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        workers.stop(at_once=True)


def test_the_console_script_leaves_a_rebuild_at_once_with_its_output_and_exit_code(memctl_bin, tmp_path):
    """`index rebuild` ends with os._exit (no teardown of its caches): its report still reaches
    the pipe, and a failure still exits 2 with its message."""
    import subprocess

    from conftest import clean_env

    root = tmp_path / "memory"
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    (root / "global_mem.txt").write_text("## [deploy]\nthe canary goes first\n", encoding="utf-8")
    done = subprocess.run([memctl_bin, "--root", str(root), "index", "rebuild", "--json"], capture_output=True,
                          env=clean_env(), timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["items"] == 1
    plain = subprocess.run([memctl_bin, "--root", str(root), "index", "rebuild"], capture_output=True,
                           env=clean_env(), timeout=120)
    assert plain.returncode == 0 and plain.stderr.startswith(b"indexed 1 item(s)")
    index = root / ".memctl" / "index.sqlite"
    index.unlink()
    index.symlink_to(tmp_path / "elsewhere")  # a planted link: refused
    refused = subprocess.run([memctl_bin, "--root", str(root), "index", "rebuild"], capture_output=True,
                             env=clean_env(), timeout=120)
    assert refused.returncode == 2 and b"error" in refused.stderr.lower() and not (tmp_path / "elsewhere").exists()


def test_the_writer_prepares_a_batch_itself_only_when_the_wait_for_the_worker_would_be_long():
    import time

    preparer = prepare.Preparer(Tokenizer.for_root(None), IndexOptions())
    preparer._seconds_per_char = 1e-7  # 0.1 s for a million characters here
    now = time.perf_counter()
    preparer._in_flight.append(["worker's batch", None, now + 10.0])  # the worker: 10 s to go
    assert preparer._sooner_here(1_000_000)
    preparer._in_flight[0][2] = now + 0.01  # 10 ms to go: waiting beats 0.1 s here
    assert not preparer._sooner_here(1_000_000)
    preparer._in_flight[0][2] = now + 10.0
    preparer._in_flight.append(["held here", "a Prepared", 0.0])  # one already prepared here waits
    assert not preparer._sooner_here(1_000_000)


@pytest.mark.parametrize("expected_bytes, override, forked", [
    (prepare.PARALLEL_AFTER_CHARS, "", (2, 2)),  # any pass worth a pool: two batches in each worker's hands
    (100 * prepare.PARALLEL_AFTER_CHARS, "", (2, 2)),
    (prepare.PARALLEL_AFTER_CHARS, "2", (1, 1)),  # taken as it is; the command prepares too: one each
])
def test_a_long_pass_forks_a_worker_for_every_usable_core(monkeypatch, expected_bytes, override, forked):
    made = []

    class Recorded:
        def __init__(self, count, depth):
            made.append((count, depth))

    monkeypatch.setattr(prepare, "ForkedWorkers", Recorded)
    monkeypatch.setenv("MEMCTL_INDEX_WORKERS", override)
    preparer = prepare.Preparer(Tokenizer.for_root(None), IndexOptions(), workers=2)
    preparer.expected_bytes = expected_bytes
    assert isinstance(preparer._pool_if_worth_it(), Recorded)
    assert made == [forked]


def test_a_pool_beside_other_work_forks_one_worker_fewer_and_niced_work_is_not_other_work(monkeypatch):
    """Beside a core's worth of other work the command prepares too (one worker fewer); niced
    processes' time reads as idle (they yield to a build)."""
    import io

    class Sample:
        def __init__(self, others):
            self.value = others

        def others(self, cores):
            return self.value

    monkeypatch.setenv("MEMCTL_INDEX_WORKERS", "")
    forks = []
    for others in (0.1, 1.0):
        preparer = prepare.Preparer(Tokenizer.for_root(None), IndexOptions(), workers=2)
        preparer._sample = Sample(others)
        forks.append(preparer._workers_to_fork())
    assert forks == [2, 1]
    stat = "cpu  100 40 20 300 10 0 0 0 0 0\ncpu0 1 2 3 4\n"  # user nice system idle iowait ...
    monkeypatch.setattr(core_sample, "open", lambda *a, **k: io.BytesIO(stat.encode()), raising=False)
    assert core_sample._cpu_ticks() == (470, 350)  # idle: 300 idle + 10 iowait + 40 niced


@pytest.mark.parametrize("argv, rebuild", [
    (["index", "rebuild"], True), (["--root", "/m", "--debug", "index", "rebuild", "--json"], True),
    (["search", "index", "rebuild"], False),  # a search for those words is not left at once
    (["--root", "index", "rebuild"], False), (["--root"], False),
])
def test_only_an_index_rebuild_is_left_at_once(argv, rebuild):
    from memctl.cli.lean import is_index_rebuild

    assert is_index_rebuild(argv) is rebuild
