"""The search index on PostgreSQL (issue #14): the same results as the SQLite index, down to
the scores; several machines sharing one index; sessions shown on any machine; the entry
rows of the server indexed as they change; a refresh killed mid-transaction leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from conftest import MEMORY_EXAMPLE, SAMPLES, SERVER_ROOTS, Backend
from test_search import ITEMS, write_items

QUERIES = ["why did the bk-02 backup fail", "weekly meeting notes", "会议纪要 整理", "上司叫什么名字",
           "bk-02 部署", "restart backup-agent creds", "kubernetes ingres certifcate", "green tea Caroline",
           "todo inbox summary.md", "403 SignatureDoesNotMatch", "nightly archive usable", "trust verification",
           "what did the backup do on 14 March 2026", "上个月的会议纪要"]
LAYER_CHOICES = [(), ("--layers", "L4"), ("--layers", "L2,L5"), ("--mode", "deep")]


def build(run, root: Path, env: dict | None = None) -> Path:
    """A memory with every kind of source: L2, an archived session (zip and history), L5 items."""
    raw = root.parent / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for path in sorted(SAMPLES.glob("model_responses_*.txt")):
        shutil.copyfile(path, raw / path.name)
    assert run("archive", raw, "--min-age", "0s", "--keep-newest", "0", root=root, env=env).returncode == 0
    shutil.copyfile(MEMORY_EXAMPLE / "global_mem.txt", root / "global_mem.txt")
    items = write_items(root.parent / "items.jsonl", ITEMS)
    assert run("import", items, "--layer", "L5", root=root, env=env).returncode == 0
    return root


@pytest.fixture
def twin_memories(run, tmp_path, pg_server) -> tuple[Path, Path]:
    """The same memory twice: its index in .memctl/index.sqlite, and on the server."""
    files, server = tmp_path / "files" / "memory", tmp_path / "server" / "memory"
    for root in (files, server):
        assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(server)
    for root in (files, server):
        build(run, root)
        assert run("index", "refresh", root=root).returncode == 0
    return files, server


def search_lines(run, root: Path, *args: str) -> list[str]:
    queries = root.parent / "queries.jsonl"
    queries.write_text("".join(json.dumps({"qid": str(n), "query": q}, ensure_ascii=False) + "\n"
                               for n, q in enumerate(QUERIES)), encoding="utf-8")
    found = run("search", "--queries", queries, "-k", "10", "--json", *args, root=root)
    assert found.returncode in (0, 1), found.stderr.decode()
    return found.stdout.decode().splitlines()


def test_both_backends_give_the_same_hits_scores_and_snippets(run, twin_memories):
    files, server = twin_memories
    for choice in LAYER_CHOICES:
        on_files, on_server = search_lines(run, files, *choice), search_lines(run, server, *choice)
        assert on_files and on_server == on_files, choice
    assert not (server / ".memctl" / "index.sqlite").exists()
    piped = [run("search", q, root=root).stdout for q in QUERIES[:4] for root in (files, server)]
    assert piped[0::2] == piped[1::2]  # the lean path's tab-separated lines too


def test_the_server_scores_are_fts5_bm25_to_the_last_bit(twin_memories, monkeypatch):
    from memctl.recall.indexing.pg_store import PostgresIndexStore
    from memctl.recall.indexing.store import SQLiteStore

    files, server = twin_memories
    monkeypatch.setenv("MEMCTL_PG_DSN", SERVER_ROOTS[str(server)]["MEMCTL_PG_DSN"])
    memory = (server / "memctl.toml").read_text().rsplit('memory = "', 1)[1].split('"')[0]
    lite = SQLiteStore.open(files / ".memctl" / "index.sqlite")
    remote = PostgresIndexStore.connect(os.environ["MEMCTL_PG_DSN"], memory, server)
    try:
        assert remote.item_totals() == lite.item_totals() and remote.session_totals() == lite.session_totals()
        assert remote.present_layers() == lite.present_layers() and remote.item_count() == lite.item_count()
        for terms in (["backup"], ["bk-02", "backup", "fail"], ["会议", "纪要"], ["the", "a", "restart"]):
            # in the same order too: the stages add floats up in it (last-bit ties would flip)
            assert list(remote.document_frequencies(terms).items()) == list(lite.document_frequencies(terms).items())
            for layers in ((), ("L4",), ("L2", "L5")):
                assert remote.ranked_item_scores(terms, layers, 50) == lite.ranked_item_scores(terms, layers, 50)
                assert remote.matching_item_ids(terms, layers, 5) == sorted(lite.matching_item_ids(terms, layers, 5))
            groups = [terms, terms[:1], ["restart", "会议", "absent-term"]]  # a search's groups: one per weight
            assert remote.best_session_scores(groups, 20) == lite.best_session_scores(groups, 20)
            rowids = [r for r, _ in lite.ranked_item_scores(terms, (), 20)]
            assert list(remote.item_bodies(rowids).items()) == list(lite.item_bodies(rowids).items())
    finally:
        lite.close()
        remote.close()


def test_one_search_answers_its_repeated_lookups_from_few_statements(twin_memories, monkeypatch):
    """Inside a search scope the server's store answers what the stages ask again from what it
    fetched (memctl.recall.indexing.pg_lookups): the same answers as SQLite's, in the same order, and a
    search in a handful of statements instead of one per lookup."""
    from memctl.core.config import load_settings
    from memctl.recall.indexing.index import IndexOptions
    from memctl.recall.search import Searcher, request_from_settings

    files, server = twin_memories
    monkeypatch.setenv("MEMCTL_PG_DSN", SERVER_ROOTS[str(server)]["MEMCTL_PG_DSN"])
    searchers = {}
    for name, root in (("files", files), ("server", server)):
        settings = load_settings(root)
        searchers[name] = (Searcher(settings.layout, IndexOptions.from_settings(settings), refresh=False), settings)
    lite, remote = searchers["files"][0].store, searchers["server"][0].store
    statements = []
    real_execute = remote.db.execute
    monkeypatch.setattr(remote.db, "execute", lambda sql, *a, **kw: statements.append(sql) or real_execute(sql, *a, **kw))
    try:
        with remote.search_scope():
            rowids = [r for r, _ in lite.ranked_item_scores(["backup", "meeting"], (), 30)]
            assert remote.ranked_item_scores(["backup", "meeting"], (), 30) == lite.ranked_item_scores(
                ["backup", "meeting"], (), 30)
            for terms in (["backup", "meeting"], ["backup", "absent-term", "会议"]):
                assert list(remote.document_frequencies(terms).items()) == list(lite.document_frequencies(terms).items())
            for context_only in (False, True):
                wanted = [*rowids, *(r + 1 for r in rowids), 10**9]
                # in rowid order, as the server always gave them (SQLite's order is its plan's)
                assert remote.item_rows(wanted, context_only) == sorted(lite.item_rows(wanted, context_only))
            centres = [(row[6], row[0]) for row in lite.item_rows(rowids, context_only=True)][:3]
            assert remote.context_item_ids_near_each(centres, 4) == lite.context_item_ids_near_each(centres, 4)
            near = sorted({r for _, c in centres for r in range(c - 4, c + 5)})
            assert list(remote.item_bodies(near).items()) == list(lite.item_bodies(near).items())
        for query in QUERIES:
            typos = searchers["files"][0].plan(query, 80).fallbacks  # each costs a walk of the vocabulary, and a check
            for layers in (None, "L4", "L2,L5"):
                hits = {}
                for name, (searcher, settings) in searchers.items():
                    before = len(statements)
                    found = searcher.search(request_from_settings(settings, query, k=10, layers=layers))
                    hits[name] = [(h.ref, h.score, h.text) for h in found]
                used = len(statements) - before
                assert hits["server"] == hits["files"], (query, layers)
                assert used <= 6 + 2 * len(typos), (query, layers, [" ".join(q.split())[:200] for q in statements[before:]])
    finally:
        for searcher, _ in searchers.values():
            searcher.close()


def test_two_machines_share_the_index_and_show_each_others_sessions(run, tmp_path, pg_server, pg_memory_name):
    first, second = tmp_path / "a" / "memory", tmp_path / "b" / "memory"
    for root in (first, second):
        assert run("init", root=root).returncode == 0
        Backend("postgres", pg_server).use(root, pg_memory_name)
    raw = tmp_path / "a" / "raw"
    raw.mkdir()
    original = (SAMPLES / "model_responses_483920.txt").read_bytes()
    (raw / "model_responses_483920.txt").write_bytes(original)
    assert run("archive", raw, "--min-age", "0s", "--keep-newest", "0", root=first).returncode == 0
    assert run("index", "refresh", root=first).returncode == 0

    for _ in range(2):  # the second machine's own refresh forgets none of the first's items
        found = run("search", "weekly meeting notes", "--layers", "L4", "--json", "-k", "20", root=second)
        assert found.returncode == 0, found.stderr.decode()
    refs = [json.loads(line)["ref"] for line in found.stdout.decode().splitlines()]
    session_ref = next(r for r in refs if "#h" not in r)
    shown = run("show", session_ref, root=second)
    assert shown.returncode == 0 and "会议纪要" in shown.stdout.decode()
    assert shown.stdout == run("show", session_ref, root=first).stdout
    raw_elsewhere = run("show", session_ref, "--raw", root=second)
    assert raw_elsewhere.returncode == 2 and b"another machine" in raw_elsewhere.stderr
    assert run("show", "L4:0000_0000-0000_0000", root=second).returncode == 2
    history_ref = next(r for r in refs if "#h" in r)  # a line of the first machine's all_histories.txt
    line = run("show", history_ref, root=second)
    assert line.returncode == 0 and line.stdout.strip() == run("show", history_ref, root=first).stdout.strip() != b""

    import psycopg

    with psycopg.connect(pg_server) as conn:
        keys = [k for (k,) in conn.execute(f"SELECT key FROM memctl_{pg_memory_name}.index_sources")]
    mine = f"{socket.gethostname()}:{os.path.realpath(first)}/"
    assert keys and all(k.startswith(mine) for k in keys if "L4_raw_sessions" in k)
    assert not any(k.startswith("L4_raw_sessions") for k in keys)


def test_entries_on_the_server_are_indexed_as_they_are_remembered_and_forgotten(run, root, pg_server,
                                                                                pg_memory_name):
    """The contract with the entry store on the server (memctl.longterm.pg_schema): rows with
    seq above the last indexed are added; a bumped `rewrites` (a forget) indexes the part again."""
    import psycopg

    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)

    def found(query: str) -> list[str]:
        result = run("search", query, "--json", "--layers", "L5,L6", root=root)
        return [json.loads(line)["ref"] for line in result.stdout.decode().splitlines()]

    def remember(text: str) -> str:
        done = run("remember", text, "--type", "event", root=root)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    tea = remember("Caroline prefers green tea in the afternoon.")
    assert found("green tea") == [f"L5:{tea}"]
    coffee = remember("Bob drinks black coffee before standup.")
    assert found("coffee") == [f"L5:{coffee}"] and found("green tea") == [f"L5:{tea}"]
    assert run("forget", tea, root=root).returncode == 0
    assert found("green tea") == [f"L6:{tea}"] and found("coffee") == [f"L5:{coffee}"]
    assert not (root / "long_term.jsonl").exists() or not (root / "long_term.jsonl").read_text()
    with psycopg.connect(pg_server) as conn:
        keys = {k for (k,) in conn.execute(f"SELECT key FROM memctl_{pg_memory_name}.index_sources")}
    assert {"server:L5", "server:L6"} <= keys


def test_a_purge_leaves_no_trace_in_the_index_on_the_server(run, root, pg_server, pg_memory_name):
    import psycopg

    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)
    kept = run("remember", "the vault lives on bk-07", "--type", "event", root=root).stdout.decode().strip()
    run("remember", "The vault code word: hunter2-zebra-42 (a purge test)", "--type", "event", root=root)  # not a shape redaction knows
    assert run("search", "vault", root=root).returncode == 0
    purged = run("forget", "--purge", "--match", "hunter2-zebra", "--yes", root=root)
    assert purged.returncode == 0, purged.stderr.decode()
    schema = f"memctl_{pg_memory_name}"
    with psycopg.connect(pg_server) as conn:
        assert conn.execute(f"SELECT count(*) FROM {schema}.index_items WHERE strpos(text, 'hunter2') > 0 "
                            "OR strpos(body, 'hunter2') > 0").fetchone()[0] == 0
        assert conn.execute(f"SELECT count(*) FROM {schema}.index_vocab WHERE term LIKE 'hunter2%'").fetchone()[0] == 0
    hits = run("search", "vault", "--json", root=root)
    assert [json.loads(line)["ref"] for line in hits.stdout.decode().splitlines()] == [f"L5:{kept}"]


def test_a_refresh_killed_mid_transaction_leaves_the_index_as_it_was(run, root, pg_server, pg_memory_name):
    import psycopg

    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)
    (root / "global_mem.txt").write_text("## [HOSTS]\nweb: bk-02 behind the proxy\n", encoding="utf-8")
    assert run("search", "proxy", root=root).returncode == 0
    schema = f"memctl_{pg_memory_name}"
    with psycopg.connect(pg_server) as conn:
        before = conn.execute(f"SELECT count(*), max(rowid) FROM {schema}.index_items").fetchone()
    (root / "notes").mkdir()
    (root / "notes" / "deploy.md").write_text("# Deploy\nThe canary goes to bk-03 first.\n", encoding="utf-8")
    killed = run("index", "refresh", root=root, env={"MEMCTL_FAULT_AFTER": "1"})  # SIGKILL at its first insert
    assert killed.returncode == -9
    with psycopg.connect(pg_server) as conn:
        assert conn.execute(f"SELECT count(*), max(rowid) FROM {schema}.index_items").fetchone() == before
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'"
                            ).fetchone()[0] == 0
    hits = run("search", "canary", "--json", root=root)
    assert hits.returncode == 0 and "L3:notes/deploy.md" in hits.stdout.decode()


def test_a_search_without_its_server_is_one_line_naming_the_host(run, root, pg_server, pg_memory_name):
    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)
    gone = {"MEMCTL_PG_DSN": "postgresql://memctl:s3cret-pw@127.0.0.1:1/team"}
    for args in (("search", "vault"), ("search", "vault", "--json"), ("index", "refresh")):
        result = run(*args, root=root, env=gone)
        text = result.stderr.decode()
        assert result.returncode == 2 and "127.0.0.1:1/team" in text, (args, text)
        assert "s3cret-pw" not in text and "Traceback" not in text and len(text.strip().splitlines()) == 1


def test_a_long_lived_searcher_keeps_what_it_fetched_until_the_index_changes(run, root, pg_server, pg_memory_name,
                                                                             monkeypatch):
    """What a searcher fetched serves its next searches (memctl.recall.indexing.pg_lookups) while the
    index's generation stays; a refresh that changed anything bumps it, and the next search
    answers as a fresh searcher does, even where the new items took the old ones' rowids."""
    import psycopg

    from memctl.core.config import load_settings
    from memctl.recall.indexing.index import IndexOptions
    from memctl.recall.search import Searcher, request_from_settings

    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)
    lines = ["web: bk-02 behind the proxy", "db: bk-03 replicates to bk-04", "proxy: nginx on bk-02"]
    (root / "global_mem.txt").write_text("## [HOSTS]\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert run("index", "refresh", root=root).returncode == 0
    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    settings = load_settings(root)

    def searcher() -> Searcher:
        return Searcher(settings.layout, IndexOptions.from_settings(settings), refresh=False)

    def hits(searcher: Searcher, query: str) -> list[tuple]:
        return [(h.ref, h.score, h.text) for h in searcher.search(request_from_settings(settings, query, k=10))]

    def generation() -> int:
        with psycopg.connect(pg_server) as conn:
            return conn.execute(f"SELECT value FROM memctl_{pg_memory_name}.index_generation").fetchone()[0]

    kept = searcher()
    statements = []
    real_execute = kept.store.db.execute
    monkeypatch.setattr(kept.store.db, "execute", lambda sql, *a, **kw: statements.append(sql) or real_execute(sql, *a, **kw))
    try:
        first = hits(kept, "bk-02 proxy")
        cold = len(statements)
        assert hits(kept, "bk-02 proxy") == first and first
        assert len(statements) - cold < cold  # the rows, bodies and texts were kept

        before = generation()
        assert run("index", "refresh", root=root).returncode == 0  # nothing changed: nothing written
        assert generation() == before
        lines[0] = "web: bk-09 behind the proxy, moved from bk-02"  # the same rowids, other texts
        (root / "global_mem.txt").write_text("## [HOSTS]\n" + "\n".join(lines) + "\n", encoding="utf-8")
        assert run("index", "refresh", root=root).returncode == 0
        assert generation() > before
        fresh = searcher()
        try:
            for query in ("bk-02 proxy", "bk-09", "replicates"):
                assert hits(kept, query) == hits(fresh, query), query
            assert any("bk-09" in text for _, _, text in hits(kept, "bk-02 proxy"))
        finally:
            fresh.close()
    finally:
        kept.close()


INDEX_DUMP = {  # every index row but the rowids, which a rebuild gives anew
    "items": "SELECT source, ref, layer, date, type, item_id, session, ctx, text, body, length, tf::text "
             "FROM {s}.index_items ORDER BY rowid",
    "vocab": "SELECT term, df FROM {s}.index_vocab ORDER BY term",
    "surface": "SELECT word, term FROM {s}.index_surface ORDER BY word",
    "sessions": "SELECT key, body, length, tf::text FROM {s}.index_sessions ORDER BY key",
    "sources": "SELECT key, kind, size, mtime_ns, tail, state FROM {s}.index_sources ORDER BY key",
    "meta": "SELECT key, value FROM {s}.index_meta WHERE key NOT LIKE 'config@%%' AND key NOT LIKE 'l4_dir@%%' "
            "ORDER BY key",
}


def test_a_refresh_after_each_remember_writes_what_a_rebuild_writes_in_few_statements(run, root, pg_server,
                                                                                     pg_memory_name, monkeypatch):
    """The refresh on the server reads what it needs before writing in one statement, and
    writes each kind of row in one (issue #30: ~24 statements and ~34 waits a refresh, on
    `memctl serve`'s search path). Remembers, a forget and a new file, each refreshed over one
    kept connection as the service's refresher does: the index rows equal a rebuild's."""
    import psycopg

    from memctl.core.config import load_settings
    from memctl.recall.indexing import pg_index
    from memctl.recall.indexing import refresh as refresh_module
    from memctl.recall.indexing.index import IndexOptions, SearchIndex

    assert run("init", root=root).returncode == 0
    Backend("postgres", pg_server).use(root, pg_memory_name)
    build(run, root)
    assert run("index", "refresh", root=root).returncode == 0
    monkeypatch.setenv("MEMCTL_PG_DSN", pg_server)
    # jieba for every refresh, as for the rebuild: a small refresh's own CJK cut (the index's
    # vocabulary, memctl.recall.indexing.vocab) may differ from it by design (the forget below
    # indexes L5 again); the rows written are what this test compares
    monkeypatch.setattr(refresh_module, "SMALL_REFRESH_BYTES", 0)
    settings = load_settings(root)
    index = SearchIndex(settings.layout, IndexOptions.from_settings(settings))
    store = pg_index.open_store(index)
    statements = []

    class Counting(psycopg.Cursor):
        def execute(self, query, *args, **kwargs):
            statements.append(query)
            return super().execute(query, *args, **kwargs)

    store.db.cursor_factory = Counting
    counts, added = [], 0
    try:
        facts = ["the canary deploy goes to bk-03 first", "Bob drinks black coffee before standup",
                 "the nightly backup of bk-02 runs at 03:00 and mails the ops list"]
        ids = []
        for text in facts:
            done = run("remember", text, "--type", "event", root=root)
            assert done.returncode == 0, done.stderr.decode()
            ids.append(done.stdout.decode().strip())
            statements.clear()
            added += pg_index.refresh_on(index, store).docs_added
            counts.append(len(statements))
        assert run("forget", ids[1], root=root).returncode == 0
        (root / "notes").mkdir()
        (root / "notes" / "deploy.md").write_text("# Deploy\nThe canary goes to bk-03, then the rest.\n")
        assert pg_index.refresh_on(index, store).docs_added >= 2
        statements.clear()
        assert pg_index.refresh_on(index, store).docs_added == 0  # nothing new: one look, nothing written
        idle = len(statements)
    finally:
        store.close()
    assert added == len(facts)
    # a state read, the lock, the state again, the new rows, then one statement each for the
    # items, the vocabulary with the surface words, the sources with the meta and the generation
    # (the connection's first refresh asks once whether the entries are on the server)
    assert counts[0] <= 8 and max(counts[1:]) <= 7 and idle == 1, (counts, idle)

    def dump() -> dict:
        with psycopg.connect(pg_server) as conn:
            return {name: conn.execute(sql.replace("{s}.", f"memctl_{pg_memory_name}.")).fetchall()
                    for name, sql in INDEX_DUMP.items()}

    refreshed = dump()
    assert any("canary" in row[8] for row in refreshed["items"])
    assert run("index", "rebuild", root=root).returncode == 0
    rebuilt = dump()
    for name in INDEX_DUMP:
        assert sorted(refreshed[name]) == sorted(rebuilt[name]), name  # items: in the order of their sources
