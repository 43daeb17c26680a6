"""Near-duplicate groups for the consolidate rule: blocking, then rapidfuzz in C.

Each text's rarest shared tokens (Latin words, CJK bigrams) name candidate buckets, and only
members of one bucket are compared, by `process.extract` with a score cutoff — never all
pairs in Python. Groups are then refined around their centre so a chain A~B~C does not glue
A to C. Pure: texts in, index groups out.
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import Iterable, Iterator

from rapidfuzz import fuzz, process

from memctl.longterm.dream_scratch import ScratchKeys, ScratchNumbers
from memctl.longterm.policies import features, normalize

MAX_BUCKET = 400
OVERLAP = 0.6  # token overlap assumed between near-duplicates, for the prefix length
MAX_PREFIX = 4
WINDOW = 64  # neighbours compared inside an oversized bucket, by sorted length


def similar_groups(texts: Iterable[str], cutoff: float) -> list[list[int]]:
    """Groups (index lists, ≥ 2) of texts whose word-sorted edit similarity to the group's
    centre reaches `cutoff`. Candidates come from blocking only: texts with the same numbers
    that share a pair of their rarest shared tokens (prefix filtering). `texts` is read once;
    what is kept of each is its sorted key and its token numbers, in temporary files
    (`dream_scratch`), the key read again when a bucket compares it (a million texts: their
    keys alone would be a few hundred MB)."""
    with ScratchKeys() as keys:
        blocks = _keys_and_blocks(texts, keys)
        count = len(keys)
        parent = array("i", range(count))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for members in blocks:
            if len(members) > MAX_BUCKET:  # a pair of common words: compare length neighbours only
                members = sorted(members, key=keys.length)
                chunks = [members[k:k + WINDOW * 2] for k in range(0, len(members), WINDOW)]
            else:
                chunks = [members]
            for chunk in chunks:
                choices = [keys[j] for j in chunk]
                if len(chunk) == 2:
                    if fuzz.ratio(choices[0], choices[1], score_cutoff=cutoff):
                        _union(parent, find, chunk[0], chunk[1])
                    continue
                for pos, i in enumerate(chunk[:-1]):
                    for _, _, k in process.extract(choices[pos], choices[pos + 1:], scorer=fuzz.ratio,
                                                    score_cutoff=cutoff, limit=None):
                        _union(parent, find, i, chunk[pos + 1 + k])
        groups = []
        for members in _components(parent, find, count):
            groups.extend(_refine(members, {i: keys[i] for i in members}, cutoff))
    return groups


def _components(parent: array, find, count: int) -> Iterator[list[int]]:
    """The components of two or more, each in index order, in the order of their first index
    (a list for each of them only: most texts are alone)."""
    roots = array("i", (find(i) for i in range(count)))
    size = array("i", bytes(4 * count))
    for root in roots:
        size[root] += 1
    components: dict[int, list[int]] = {}
    for index, root in enumerate(roots):
        if size[root] >= 2:
            components.setdefault(root, []).append(index)
    return iter(components.values())


def _keys_and_blocks(texts: Iterable[str], keys: ScratchKeys) -> Iterator[list[int]]:
    """Each text's key (into `keys`), and the buckets of two or more (members in index order)."""
    vocabulary: dict[str, int] = {}  # token -> number
    df = array("l")  # per token number: how many texts hold it
    tokens = ScratchNumbers()  # every text's token numbers, in a temporary file
    numbers: dict[str, int] = {}  # the words holding digits (sorted, joined), as a number
    number_of = array("i")
    for text in texts:
        norm = normalize(text)
        keys.append(" ".join(sorted(norm.split())))
        found, nums = features(norm)
        numbered = array("i", (vocabulary.setdefault(t, len(vocabulary)) for t in found))
        if len(df) < len(vocabulary):
            df.extend([0] * (len(vocabulary) - len(df)))
        for t in numbered:
            df[t] += 1
        tokens.append(numbered)
        number_of.append(numbers.setdefault("\0".join(sorted(nums)), len(numbers)))
    del numbers
    # a token no other text has cannot find a duplicate; rank the shared ones, rarest first
    spelling = list(vocabulary)  # ties in rarity: the alphabetically first token first
    rank = array("l", [-1]) * len(vocabulary)
    for r, t in enumerate(sorted((t for t in range(len(vocabulary)) if df[t] > 1), key=lambda t: (df[t], spelling[t]))):
        rank[t] = r
    del df, spelling, vocabulary
    width = len(rank) + 1
    runs = _Runs()  # (numbers, token) as one number, then the text: sorted, they are the buckets
    alone: dict[tuple[int, str], list[int]] = {}
    count = len(keys)
    for index, numbered in enumerate(tokens.read()):
        # prefix filtering: texts sharing >= OVERLAP of their tokens share one of their
        # len - ceil(OVERLAP * len) + 1 rarest tokens; nums in the key: different numbers never meet
        ranked = sorted(r for r in (rank[t] for t in numbered) if r >= 0)
        if not ranked:
            alone.setdefault((number_of[index], hash(keys[index])), []).append(index)  # exact text only
            continue
        prefix = min(MAX_PREFIX, len(ranked) - math.ceil(OVERLAP * len(ranked)) + 1)
        for token in ranked[:max(prefix, 1)]:
            runs.add((number_of[index] * width + token) * count + index)
    tokens.close()
    del rank
    return _buckets(runs.merged(), count, _exact(alone, keys))


def _exact(alone: dict[tuple[int, int], list[int]], keys: ScratchKeys) -> Iterator[list[int]]:
    """The texts with nothing shared grouped by numbers and key (the key's hash first, then
    the key itself: texts whose keys only hash alike are not a group)."""
    for members in alone.values():
        if len(members) < 2:
            continue
        same: dict[str, list[int]] = {}
        for index in members:
            same.setdefault(keys[index], []).append(index)
        yield from (m for m in same.values() if len(m) >= 2)


class _Runs:
    """Numbers sorted in bounded memory: sorted runs kept as flat arrays, merged when read."""

    RUN = 1 << 17  # numbers sorted as Python ints at a time (~5 MB)

    def __init__(self) -> None:
        self._runs: list[array] = []
        self._pending: list[int] = []

    def add(self, value: int) -> None:
        self._pending.append(value)
        if len(self._pending) >= self.RUN:
            self._close_run()

    def _close_run(self) -> None:
        self._pending.sort()
        self._runs.append(array("q", self._pending))
        self._pending = []

    def merged(self) -> Iterator[int]:
        if self._pending:
            self._close_run()
        runs, self._runs = self._runs, []
        return heapq.merge(*runs)


def _buckets(slots: Iterable[int], count: int, alone: Iterator[list[int]]) -> Iterator[list[int]]:
    members: list[int] = []
    bucket = None
    for slot in slots:
        key, index = divmod(slot, count)
        if key != bucket:
            if len(members) >= 2:
                yield members
            members, bucket = [], key
        members.append(index)
    if len(members) >= 2:
        yield members
    yield from alone


def _union(parent: list[int], find, a: int, b: int) -> None:
    ra, rb = find(a), find(b)
    if ra != rb:
        parent[rb] = ra


def _refine(members: list[int], keys: dict[int, str], cutoff: float) -> list[list[int]]:
    """Keep the members close to the group's centre, so a chain A~B~C does not glue A to C."""
    if len(members) == 2:
        return [members]
    if len(members) <= 40:
        best, best_score = members[0], -1.0
        for i in members:
            score = sum(s for _, s, _ in process.extract(keys[i], [keys[j] for j in members], scorer=fuzz.ratio,
                                                           limit=None))
            if score > best_score:
                best, best_score = i, score
    else:
        best = max(members, key=lambda i: len(keys[i]))
    close = [members[k] for _, _, k in process.extract(keys[best], [keys[j] for j in members], scorer=fuzz.ratio,
                                                         score_cutoff=cutoff, limit=None)]
    close.sort()
    rest = [m for m in members if m not in set(close)]
    out = [close] if len(close) >= 2 else []
    if len(rest) >= 2:
        out.extend(_refine(rest, keys, cutoff))
    return out
