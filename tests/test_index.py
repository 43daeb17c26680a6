"""The derived index: what it reads from each layer, incremental refresh, rebuild, and
searches that keep working while other processes write."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

from conftest import clean_env, memctl_executable
from memctl.core.config import Layout, init_root
from memctl.recall.indexing.index import SearchIndex
from memctl.recall.search import SearchRequest, Searcher
from memctl.recall.indexing.text import Tokenizer, latin_tokens, stem

SESSION_TEXT = """⟪memctl-session v1 source=model_responses_1.txt⟫
=== Prompt === 2026-03-02 10:00:00
please rotate the grafana admin password
⟪memctl:same-as 1⟫
=== Response === 2026-03-02 10:00:05 model=m
rotated the grafana password and stored it in the vault
"""

HISTORY_TEXT = "\n" + "=" * 60 + "\nSESSION: 0302_1000-0302_1010\n" + "=" * 60 + \
    "\n[USER]: rotate grafana password\n[Agent] rotated it, vault updated\n"


def english_tokenizer(_custom_dict) -> Tokenizer:
    def no_cjk(run: str) -> list[str]:
        raise AssertionError("no CJK text in these tests")
    return Tokenizer(no_cjk)


def make_root(tmp_path: Path) -> Layout:
    layout = Layout(tmp_path / "memory")
    init_root(layout.root)
    return layout


def add_lines(path: Path, items: list[dict]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(i) + "\n" for i in items)


def refs(layout: Layout, query: str, **kw) -> list[str]:
    searcher = Searcher(layout)
    try:
        return [h.ref for h in searcher.search(SearchRequest(query, k=10, **kw))]
    finally:
        searcher.close()


def index(layout: Layout) -> SearchIndex:
    return SearchIndex(layout, tokenizer_factory=english_tokenizer)


def test_latin_tokens_keep_identifiers_and_drop_stop_words():
    assert latin_tokens("bk-02") == ("bk-02", "bk", "02")
    assert latin_tokens("sk_live") == ("sk_live", "sk", "live")
    assert latin_tokens("V3") == ("v3",)
    assert latin_tokens("the") == ()
    assert stem("verification") == stem("verifications")
    assert latin_tokens("found") == latin_tokens("finding")  # irregular past tense meets the stem


def test_every_layer_is_indexed(tmp_path):
    layout = make_root(tmp_path)
    layout.global_mem.write_text("## [SERVERS]\nhost: bk-02 | role: grafana\n## [PEOPLE]\nboss: Zhao\n")
    (layout.root / "deploy_sop.md").write_text("# Deploy\nrun the canary first\n")
    (layout.working_dir / "t1.json").write_text(json.dumps({"task": "migrate the postgres cluster"}))
    layout.histories.write_text(HISTORY_TEXT)
    with zipfile.ZipFile(layout.l4_dir / "2026-03.zip", "w") as archive:
        archive.writestr("0302_1000-0302_1010.txt", SESSION_TEXT)
    (layout.l4_dir / "0401_0900-0401_0930.txt").write_text(SESSION_TEXT.replace("grafana", "kibana"))
    add_lines(layout.long_term, [{"id": "m1", "type": "tool", "text": "vault holds the secrets"}])
    add_lines(layout.cold_archive, [{"id": "old1", "type": "event", "text": "retired the jenkins box"}])
    index(layout).rebuild()
    assert refs(layout, "bk-02") == ["L2:SERVERS"]
    assert refs(layout, "canary") == ["L3:deploy_sop.md"]
    assert refs(layout, "postgres") == ["L3:working/t1.json"]
    grafana = refs(layout, "grafana admin password")
    assert "L4:0302_1000-0302_1010" in grafana  # the zipped session
    assert any(r.startswith("L4:0302_1000-0302_1010#h") for r in grafana)  # its history lines
    assert refs(layout, "kibana") == ["L4:0401_0900-0401_0930"]  # a loose compressed session
    assert refs(layout, "vault secrets")[0] == "L5:m1"
    assert refs(layout, "jenkins") == []  # L6 only when asked
    assert refs(layout, "jenkins", layers=("L6",)) == ["L6:old1"]


def test_refresh_reads_only_what_changed(tmp_path):
    layout = make_root(tmp_path)
    add_lines(layout.cold_archive, [{"id": f"e{i}", "text": f"routine note {i}"} for i in range(50)])
    layout.histories.write_text(HISTORY_TEXT)
    built = index(layout).rebuild()
    assert built.docs_added == 52
    assert index(layout).ensure_fresh().sources_changed == 0

    add_lines(layout.cold_archive, [{"id": "new", "text": "the quarterly zebra audit"}])
    report = index(layout).ensure_fresh()
    assert (report.rebuilt, report.docs_added, report.docs_removed) == (False, 1, 0)
    assert refs(layout, "zebra", layers=("L6",)) == ["L6:new"]

    with open(layout.histories, "a") as handle:
        handle.write(HISTORY_TEXT.replace("0302_1000-0302_1010", "0303_0800-0303_0900").replace("grafana", "loki"))
    report = index(layout).ensure_fresh()
    assert report.docs_added == 2 and report.docs_removed == 0
    assert refs(layout, "loki")[0].startswith("L4:0303_0800-0303_0900#h")

    # a rewritten store (not an append) is indexed again from scratch
    layout.cold_archive.write_text(json.dumps({"id": "only", "text": "a single zebra"}) + "\n")
    report = index(layout).ensure_fresh()
    assert report.docs_removed == 51 and report.docs_added == 1
    assert refs(layout, "routine", layers=("L6",)) == []


def test_a_new_zip_member_is_the_only_thing_read(tmp_path):
    layout = make_root(tmp_path)
    zip_path = layout.l4_dir / "2026-03.zip"
    with zipfile.ZipFile(zip_path, "w") as archive:
        archive.writestr("0302_1000-0302_1010.txt", SESSION_TEXT * 20)
    index(layout).rebuild()
    new_member = SESSION_TEXT.replace("grafana", "prometheus")
    with zipfile.ZipFile(zip_path, "w") as archive:  # the archiver rewrites the month's zip
        archive.writestr("0302_1000-0302_1010.txt", SESSION_TEXT * 20)
        archive.writestr("0305_1000-0305_1010.txt", new_member)
    report = index(layout).ensure_fresh()
    assert report.bytes_read == len(new_member.encode())
    assert refs(layout, "prometheus") == ["L4:0305_1000-0305_1010"]
    zip_path.unlink()
    index(layout).ensure_fresh()
    assert refs(layout, "prometheus") == [] and refs(layout, "grafana") == []


def test_missing_or_outdated_index_is_rebuilt(tmp_path):
    layout = make_root(tmp_path)
    add_lines(layout.long_term, [{"id": "m1", "text": "the ferry leaves at nine"}])
    assert refs(layout, "ferry") == ["L5:m1"]
    layout.index.unlink()
    assert refs(layout, "ferry") == ["L5:m1"]
    layout.index.write_bytes(b"\0" * 4096)
    assert refs(layout, "ferry") == ["L5:m1"]


def test_searches_keep_working_while_archive_imports_and_rebuilds_run(tmp_path):
    exe = memctl_executable()
    root = tmp_path / "memory"
    env = clean_env()
    subprocess.run([exe, "--root", str(root), "init"], check=True, capture_output=True, env=env)
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"text": f"harbour crane log {i}"}) + "\n" for i in range(200)))
    subprocess.run([exe, "--root", str(root), "import", str(batch), "--layer", "L5"], check=True,
                   capture_output=True, env=env)
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    samples = Path(__file__).resolve().parent.parent / "memctl" / "samples"
    for sample in samples.glob("model_responses_*.txt"):
        (raw_dir / sample.name).write_bytes(sample.read_bytes())
    writer = subprocess.Popen(
        ["bash", "-c", f"'{exe}' --root '{root}' archive '{raw_dir}' --min-age 0s --keep-newest 0 --wait 10 -q; "
                       f"for i in 1 2 3; do '{exe}' --root '{root}' import --wait 5 '{batch}' >/dev/null 2>&1; "
                       f"'{exe}' --root '{root}' index rebuild 2>/dev/null; done"], env=env)
    outcomes = []
    try:
        for _ in range(8):
            result = subprocess.run([exe, "--root", str(root), "search", "harbour crane", "--layers", "L5,L6"],
                                    capture_output=True, env=env)
            outcomes.append((result.returncode, result.stderr))
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    assert not list(raw_dir.glob("*.txt"))  # the archive ran and finished
    assert all(code == 0 for code, _ in outcomes), outcomes
    assert not any(b"Traceback" in err or b"error" in err for _, err in outcomes)


def test_the_vocabulary_segmenter_cuts_the_same_words_after_one_prefetch():
    """A refresh on the server looks up the CJK words of a batch in one question
    (VocabSegmenter.prefetch, issue #30): the cut of each run is the one its own lookup gave."""
    from memctl.recall.indexing.vocab import VocabSegmenter

    vocabulary = {"会议": 5, "纪要": 4, "会议纪要": 2, "上周": 3, "数据库": 2, "数据": 6, "备份": 3, "深圳": 1}

    class Store:
        def __init__(self):
            self.questions = 0

        def item_count(self):
            return 100

        def document_frequencies(self, terms):
            self.questions += 1
            return {t: vocabulary[t] for t in sorted(terms) if t in vocabulary}

    texts = ["上周的会议纪要 整理", "数据库备份 在深圳", "the 备份 of 数据 ran"]
    runs = ["上周的会议纪要", "整理", "数据库备份", "在深圳", "备份", "数据"]
    plain_store, fetched_store = Store(), Store()
    plain, fetched = VocabSegmenter(plain_store), VocabSegmenter(fetched_store)
    fetched.prefetch(texts)
    assert [fetched(run) for run in runs] == [plain(run) for run in runs]
    assert fetched_store.questions == 1 and plain_store.questions == len(runs)
    assert fetched("没见过的词") == plain("没见过的词") and fetched_store.questions == 2  # not prefetched: asked
