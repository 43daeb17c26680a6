"""`last_history_blocks` (what `recent` and so `compose` read of all_histories.txt) gives exactly
what a whole-file parse gives for the names asked, however the file's end cuts the blocks: a
name's last block wins, a name without a block is absent, bad bytes are replaced alike."""

from __future__ import annotations

import random

import pytest

from memctl.l4 import history
from memctl.l4.history import SEPARATOR, history_block, iter_history_blocks, last_history_blocks


def _whole_file(path, names: set[str]) -> dict[str, list[str]]:
    return {name: lines for name, lines in iter_history_blocks(path) if name in names}


def _history(tmp_path, seed: int) -> tuple:
    rng = random.Random(seed)
    names = [f"model_responses_{n:04d}.txt" for n in range(40)]
    parts = []
    for n in range(120):
        name = rng.choice(names)  # some sessions have several blocks: the last one counts
        lines = [f"[USER]: request {n} {'长' * rng.randrange(0, 50)}", *(f"[Agent] step {k}" for k in range(rng.randrange(0, 6)))]
        if rng.random() < 0.1:
            lines.append(SEPARATOR)  # a separator line inside a block's text
        parts.append(history_block(name, lines).encode())
        if rng.random() < 0.05:
            parts.append(b"\xff\xfe not utf-8 \xe4\xb8\n")
    path = tmp_path / "all_histories.txt"
    path.write_bytes(b"".join(parts))
    return path, names


@pytest.mark.parametrize("seed", range(6))
def test_the_tail_read_equals_the_whole_file_parse(tmp_path, monkeypatch, seed):
    path, names = _history(tmp_path, seed)
    rng = random.Random(seed)
    for tail_bytes in (1, 37, 256, 4096, 1 << 20):
        monkeypatch.setattr(history, "TAIL_BYTES", tail_bytes)
        for size in (1, 3, 5, 12):
            wanted = set(rng.sample(names, size)) | ({"never-archived.txt"} if rng.random() < 0.3 else set())
            assert last_history_blocks(path, wanted) == _whole_file(path, wanted)


def test_a_missing_history_is_empty(tmp_path):
    assert last_history_blocks(tmp_path / "all_histories.txt", {"a"}) == {}
