"""How a search reads the words a memory does not hold (issue #33), through the installed memctl:
a typo's correction is shown (`corrected` in --json, "showing results for …" on stderr and in
compose), an identifier is never read as another one (`bk-03` is not `bk-02`), a word that
matches nothing finds the written words it begins or is inside, and a mode's layer order is a
priority among hits that hold the query alike. The lean path and the full command line agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env

FACTS = [
    {"id": "bk02", "text": "bk-02 server backup runs nightly at 02:00", "session": "a"},
    {"id": "release", "text": "release v2.0 shipped on monday; ERR_41 was fixed", "session": "b"},
    {"id": "s3", "text": "The SignatureDoesNotMatch error came from the S3 certificate rotation", "session": "c"},
    {"id": "tea", "text": "Caroline prefers green tea in the afternoon", "session": "d"},
]
FULL_CLI = "import sys; from memctl.cli.app import main; main(sys.argv[1:])"


@pytest.fixture(scope="module")
def memory(tmp_path_factory, backend) -> Path:
    """The facts in L5, their index on each backend in turn (the server's surface table too)."""
    from conftest import memctl_executable

    base = tmp_path_factory.mktemp(f"readings-{backend.name}")
    root = base / "memory"
    items = base / "items.jsonl"
    items.write_text("".join(json.dumps(f) + "\n" for f in FACTS), encoding="utf-8")
    exe = memctl_executable()
    subprocess.run([exe, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env(), timeout=120)
    backend.use(root)
    subprocess.run([exe, "--root", str(root), "import", str(items), "--layer", "L5"], check=True,
                   capture_output=True, env=clean_env(**backend.env), timeout=120)
    return root


def env_of(root: Path) -> dict:
    from conftest import SERVER_ROOTS

    return clean_env(**SERVER_ROOTS.get(str(root), {}))


def hits_of(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def both_paths(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The same arguments through the lean path (memctl.cli.lean) and the full command line."""
    argv = ["--root", str(root), *args]
    lean = subprocess.run([sys.executable, "-m", "memctl.cli.lean", *argv], capture_output=True, env=env_of(root),
                          timeout=120)
    full = subprocess.run([sys.executable, "-c", FULL_CLI, *argv], capture_output=True, env=env_of(root), timeout=120)
    return lean, full


def test_a_corrected_typo_is_said_in_json_and_on_stderr(run, memory):
    found = run("search", "bakup", "--json", root=memory)
    assert found.returncode == 0
    hits = hits_of(found)
    assert hits[0]["id"] == "bk02" and all(h["corrected"] == {"bakup": "backup"} for h in hits)
    piped = run("search", "bakup", root=memory)
    assert piped.returncode == 0 and piped.stdout.startswith(b"L5:bk02\t")
    assert b"showing results for backup (for bakup)" in piped.stderr
    exact = run("search", "backup", "--json", root=memory)
    assert "corrected" not in hits_of(exact)[0] and b"showing results" not in exact.stderr


@pytest.mark.parametrize("query", ["bk-03", "v2.1", "ERR_42", "bk03"])
def test_an_identifier_the_memory_does_not_hold_finds_no_other_identifier(run, memory, query):
    """bk-03 was searched as its parts `bk` and `03`, and answered with bk-02's facts (exit 0)."""
    found = run("search", query, "--json", root=memory)
    assert (found.returncode, found.stdout) == (1, b""), found.stdout


def test_an_identifier_the_memory_holds_is_found_and_its_parts_still_count_beside_other_words(run, memory):
    assert [h["id"] for h in hits_of(run("search", "bk-02", "--json", root=memory))] == ["bk02"]
    assert [h["id"] for h in hits_of(run("search", "v2.0", "--json", root=memory))] == ["release"]
    # a word the query also holds plainly is searched: the unheld identifier only loses its own parts
    assert hits_of(run("search", "bk-03", "backup", "--json", root=memory))[0]["id"] == "bk02"


@pytest.mark.parametrize("query, word, shown", [
    ("SignatureDoes", "SignatureDoes", ["signaturedoesnotmatch"]),
    ("cert", "cert", ["certificate"]),
    ("DoesNotMatch", "DoesNotMatch", ["signaturedoesnotmatch"]),
])
def test_a_word_that_matches_nothing_finds_the_words_it_begins_or_is_inside(run, memory, query, word, shown):
    found = run("search", query, "--json", root=memory)
    assert found.returncode == 0, found.stderr
    hits = hits_of(found)
    assert hits[0]["id"] == "s3" and hits[0]["completed"] == {word: shown}


def test_completions_only_when_nothing_matches(run, memory):
    """`tea cert`: tea matches, so cert is not widened to certificate (a stray prefix would
    add words the user did not write to a query that already finds something)."""
    hits = hits_of(run("search", "tea", "cert", "--json", root=memory))
    assert [h["id"] for h in hits] == ["tea"] and "completed" not in hits[0]


def test_the_lean_path_and_the_full_command_line_read_words_alike(memory):
    for args in (("search", "bakup", "--json"), ("search", "cert", "--json"), ("search", "bk-03", "--json"),
                 ("search", "bakup")):
        lean, full = both_paths(memory, *args)
        assert lean.returncode == full.returncode, args
        assert lean.stdout == full.stdout, args
        assert (b"showing results for" in lean.stderr) == (b"showing results for" in full.stderr), args


def test_compose_says_which_words_it_showed_results_for(run, memory):
    block = run("compose", "bakup", root=memory)
    assert block.returncode == 0
    text = block.stdout.decode()
    assert "showing results for backup (for bakup)" in text and "bk-02 server backup" in text
    assert "bk-02" not in run("compose", "bk-03", root=memory).stdout.decode()


def test_reply_mode_puts_a_matching_fact_above_session_lines_that_match_no_better(run, tmp_path):
    """Every line of the L4 session holds `staging deploy`, as the L5 fact does; the session's
    own match lifted each line over the fact, and the 5% layer step did not undo it."""
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    rule = "=" * 60
    lines = ["", rule, "SESSION: 0401_0900-0401_0930", rule, "[USER]: the staging deploy failed again",
             "[Agent]: looking at the staging deploy logs", "[USER]: is the staging deploy script on the new host?",
             "[Agent]: the staging deploy script runs there now", "[USER]: thanks, staging deploy works"]
    (root / "L4_raw_sessions").mkdir(exist_ok=True)
    (root / "L4_raw_sessions" / "all_histories.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert run("remember", "-t", "lesson", "staging deploy needs the VPN up first", root=root).returncode == 0
    reply = hits_of(run("search", "staging", "deploy", "--mode", "reply", "--json", root=root))
    assert [h["layer"] for h in reply] == ["L5", "L4", "L4"]
    earlier = hits_of(run("search", "staging", "deploy", "--mode", "earlier", "--json", root=root))
    assert [h["layer"] for h in earlier][:3] == ["L4", "L4", "L4"]
    # a line holding more of the query still goes first: the order is a priority among equals
    better = hits_of(run("search", "staging", "deploy", "script", "--mode", "reply", "--json", root=root))
    assert better[0]["layer"] == "L4" and "script" in better[0]["text"]


def test_the_terminal_table_says_which_words_it_shows_results_for_above_it(memory, memctl_bin):
    """On a terminal (the lean table, and --wide through the full command line) the note comes
    first, then the table."""
    from test_portability import in_terminal

    for extra in ((), ("--wide",)):
        status, screen = in_terminal([memctl_bin, "--root", str(memory), "search", *extra, "bakup"], env_of(memory))
        assert status == 0, screen
        note, table = screen.index("showing results for backup (for bakup)"), screen.index("bk-02 server backup")
        assert note < table, screen


def test_a_hostile_query_of_unknown_words_is_answered_without_a_traceback(run, memory, tmp_path):
    """Thousands of words the memory does not hold, one of 200,000 letters, invalid UTF-8: each
    gets its typo check, at most COMPLETED_WORDS of them a completion, and no traceback."""
    import random
    import string

    rng = random.Random(33)
    nonsense = " ".join("".join(rng.choice("qxzjvw") for _ in range(9)) for _ in range(5000))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"qid": "many", "query": nonsense}) + "\n"
                       + json.dumps({"qid": "long", "query": "q" * 200_000}) + "\n"
                       + json.dumps({"qid": "cert", "query": "cert " + string.ascii_lowercase * 4}) + "\n",
                       encoding="utf-8")
    found = run("search", "--queries", str(queries), root=memory)
    assert found.returncode == 0 and b"Traceback" not in found.stderr
    hits = hits_of(found)
    assert {h["qid"] for h in hits} == {"cert"} and hits[0]["completed"] == {"cert": ["certificate"]}
    garbled = run("search", b"\xff\xfecert".decode("utf-8", "surrogateescape"), "--json", root=memory)
    assert garbled.returncode == 0 and b"Traceback" not in garbled.stderr
