"""Near-duplicate groups for the consolidate rule: blocking, then rapidfuzz in C.

Each text's rarest shared tokens (Latin words, CJK bigrams) name candidate buckets, and only
members of one bucket are compared, by `process.extract` with a score cutoff — never all
pairs in Python. Groups are then refined around their centre so a chain A~B~C does not glue
A to C. Pure: texts in, index groups out.
"""

from __future__ import annotations

import math
from array import array
from collections import defaultdict
from typing import Iterable, Iterator

from rapidfuzz import fuzz, process

from memctl.longterm.policies import features, normalize

MAX_BUCKET = 400
OVERLAP = 0.6  # token overlap assumed between near-duplicates, for the prefix length
MAX_PREFIX = 4
WINDOW = 64  # neighbours compared inside an oversized bucket, by sorted length


def similar_groups(texts: Iterable[str], cutoff: float) -> list[list[int]]:
    """Groups (index lists, ≥ 2) of texts whose word-sorted edit similarity to the group's
    centre reaches `cutoff`. Candidates come from blocking only: texts with the same numbers
    that share a pair of their rarest shared tokens (prefix filtering). `texts` is read once;
    what is kept of each is its sorted key and its tokens as numbers (hundreds of thousands of
    texts: token sets and bucket tuples would cost far more than the texts)."""
    keys, blocks = _keys_and_blocks(texts)
    count = len(keys)
    parent = list(range(count))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for members in blocks:
        if len(members) > MAX_BUCKET:  # a pair of common words: compare length neighbours only
            members = sorted(members, key=lambda i: len(keys[i]))
            chunks = [members[k:k + WINDOW * 2] for k in range(0, len(members), WINDOW)]
        else:
            chunks = [members]
        for chunk in chunks:
            if len(chunk) == 2:
                if fuzz.ratio(keys[chunk[0]], keys[chunk[1]], score_cutoff=cutoff):
                    _union(parent, find, chunk[0], chunk[1])
                continue
            choices = [keys[j] for j in chunk]
            for pos, i in enumerate(chunk[:-1]):
                for _, _, k in process.extract(keys[i], choices[pos + 1:], scorer=fuzz.ratio,
                                                score_cutoff=cutoff, limit=None):
                    _union(parent, find, i, chunk[pos + 1 + k])
    components: dict[int, list[int]] = defaultdict(list)
    for index in range(count):
        components[find(index)].append(index)
    groups = []
    for members in components.values():
        if len(members) >= 2:
            groups.extend(_refine(members, keys, cutoff))
    return groups


def _keys_and_blocks(texts: Iterable[str]) -> tuple[list[str], Iterator[list[int]]]:
    """Each text's key, and the buckets of two or more (members in index order)."""
    keys: list[str] = []
    vocabulary: dict[str, int] = {}  # token -> number
    tokens = array("l")  # every text's token numbers, one after the other
    ends = array("l")  # where each text's numbers end
    numbers: dict[frozenset, int] = {}  # the words holding digits, as a number
    number_of = array("l")
    for text in texts:
        norm = normalize(text)
        keys.append(" ".join(sorted(norm.split())))
        found, nums = features(norm)
        tokens.extend(vocabulary.setdefault(t, len(vocabulary)) for t in found)
        ends.append(len(tokens))
        number_of.append(numbers.setdefault(nums, len(numbers)))
    df = [0] * len(vocabulary)
    for t in tokens:
        df[t] += 1
    # a token no other text has cannot find a duplicate; rank the shared ones, rarest first
    spelling = list(vocabulary)  # ties in rarity: the alphabetically first token first
    rank = [-1] * len(vocabulary)
    for r, t in enumerate(sorted((t for t in range(len(vocabulary)) if df[t] > 1), key=lambda t: (df[t], spelling[t]))):
        rank[t] = r
    del df, spelling, vocabulary
    width = len(rank) + 1
    slots: list[int] = []  # (numbers, token) as one number, then the text: sorted, they are the buckets
    alone: dict[tuple, list[int]] = defaultdict(list)
    start = 0
    for index, end in enumerate(ends):
        # prefix filtering: texts sharing >= OVERLAP of their tokens share one of their
        # len - ceil(OVERLAP * len) + 1 rarest tokens; nums in the key: different numbers never meet
        ranked = sorted(r for r in (rank[t] for t in tokens[start:end]) if r >= 0)
        start = end
        if not ranked:
            alone[(number_of[index], keys[index])].append(index)  # nothing shared: exact text only
            continue
        prefix = min(MAX_PREFIX, len(ranked) - math.ceil(OVERLAP * len(ranked)) + 1)
        for token in ranked[:max(prefix, 1)]:
            slots.append((number_of[index] * width + token) * len(ends) + index)
    del tokens, ends, rank
    slots.sort()
    return keys, _buckets(slots, len(keys), alone)


def _buckets(slots: list[int], count: int, alone: dict[tuple, list[int]]) -> Iterator[list[int]]:
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
    yield from (m for m in alone.values() if len(m) >= 2)


def _union(parent: list[int], find, a: int, b: int) -> None:
    ra, rb = find(a), find(b)
    if ra != rb:
        parent[rb] = ra


def _refine(members: list[int], keys: list[str], cutoff: float) -> list[list[int]]:
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
