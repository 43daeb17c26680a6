"""A fact far longer than any agent's, remembered twice: the near-duplicate check must not
score it against its twin by edit distance (the product of the two lengths: hours for 3 MB in
pure Python), only by identity. Before the bound, the second `remember` below did not finish."""

from __future__ import annotations

import json

from memctl.longterm.policies import FUZZY_KEY_MAX, best_key_match, best_match, match_key

HUGE = 1_000_000


def test_a_huge_fact_remembered_again_is_its_twin_seen_and_a_changed_one_is_added(tmp_path, run):
    root = tmp_path / "memory"
    assert run("init", root=root).returncode == 0
    with (root / "memctl.toml").open("a") as config:  # the largest fact a memory may allow: 1 MiB
        config.write("\n[writes]\nmax_fact_bytes = 1048576\n")
    text = ("the deploy log says " + "x" * HUGE).encode()
    first = run("remember", "-", "--type", "event", root=root, input=text, timeout=60)
    assert first.returncode == 0, first.stderr
    again = run("remember", "-", "--type", "event", root=root, input=text, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == first.stdout.strip()
    assert b"seen 2" in again.stderr
    changed = run("remember", "-", "--type", "event", root=root, input=text[:-1] + b"y", timeout=60)
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.strip() != first.stdout.strip()
    lines = (root / "long_term.jsonl").read_text(encoding="utf-8").splitlines()
    assert [len(json.loads(line)["text"]) for line in lines] == [len(text), len(text)]
    assert run("verify", root=root).returncode == 0


def test_past_the_bound_only_an_identical_key_matches_and_the_earliest_wins():
    long_text = "word " * (FUZZY_KEY_MAX // 4)
    keys = [match_key(long_text + "a"), match_key(long_text), match_key(long_text)]
    assert len(keys[1]) > FUZZY_KEY_MAX
    assert best_key_match(long_text, keys, 90.0) == (1, 100.0)
    assert best_key_match(long_text + "b", keys, 90.0) is None
    assert best_match(long_text, [long_text + "a", long_text], 90.0) == (1, 100.0)


def test_under_the_bound_near_duplicates_still_match():
    text = "rotated the cache on host w1234 after the deploy"
    assert best_key_match(text + " today", [match_key(text)], 80.0) is not None
