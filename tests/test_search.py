"""`memctl search` through the installed command: Chinese, aliases, typos, filters, output
modes, exit codes, a corrupt index, a closed pipe, batch queries and the reference log."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Backend, clean_env, memctl_executable

ITEMS = [
    {"id": "zh-boss", "text": "我的上司名叫赵雅琳，她在深圳上班。", "session": "s1", "date": "2024-04-01T08:39:00"},
    {"id": "zh-deploy", "text": "昨天部署了 bk-02 服务器，用的是 v3 配置。", "session": "s1", "date": "2024-04-02T10:00:00"},
    {"id": "en-trust", "text": "The onboarding note: do trust verification before granting access.",
     "session": "s2", "date": "2024-05-01T09:00:00"},
    {"id": "en-kube", "text": "Rolled back the kubernetes ingress after the certificate expired.",
     "session": "s2", "date": "2024-06-15T12:00:00", "type": "case"},
    {"id": "en-tea", "text": "Caroline prefers green tea in the afternoon.", "session": "s3",
     "date": "2024-07-01T16:00:00", "type": "preference"},
]


def write_items(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    return path


def build_memory(root: Path, backend: Backend) -> Path:
    """A root with the items in L5 and a built index, on the given backend."""
    exe = memctl_executable()
    subprocess.run([exe, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    backend.use(root)
    env = clean_env(**backend.env)
    items = write_items(root.parent / "items.jsonl", ITEMS)
    subprocess.run([exe, "--root", str(root), "import", str(items), "--layer", "L5"], check=True,
                   capture_output=True, env=env)
    (root / "aliases.txt").write_text("five-factor = trust verification\n", encoding="utf-8")
    subprocess.run([exe, "--root", str(root), "index", "rebuild"], check=True, capture_output=True, env=env)
    return root


@pytest.fixture(scope="module")
def memory(tmp_path_factory) -> Path:
    """One root with the items in L5 and a built index (jieba runs once for the module)."""
    return build_memory(tmp_path_factory.mktemp("search") / "memory", Backend("files"))


@pytest.fixture(scope="module")
def memory_both(request, tmp_path_factory, backend) -> Path:
    """The same memory with its index on each backend in turn: the tests using it hold on both."""
    if backend.name == "files":
        return request.getfixturevalue("memory")
    return build_memory(tmp_path_factory.mktemp("search-pg") / "memory", backend)


def search(run, root: Path, *args: str):
    return run("search", *args, "--json", root=root)


def ids(result) -> list[str]:
    return [json.loads(line).get("id") for line in result.stdout.decode().splitlines()]


def test_chinese_and_mixed_queries_find_what_fts5_default_tokenizer_misses(run, memory_both, tmp_path):
    chinese = search(run, memory_both, "上司叫什么名字")
    mixed = search(run, memory_both, "bk-02 部署")
    assert chinese.returncode == 0 and ids(chinese)[0] == "zh-boss"
    assert mixed.returncode == 0 and ids(mixed)[0] == "zh-deploy"
    # the same texts in a plain FTS5 table with its default tokenizer (unicode61) find nothing
    plain = sqlite3.connect(":memory:")
    plain.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    plain.executemany("INSERT INTO t(body) VALUES(?)", [(i["text"],) for i in ITEMS])
    assert plain.execute("SELECT count(*) FROM t WHERE t MATCH ?", ("上司",)).fetchone()[0] == 0
    assert plain.execute("SELECT count(*) FROM t WHERE t MATCH ?", ('"部署"',)).fetchone()[0] == 0


def test_alias_links_five_factor_to_trust_verification(run, memory_both):
    result = search(run, memory_both, "five-factor")
    assert result.returncode == 0
    assert ids(result)[0] == "en-trust"


def test_one_letter_typo_in_a_rare_word_still_finds_the_item(run, memory_both):
    result = search(run, memory_both, "kubernetes ingres certifcate")
    assert result.returncode == 0
    assert ids(result)[0] == "en-kube"


def test_no_match_exits_1_with_empty_stdout(run, memory_both):
    result = run("search", "xylophone quartz", root=memory_both)
    assert result.returncode == 1
    assert result.stdout == b""


def test_bad_usage_exits_2(run, memory):
    result = run("search", "tea", "--mode", "bogus", root=memory)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr


def test_since_and_until_filter_by_date(run, memory_both):
    everything = ids(search(run, memory_both, "kubernetes trust tea"))
    assert {"en-kube", "en-trust", "en-tea"} <= set(everything)
    after = ids(search(run, memory_both, "kubernetes trust tea", "--since", "2024-06-01"))
    assert set(after) == {"en-kube", "en-tea"}
    window = ids(search(run, memory_both, "kubernetes trust tea", "--since", "2024-05-01", "--until", "2024-06-15"))
    assert set(window) == {"en-trust", "en-kube"}
    assert run("search", "tea", "--since", "not a date at all", root=memory_both).returncode == 2


def test_type_filter(run, memory_both):
    assert ids(search(run, memory_both, "kubernetes tea", "--type", "preference")) == ["en-tea"]


def test_json_lines_parse_and_carry_the_item_fields(run, memory_both):
    result = search(run, memory_both, "green tea")
    lines = result.stdout.decode().splitlines()
    assert lines
    hit = json.loads(lines[0])
    assert {"ref", "layer", "score", "date", "type", "text", "id"} <= set(hit)
    assert hit["ref"] == "L5:en-tea" and hit["layer"] == "L5" and hit["type"] == "preference"
    assert hit["date"].startswith("2024-07-01")


def test_piped_output_is_one_tab_separated_hit_a_line(run, memory):
    result = run("search", "green tea", root=memory)
    first = result.stdout.decode().splitlines()[0].split("\t")
    assert len(first) == 4
    ref, layer, score, snippet = first
    assert ref == "L5:en-tea" and layer == "L5" and float(score) > 0 and "green tea" in snippet


def test_batch_queries_give_one_json_line_per_hit_with_qid(run, memory_both, tmp_path):
    queries = write_items(tmp_path / "q.jsonl", [{"qid": "a", "query": "green tea"}, {"qid": "b", "query": "上司"}])
    result = run("search", "--queries", queries, "-k", "2", root=memory_both)
    hits = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert result.returncode == 0
    assert {h["qid"] for h in hits} == {"a", "b"}
    assert [h["id"] for h in hits if h["qid"] == "a"][0] == "en-tea"


def test_l5_hits_are_recorded_in_refs_log(run, memory):
    log = memory / ".memctl" / "refs.log"
    before = log.read_text().count("\n") if log.exists() else 0
    assert run("search", "green tea", "-k", "1", root=memory).returncode == 0
    lines = log.read_text().splitlines()
    assert len(lines) == before + 1
    assert lines[-1].split("\t")[1] == "en-tea"


def test_english_and_chinese_queries_do_not_import_jieba(memory):
    """A search loads no jieba dictionary: English never needs it, Chinese uses the index's vocabulary."""
    probe = textwrap.dedent(f"""
        import sys
        from memctl.core.config import Layout
        from memctl.recall.search import SearchRequest, Searcher
        from pathlib import Path
        s = Searcher(Layout(Path({str(memory)!r})))
        english = s.search(SearchRequest("kubernetes certificate"))
        chinese = s.search(SearchRequest("上司叫什么"))
        print(english[0].item_id, chinese[0].item_id, "jieba" in sys.modules or "rjieba" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, env=clean_env(), check=True)
    assert out.stdout.decode().split() == ["en-kube", "zh-boss", "False"]


def test_corrupt_index_is_rebuilt_silently(run, memory):
    index = memory / ".memctl" / "index.sqlite"
    index.write_bytes(b"this is not a database" * 100)
    result = run("search", "green tea", root=memory)
    assert result.returncode == 0
    assert result.stderr == b""
    assert result.stdout.startswith(b"L5:en-tea")
    index.unlink()
    assert run("search", "green tea", root=memory).returncode == 0


def test_closed_pipe_gives_no_traceback(memory, tmp_path):
    many = write_items(tmp_path / "many.jsonl",
                       [{"id": f"n{i}", "text": f"note {i} about the shared deployment pipeline"} for i in range(300)])
    exe = memctl_executable()
    subprocess.run([exe, "--root", str(memory), "import", str(many)], check=True, capture_output=True,
                   env=clean_env())
    shell = f"'{exe}' --root '{memory}' search deployment pipeline --layers L6 -k 300 | head -1"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, env=clean_env())
    assert result.stdout.count(b"\n") == 1
    assert b"Traceback" not in result.stderr and b"Error" not in result.stderr


def test_modes_choose_layers_and_k(run, memory_both):
    reply = run("search", "tea kubernetes trust 上司 部署", "--mode", "reply", "--json", root=memory_both)
    hits = [json.loads(line) for line in reply.stdout.decode().splitlines()]
    assert len(hits) == 3 and all(h["layer"] in ("L5", "L4", "L2") for h in hits)


def test_show_prints_every_kind_of_ref_including_a_zipped_session(run, tmp_path):
    samples = Path(__file__).resolve().parent.parent / "memctl" / "samples"
    root, raw_dir = tmp_path / "memory", tmp_path / "raw"
    raw_dir.mkdir()
    raw = (samples / "model_responses_483920.txt").read_bytes()
    (raw_dir / "model_responses_483920.txt").write_bytes(raw)
    run("init", root=root)
    archived = run("archive", raw_dir, "--min-age", "0s", "--keep-newest", "0", root=root)
    assert archived.returncode == 0, archived.stderr
    assert list((root / "L4_raw_sessions").glob("*.zip")) and not (raw_dir / "model_responses_483920.txt").exists()
    found = run("search", "weekly meeting notes", "--layers", "L4", "--json", "-k", "20", root=root)
    refs = [json.loads(line)["ref"] for line in found.stdout.decode().splitlines()]
    session_ref = next(r for r in refs if "#h" not in r)
    assert any("#h" in r for r in refs)  # its history lines are searchable too
    whole = run("show", session_ref, root=root)
    assert whole.returncode == 0 and "会议纪要" in whole.stdout.decode()
    assert run("show", session_ref, "--raw", root=root).stdout == raw
    history_ref = next(r for r in refs if "#h" in r)
    assert run("show", history_ref, root=root).stdout.strip()
    assert run("show", "L5:no-such-id", root=root).returncode == 2


def test_show_entries_sections_and_files(run, memory):
    assert json.loads(run("show", "L5:en-tea", root=memory).stdout)["text"].startswith("Caroline prefers")
    assert json.loads(run("show", "en-kube", root=memory).stdout)["type"] == "case"
    (memory / "global_mem.txt").write_text("## [HOSTS]\nweb: bk-02\n", encoding="utf-8")
    assert "web: bk-02" in run("show", "L2:HOSTS", root=memory).stdout.decode()
    assert run("show", "L3:../../etc/passwd", root=memory).returncode == 2


def test_a_small_refresh_with_chinese_text_needs_no_jieba(memory, tmp_path):
    """A new session's worth of Chinese is cut against the index's own vocabulary."""
    probe = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from memctl.core.config import Layout
        from memctl.recall.search import SearchRequest, Searcher
        root = Path({str(memory)!r})
        with open(root / "long_term.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({{"id": "zh-new", "text": "新来的上司在深圳部署了服务器"}}, ensure_ascii=False) + "\\n")
        s = Searcher(Layout(root))
        hits = s.search(SearchRequest("深圳 上司 部署"))
        print(s.refresh_report.docs_added >= 1, "zh-new" in [h.item_id for h in hits], "jieba" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, env=clean_env(), check=True)
    assert out.stdout.decode().split() == ["True", "True", "False"]


def test_lean_entry_prints_what_the_full_command_prints(memory):
    """memctl.cli.lean answers piped searches and `index refresh` without typer; the full command
    line (memctl.cli.app) must print the same for them."""
    full_cli = "import sys; from memctl.cli.app import main; main(sys.argv[1:])"

    def both(*args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
        argv = ["--root", str(memory), *args]
        lean = subprocess.run([sys.executable, "-m", "memctl.cli.lean", *argv], capture_output=True, env=clean_env())
        full = subprocess.run([sys.executable, "-c", full_cli, *argv], capture_output=True, env=clean_env())
        return lean, full

    lean, full = both("search", "green", "tea", "--json")
    assert lean.returncode == full.returncode == 0
    assert [json.loads(x)["ref"] for x in lean.stdout.decode().splitlines()] == \
        [json.loads(x)["ref"] for x in full.stdout.decode().splitlines()]
    lean, full = both("search", "green", "tea", "-k", "3")
    assert lean.returncode == full.returncode == 0 and lean.stdout == full.stdout and lean.stdout.count(b"\t") >= 3
    lean, full = both("search", "xylophonez")
    assert lean.returncode == full.returncode == 1 and lean.stdout == full.stdout == b""
    (memory / "notes.md").write_text("a new note about green tea\n")
    lean, full = both("index", "refresh")
    assert lean.returncode == full.returncode == 0
    assert lean.stderr.startswith(b"refreshed: +1") and full.stderr.startswith(b"refreshed: +0")


# ---------------------------------------------------------------- ranking rules, each on a small real memory

def small_memory(run, tmp_path: Path, items: list[dict]) -> Path:
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    assert run("import", str(write_items(tmp_path / "items.jsonl", items)), "--layer", "L5", root=root).returncode == 0
    return root


def test_a_query_word_outweighs_its_stray_characters_elsewhere(run, tmp_path):
    """上司的爱好 -> terms 上司, 爱, 好, 上, 司: the item with the word 上司 ranks above one that
    only scatters the characters 爱 好 上 司 (text.query_term_weights)."""
    root = small_memory(run, tmp_path, [
        {"id": "boss", "text": "我的上司在深圳上班。", "session": "a"},
        {"id": "scattered", "text": "他说好司机都爱上坡路。", "session": "b"},
        {"id": "park", "text": "今天去公园散步了。", "session": "c"},
        {"id": "film", "text": "周末和朋友看电影。", "session": "d"},
    ])
    assert ids(search(run, root, "上司的爱好"))[:2] == ["boss", "scattered"]


def test_session_feedback_finds_the_item_about_the_same_person(run, tmp_path):
    """The phone number names the person (我上司); the answer 我的上司喜欢攀岩 holds no query
    word and is not next to the match, but shares 上司 with it, so it is lifted from the match's
    session; the other item of that session (the uncle) is not."""
    root = small_memory(run, tmp_path, [
        {"id": "boss-phone", "text": "我上司的电话是13600205418。", "session": "t1"},
        {"id": "uncle-age", "text": "我叔叔今年61岁了。", "session": "t1"},
        {"id": "boss-hobby", "text": "我的上司喜欢攀岩。", "session": "t1"},
        {"id": "liu-hobby", "text": "刘宇轩喜欢摄影作为兴趣爱好。", "session": "t1"},
        {"id": "cousin-phone", "text": "我表哥的电话是15591513828。", "session": "t2"},
        {"id": "zhang-hobby", "text": "张伟喜欢集邮作为兴趣爱好。", "session": "t2"},
        {"id": "cousin-age", "text": "我表哥今年38岁。", "session": "t2"},
    ])
    found = ids(search(run, root, "那个电话是13600205418的人，兴趣爱好是什么？", "-k", "5"))
    assert "boss-phone" in found[:2]
    assert "boss-hobby" in found and "uncle-age" not in found


def test_a_session_with_the_query_word_outranks_one_with_its_stray_characters(run, tmp_path):
    """The same item in two sessions: the session that also says 爱好 lifts it above the session
    whose other item only scatters 好 司 上 爱 点 of the question (session documents weigh their
    terms like items do)."""
    fillers = ["今天去公园散步了。", "周末和朋友看电影。", "晚饭吃了饺子。", "明天要交报告。", "工作很忙。", "地点在北京。",
               "猫在窗台睡觉。", "地铁今天很挤。"]
    root = small_memory(run, tmp_path, [
        {"id": "climb-a", "text": "我上司喜欢攀岩。", "session": "a"},
        {"id": "hobby-a", "text": "他的爱好很多。", "session": "a"},
        {"id": "climb-b", "text": "我上司喜欢攀岩。", "session": "b"},
        {"id": "road-b", "text": "好司机爱上坡，还点了工作坊的课。", "session": "b"},
        *({"id": f"filler-{n}", "text": text, "session": f"f{n}"} for n, text in enumerate(fillers)),
    ])
    # the session document rule at a weight of its own (the default is 0.3: bench/RESULTS.md)
    (root / "memctl.toml").write_text("[ranking]\nsession_weight = 0.5\n")
    found = ids(search(run, root, "上司的爱好和工作地点", "-k", "8"))
    assert found.index("climb-a") < found.index("climb-b")


def test_the_session_prior_lifts_an_item_whose_session_matches_the_query_as_a_whole(run, tmp_path):
    """[ranking] session_prior scales an item's own score by its session's: of two copies of one
    item, the one in the session about deploy keys scores above the one in a session about
    nothing else the query asks; without the prior they tie."""
    fillers = ["lunch at the canteen", "the printer is out of paper", "standup moved to ten",
               "parking lot closed friday", "new coffee machine arrived", "holiday calendar posted"]
    copy = "the deploy key rotates monthly on the first working day"
    root = small_memory(run, tmp_path, [
        {"id": "copy-b", "text": copy, "session": "b"},
        {"id": "lunch-b", "text": "team lunch on thursday", "session": "b"},
        {"id": "copy-a", "text": copy, "session": "a"},
        {"id": "vault-a", "text": "each deploy key that rotates monthly is logged in the vault", "session": "a"},
        *({"id": f"filler-{n}", "text": text, "session": f"f{n}"} for n, text in enumerate(fillers)),
    ])

    def scores(settings: str) -> dict[str, float]:
        (root / "memctl.toml").write_text("[ranking]\nneighbour_weight = 0\nfeedback_weight = 0\n" + settings)
        found = search(run, root, "deploy key rotates monthly", "-k", "5")
        return {hit["id"]: hit["score"] for hit in map(json.loads, found.stdout.decode().splitlines())}

    plain = scores("session_prior = 0\nsession_weight = 0\n")
    assert plain["copy-a"] == plain["copy-b"]
    lifted = scores("session_prior = 0.5\nsession_weight = 0\n")
    assert lifted["copy-a"] > lifted["copy-b"] > 0


def test_a_retired_ranking_setting_in_an_old_memctl_toml_is_ignored_and_a_misspelt_one_refused(run, tmp_path):
    """[ranking] cjk_part_weight is gone (issue #33: it moved no development family): a
    memctl.toml that still names it searches as one without it, the value ignored, and `memctl
    rules` lists it as retired; a key memctl never had is still refused with one line."""
    root = small_memory(run, tmp_path, [
        {"id": "whole", "text": "我叔叔的电话号码是13228788707", "session": "a"},
        {"id": "piece", "text": "他的电话昨天换了", "session": "b"},  # 电话 without 电话号码: the piece counts
        {"id": "other", "text": "今天去公园散步了", "session": "c"},
    ])

    def scores(settings: str) -> list[tuple[str, float]]:
        (root / "memctl.toml").write_text("[ranking]\n" + settings)
        found = search(run, root, "电话号码", "-k", "5")
        return [(hit["id"], hit["score"]) for hit in map(json.loads, found.stdout.decode().splitlines())]

    plain = scores("")
    assert "piece" in dict(plain) and scores("cjk_part_weight = 0.3\n") == plain
    shown = run("rules", root=root).stdout.decode()  # ... and `memctl rules` says it is ignored
    assert "ranking.cjk_part_weight = null" in shown and "(retired, ignored)]" in shown
    (root / "memctl.toml").write_text("[ranking]\ncjk_part_weights = 0.5\n")
    refused = run("search", "电话", root=root)
    assert refused.returncode != 0 and b"unknown key ranking.cjk_part_weights" in refused.stderr


def test_show_takes_the_id_search_json_gives_a_piece_of_a_session(run, tmp_path):
    """A session's pieces carry the id NAME#N in --json; `show` of it prints that whole entry."""
    base = tmp_path / "demo"
    run("demo", "--dir", str(base))
    root = base / "memory"
    found = run("search", "bk-02", "backup", "--layers", "L4", "--json", "-k", "50", root=root)
    pieces = [hit for hit in map(json.loads, found.stdout.decode().splitlines()) if "#h" not in hit["ref"]]
    assert pieces and all("#" in hit["id"] for hit in pieces), found.stdout
    for hit in pieces:
        for identifier in (hit["id"], "L4:" + hit["id"]):
            shown = run("show", identifier, root=root)
            assert shown.returncode == 0, (identifier, shown.stderr)
            words = hit["text"].split()
            assert " ".join(words[:6]) in " ".join(shown.stdout.decode().split()), identifier
            assert shown.stdout.decode().startswith("=== "), identifier  # the entry, not the whole session
    name = pieces[0]["session"]
    missing = run("show", f"L4:{name}#999", root=root)
    assert missing.returncode == 2 and b"no entry 999" in missing.stderr
