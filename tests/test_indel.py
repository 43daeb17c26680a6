"""memctl.longterm.indel computes what rapidfuzz computes: `default_process`, `fuzz.ratio`, and
`process.extract`'s hits (score, order, ties, cutoff), over random and real texts, Latin and
Chinese; and the near-duplicate check answers the same with either scorer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from rapidfuzz import fuzz, process, utils

from memctl.longterm import indel, policies

SAMPLES = Path("/work/shared/samples/genericagent")
ALPHABETS = ("ab ", "abcdefgh ", "the quick brown fox jumps over lazy dog 0123456789 -_.,:/",
             "缓存迁移主机备份编辑器队列索引集群 ab1", "Ää ÖöÜüß éèê ñ Ç 1 ,.;",
             "\t\n\x1c\u00a0\u3000\u2003x")


def _real_texts() -> list[str]:
    texts = []
    for path in sorted(SAMPLES.rglob("*.jsonl"))[:20] if SAMPLES.exists() else []:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:200]:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and isinstance(value.get("text"), str):
                texts.append(value["text"])
    for path in sorted(SAMPLES.rglob("*.txt"))[:20] if SAMPLES.exists() else []:
        texts.extend(path.read_text(encoding="utf-8", errors="replace").splitlines()[:200])
    return [t for t in texts if t.strip()]


def _random_text(rng: random.Random) -> str:
    alphabet = rng.choice(ALPHABETS)
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))


def _variant(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(0, 6)):
        spot = rng.randint(0, len(chars))
        move = rng.random()
        if move < 0.4 and chars:
            del chars[min(spot, len(chars) - 1)]
        elif move < 0.8:
            chars.insert(spot, rng.choice("abcxyz 缓存1"))
        elif chars:
            chars[min(spot, len(chars) - 1)] = rng.choice("ABCÄ中 ")
    return "".join(chars)


def test_process_text_is_default_process_for_every_agreed_code_point():
    for point in range(0x110000):
        if 0xD800 <= point < 0xE000:
            continue
        text = f"A{chr(point)}b"
        mine = indel.process_text(text)
        if mine is not None:
            assert mine == utils.default_process(text), hex(point)
    # what it refuses rapidfuzz is asked for; what it accepts covers Latin, CJK and Hangul
    assert indel.process_text("İ") is None and indel.process_text("\u0870") is None
    assert indel.process_text("Ärger 缓存 한국 ｘ") == utils.default_process("Ärger 缓存 한국 ｘ")


def test_process_text_on_whole_texts():
    rng = random.Random(5)
    texts = _real_texts() + [_random_text(rng) for _ in range(3000)]
    for text in texts:
        mine = indel.process_text(text)
        if mine is not None:
            assert mine == utils.default_process(text)
            assert indel.process_text(mine) == mine  # idempotent, as token_sort_ratio relies on


def test_ratio_is_fuzz_ratio_bit_for_bit():
    rng = random.Random(7)
    real = [policies.match_key(t) for t in _real_texts()]
    pairs = [(_random_text(rng), _random_text(rng)) for _ in range(4000)]
    for _ in range(4000):
        text = _random_text(rng)
        pairs.append((text, _variant(rng, text)))
    for _ in range(1000) if real else ():
        text = rng.choice(real)
        pairs.append((text, _variant(rng, text)))
        pairs.append((text, rng.choice(real)))
    pairs.append(("x" * 300, "x" * 299 + "y"))  # wider than a machine word
    for a, b in pairs:
        assert indel.ratio(a, b) == fuzz.ratio(a, b), (a, b)


@pytest.mark.parametrize("cutoff", [0, 50, 66.66666666666667, 80, 88, 95, 100])
def test_extract_is_process_extract(cutoff):
    rng = random.Random(int(cutoff) + 11)
    for _ in range(300):
        query = _random_text(rng)
        keys = [_variant(rng, query) if rng.random() < 0.5 else _random_text(rng)
                for _ in range(rng.randint(0, 90))]
        keys += keys[:rng.randint(0, 5)]  # equal scores: the earlier key first
        for limit in (1, 3, 50):
            expected = [(score, index) for _, score, index in
                        process.extract(query, keys, scorer=fuzz.ratio, processor=None, score_cutoff=cutoff,
                                        limit=limit)]
            assert indel.extract(query, keys, cutoff, limit) == expected


def test_best_matches_agree_with_and_without_rapidfuzz(monkeypatch):
    rng = random.Random(3)
    found = 0
    words = "deploy cache host backup 缓存 迁移 n1 n2 v3 the shell".split()
    for _ in range(300):
        text = " ".join(rng.sample(words, rng.randint(2, 6)))
        pool = [" ".join(rng.sample(words, rng.randint(2, 6))) for _ in range(rng.randint(0, 40))]
        keys = [policies.match_key(t) for t in pool]
        for cutoff in (60, 88):
            monkeypatch.setattr(policies, "rapidfuzz_loaded", lambda: False)
            assert [policies.match_key(t) for t in pool] == keys  # keys made without rapidfuzz
            pure = (policies.best_key_match(text, keys, cutoff), policies.best_match(text, pool, cutoff))
            monkeypatch.setattr(policies, "rapidfuzz_loaded", lambda: True)
            fast = (policies.best_key_match(text, keys, cutoff), policies.best_match(text, pool, cutoff))
            assert pure == fast
            found += pure[0] is not None
    assert found > 50  # the comparison covered hits, not only misses

