"""Entry types, their write policies, and what "the same fact" means.

Types come from `[types]` in memctl.toml (defaults in config.DEFAULT_TYPES): a user adds a
type there and it works without code. `merge` types are keyed by (type, topic) and a new
entry supersedes the active one with the same key; `aggregate` types keep one entry per key that
accumulates dated facts (`remember.add_fact`); `append` types always add, except that a
near-duplicate raises `seen` of the existing entry. One similarity function is shared by
`remember`, the forgotten-fact check and the dream's consolidation, so they agree.
"""

from __future__ import annotations

import sys
from collections import namedtuple

from memctl.core.config import Settings
from memctl.longterm import indel
from memctl.longterm.entries import Entry
from memctl.core.errors import UsageError

MERGE = "merge"
APPEND = "append"
AGGREGATE = "aggregate"  # one entry per (type, topic) accumulating dated facts: an entity's history
# A text whose key is longer than this is matched to an identical one only: an edit-distance
# score costs the product of the two lengths (a 3 MB fact against its 3 MB near-duplicate: hours
# in Python, tens of seconds in rapidfuzz), and no agent's fact is a page long.
FUZZY_KEY_MAX = 10_000
# Up to this many candidates are scored in pure Python (memctl.longterm.indel, the same
# numbers) unless rapidfuzz is loaded already: importing it costs a write process ~16 ms of CPU
# (~43M instructions), the pure-Python LCS of a ~50-character key ~7-9 µs (bench/RESULTS.md), so
# the two break even near 2,000 such keys; 1,000 leaves room for longer keys and a loaded machine.
PURE_PYTHON_MAX = 1000


TYPE_CHECKING = False  # typing costs ~3 ms of every write process
if TYPE_CHECKING:
    from typing import Iterable, Sequence


class TypePolicy(namedtuple("TypePolicy", "name policy lifespan")):
    """A type's write policy (`policy`: merge | append; `lifespan`: long | contextual);
    immutable, and a namedtuple rather than a dataclass, as `config.Layout` is."""

    __slots__ = ()

    @property
    def merges(self) -> bool:
        return self.policy == MERGE

    @property
    def aggregates(self) -> bool:
        return self.policy == AGGREGATE

    @property
    def keyed(self) -> bool:
        """Whether entries of the type are one per (type, topic): merge and aggregate."""
        return self.policy in (MERGE, AGGREGATE)

    @property
    def contextual(self) -> bool:
        return self.lifespan == "contextual"


def known_types(settings: Settings) -> dict[str, TypePolicy]:
    return {
        name: TypePolicy(name, spec.get("policy", APPEND), spec.get("lifespan", "long"))
        for name, spec in settings.types.items()
    }


def policy_for(settings: Settings, type_name: str) -> TypePolicy:
    """The policy of a type; an unknown type is an error that names the known ones."""
    types = known_types(settings)
    if type_name not in types:
        known = ", ".join(sorted(types))
        raise UsageError(
            f"unknown entry type {type_name!r}; known types: {known} "
            f"(add one under [types.{type_name}] in memctl.toml)"
        )
    return types[type_name]


def lifespan_of(types: dict[str, TypePolicy], type_name: str) -> str:
    # entries of a type removed from the config are kept and treated as long-lived
    policy = types.get(type_name)
    return policy.lifespan if policy else "long"


def merge_key(entry: Entry) -> tuple[str, str]:
    return (entry.type, normalize_topic(entry.topic))


def normalize_topic(topic: str) -> str:
    return " ".join(topic.lower().split())


def similarity_threshold(settings: Settings) -> float:
    return float(settings.get("dream", "similarity"))


def normalize(text: str) -> str:
    """Lowercase, every non-alphanumeric character to a space, the ends trimmed (CJK characters
    are kept): rapidfuzz's `default_process`, in pure Python where that is exact."""
    if not rapidfuzz_loaded():
        processed = indel.process_text(text)
        if processed is not None:
            return processed
    from rapidfuzz import utils

    return utils.default_process(text)


_CJK_RUNS = r"[\u3400-\u9fff\uf900-\ufaff]+|[^\u3400-\u9fff\uf900-\ufaff]+"  # compiled on first use: its
# character ranges cost the regex compiler ~25M instructions, a tenth of a `remember` process
STEM = 6  # Latin tokens are cut to 6 letters: "migration(s)", "deploy(ing)" meet
_STOP = frozenset("the a an of to in on and or is are was be for with it this that at by as from not".split())


def features(norm: str) -> tuple[set[str], frozenset[str]]:
    """Blocking tokens (Latin words, CJK bigrams) and the words holding digits of a normalized text."""
    if norm.isascii():  # the common case, without a Python loop over characters
        words = norm.split()
        found = {w[:STEM] for w in words if len(w) > 1} - _STOP
        # re's \d is Unicode category Nd, which is what str.isdecimal tests (here: ASCII 0-9)
        return found, frozenset(w for w in words if not w.isalpha() and any(c.isdecimal() for c in w))
    found = set()
    nums = []
    for word in norm.split():
        if word.isascii():
            if not word.isalpha():
                if any(c.isdigit() for c in word):
                    nums.append(word)
            if len(word) > 1 and word not in _STOP:
                found.add(word[:STEM])
            continue
        import re  # here: an ASCII text (the common case) never needs it

        for run in re.findall(_CJK_RUNS, word):  # re caches the compiled pattern
            if run[0] >= "\u3400" and not run.isascii():
                if len(run) == 1:
                    found.add(run)
                else:
                    found.update(run[i:i + 2] for i in range(len(run) - 1))
            else:
                if any(c.isdigit() for c in run):
                    nums.append(run)
                if len(run) > 1:
                    found.add(run[:STEM])
    return found, frozenset(nums)


def numbers(norm: str) -> frozenset[str]:
    """The words holding digits: "bk-01" and "bk-02", or "3 eggs" and "4 eggs", are different
    facts however similar the rest is, so only texts with the same numbers can be duplicates."""
    return features(norm)[1]


def similarity(a: str, b: str) -> float:
    """0..100: word-order-insensitive edit similarity of the normalized texts (0 if numbers differ)."""
    na, nb = normalize(a), normalize(b)
    if numbers(na) != numbers(nb):
        return 0.0
    from rapidfuzz import fuzz

    return fuzz.token_sort_ratio(na, nb)


def best_match(text: str, candidates: Sequence[str], cutoff: float) -> tuple[int, float] | None:
    """Index and score of the candidate most similar to `text` (same numbers), if any reaches
    `cutoff`. rapidfuzz scores every candidate in C (or, for a few, `indel` in Python: the same
    scores); only its hits are checked in Python."""
    if not candidates:
        return None
    query = normalize(text)
    if len(query) > FUZZY_KEY_MAX:
        return identical_key(match_key(text), [match_key(c) for c in candidates])
    wanted = numbers(query)
    if _pure_python(len(candidates)):
        hits = top_ratios(match_key(text), [match_key(c) for c in candidates], cutoff)
    else:
        from rapidfuzz import fuzz, process, utils

        hits = [(score, index) for _, score, index in
                process.extract(query, candidates, scorer=fuzz.token_sort_ratio, processor=utils.default_process,
                                score_cutoff=cutoff, limit=50)]
    for score, index in hits:  # best first
        if numbers(normalize(candidates[index])) == wanted:
            return index, float(score)
    return None


def _pure_python(count: int) -> bool:
    return count <= PURE_PYTHON_MAX and not rapidfuzz_loaded()


def rapidfuzz_loaded() -> bool:
    """Whether this process imported rapidfuzz already (a dream, the full command line): then
    its C code is the cheaper one at any size."""
    return "rapidfuzz.process" in sys.modules


def top_ratios(query: str, keys: Sequence[str], cutoff: float, limit: int = 50) -> list[tuple[float, int]]:
    """(score, index) of the keys whose `fuzz.ratio` with `query` reaches `cutoff`, best first,
    ties to the earlier key: `process.extract`'s answer, from `indel` for a few keys."""
    if _pure_python(len(keys)):
        return indel.extract(query, keys, cutoff, limit)
    from rapidfuzz import fuzz, process

    return [(score, index) for _, score, index in
            process.extract(query, keys, scorer=fuzz.ratio, processor=None, score_cutoff=cutoff, limit=limit)]


def best_key_match(text: str, keys: Sequence[str], cutoff: float) -> tuple[int, float] | None:
    """`best_match` over the candidates' `match_key`s, computed once when they were stored:
    the same scores (token_sort_ratio is the plain ratio of the sorted-word keys), the same
    order, the same numbers rule, without normalizing and sorting every candidate again."""
    if not keys:
        return None
    query = match_key(text)
    if len(query) > FUZZY_KEY_MAX:
        return identical_key(query, keys)
    wanted = numbers(query)
    for score, index in top_ratios(query, keys, cutoff):  # best first
        if numbers(keys[index]) == wanted:
            return index, float(score)
    return None


def identical_key(query: str, keys: Sequence[str]) -> tuple[int, float] | None:
    """The first key equal to `query`, scored 100 — what the scoring gives as the best hit when
    one exists (the top score, ties to the earlier key)."""
    for index, key in enumerate(keys):
        if key == query:
            return index, 100.0
    return None


def near_duplicate(text: str, entries: Iterable[Entry], cutoff: float) -> tuple[Entry, float] | None:
    pool = list(entries)
    found = best_match(text, [e.text for e in pool], cutoff)
    if found is None:
        return None
    return pool[found[0]], found[1]


def match_key(text: str) -> str:
    """What `token_sort_ratio` compares: the normalized words, sorted, one space apart."""
    return " ".join(sorted(normalize(text).split()))


# A partition of a key's characters: the space, digits, four groups of ASCII letters (balanced
# by English letter frequency), and other characters (CJK, accented letters) split by code
# point parity. Any partition gives an exact bound; this one makes it tight for real text.
_LETTER_GROUPS = {c: 2 + group for group, letters in enumerate(("ehcfb", "tslmgvj", "anduykx", "oirwpqz"))
                  for c in letters}
CLASSES = 8


def key_classes(key: str) -> tuple[int, ...]:
    """How many characters of a `match_key` fall in each of the CLASSES classes.

    An LCS pairs equal characters, so two keys have an LCS of at most the sum over the classes
    of the lesser of their counts: `fuzz.ratio` <= 200 * that sum / (a + b), a bound the
    lookups apply in SQL (exact: a row it leaves out cannot reach the cutoff)."""
    counts = [0] * CLASSES
    groups = _LETTER_GROUPS
    for char in key:
        if char == " ":
            counts[0] += 1
        elif char.isascii():
            counts[1 if char.isdigit() else groups.get(char, 2)] += 1
        else:
            counts[6 + (ord(char) & 1)] += 1
    return tuple(counts)


# A key's class signature: one bit per class, for its count in buckets of two (the last: 14 and
# more), so one AND in SQL tells whether every count lies in a window (`candidate_windows`).
SIGNATURE_BUCKETS = 8
_MOST_WINDOWS = 190  # 5 values each: under SQLite's oldest limit of 999 variables a statement
_ROUNDING = 1e-6  # t is computed here as C/200·(a + b), in SQL as C·(a + b) against 200·Σ: not the same float


def class_signature(classes: tuple[int, ...]) -> int:
    bits = 0
    for index, count in enumerate(classes):
        bits |= 1 << (index * SIGNATURE_BUCKETS + min(count // 2, SIGNATURE_BUCKETS - 1))
    return _signed(bits)


def candidate_windows(classes: tuple[int, ...], length: int, cutoff: float, low: int,
                      high: int) -> list[tuple[int, int, int, int, int]]:
    """(shortest, longest, fewest, most, ruled_out) for the candidates' key lengths in [low,
    high]: a row of a length in [shortest, longest] can pass the class bound of `key_classes`
    only with a digit count in [fewest, most] and no bit of `ruled_out` in its signature.

    Both follow from the bound: with t = cutoff·(a + b)/200 for keys of lengths a (the query's,
    counts q) and b (the row's, counts c), the bound says Σ min(c_i, q_i) >= t, and
    Σ min(c_i, q_i) = b − Σ max(0, c_i − q_i) = a − Σ max(0, q_i − c_i), so every class has
    q_i − (a − t) <= c_i <= q_i + (b − t), and as counts are integers, q_i − ⌊a − t⌋ <= c_i <=
    q_i + ⌊b − t⌋ (the floors taken with a margin for float rounding). The window of a range of
    lengths is the widest of its lengths' (a − t falls with b, b − t rises). One window per
    length, or up to `_MOST_WINDOWS` ranges of lengths for very long keys or low cutoffs."""
    count = high - low + 1
    if count <= 0:
        return []
    step = -(-count // _MOST_WINDOWS)
    share = cutoff / 200
    windows = []
    for shortest in range(low, high + 1, step):
        longest = min(high, shortest + step - 1)
        under = int((length - share * (length + shortest) + _ROUNDING) // 1)  # a count is an integer:
        over = int((longest - share * (length + longest) + _ROUNDING) // 1)  # the floors of a - t, b - t
        ruled_out = 0
        shift = 0
        for have in classes:
            fewest, most = have - under, have + over
            # the buckets of class_signature (two counts each, the eighth from 14 up) of fewest and most
            first = 0 if fewest <= 0 else (fewest >> 1 if fewest < 14 else 7)
            last = -1 if most < 0 else (most >> 1 if most < 14 else 7)
            ruled_out |= _OUTSIDE[first][last + 1] << shift
            shift += SIGNATURE_BUCKETS
        windows.append((shortest, longest, classes[1] - under, classes[1] + over, _signed(ruled_out)))
    return windows


# _OUTSIDE[first][last + 1]: the bits of a class's buckets outside first..last (all of them
# when last is -1: no count of the class can be in the window)
_OUTSIDE = [[(1 << SIGNATURE_BUCKETS) - 1 - ((2 << last) - (1 << first) if last >= first else 0)
             for last in range(-1, SIGNATURE_BUCKETS)] for first in range(SIGNATURE_BUCKETS)]


def _signed(bits: int) -> int:
    """SQLite's integers are signed 64-bit: the top class's last bucket is the sign bit."""
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def reachable_lengths(text: str, cutoff: float) -> tuple[int, int]:
    """The `match_key` lengths a candidate needs to possibly score `cutoff` against `text`.

    The score is 100 * (1 - indel / (a + b)) over key lengths a and b, and indel >= |a - b|,
    so a candidate scores at most 200 * min(a, b) / (a + b): a pure length bound (exact, no
    guess), widened by one character each side against float rounding."""
    a = len(match_key(text))
    if cutoff <= 0:
        return 0, 1 << 62
    low = int(cutoff * a / (200 - cutoff)) - 1 if cutoff < 200 else a
    high = int(a * (200 - cutoff) / cutoff) + 2
    return max(0, low), high
