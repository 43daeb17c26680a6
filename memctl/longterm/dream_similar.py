"""Near-duplicate groups for the consolidate rule: blocking, then rapidfuzz in C.

Each text's rarest shared tokens (Latin words, CJK bigrams) name candidate buckets, and only
members of one bucket are compared, by `process.extract` with a score cutoff — never all
pairs in Python. Groups are then refined around their centre so a chain A~B~C does not glue
A to C. Pure: texts in, index groups out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Sequence

from rapidfuzz import fuzz, process

from memctl.longterm.policies import features, normalize

MAX_BUCKET = 400
OVERLAP = 0.6  # token overlap assumed between near-duplicates, for the prefix length
MAX_PREFIX = 4
WINDOW = 64  # neighbours compared inside an oversized bucket, by sorted length


def similar_groups(texts: Sequence[str], cutoff: float) -> list[list[int]]:
    """Groups (index lists, ≥ 2) of texts whose word-sorted edit similarity to the group's
    centre reaches `cutoff`. Candidates come from blocking only: texts with the same numbers
    that share a pair of their rarest shared tokens (prefix filtering)."""
    norms = [normalize(t) for t in texts]
    keys = [" ".join(sorted(n.split())) for n in norms]
    feats = [features(n) for n in norms]
    df: Counter = Counter()
    for ts, _ in feats:
        df.update(ts)
    # a token no other text has cannot find a duplicate; rank the shared ones, rarest first
    shared = sorted((t for t, n in df.items() if n > 1), key=lambda t: (df[t], t))
    rank = {t: r for r, t in enumerate(shared)}
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for index, (ts, nums) in enumerate(feats):
        # prefix filtering: texts sharing >= OVERLAP of their tokens share one of their
        # len - ceil(OVERLAP * len) + 1 rarest tokens; nums in the key: different numbers never meet
        ranked = sorted([rank[t] for t in ts if t in rank])
        if not ranked:
            buckets[(nums, -1, keys[index])].append(index)  # nothing shared: exact text only
            continue
        prefix = min(MAX_PREFIX, len(ranked) - math.ceil(OVERLAP * len(ranked)) + 1)
        for token in ranked[:max(prefix, 1)]:
            buckets[(nums, token)].append(index)
    parent = list(range(len(texts)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for members in buckets.values():
        if len(members) < 2:
            continue
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
    for index in range(len(texts)):
        components[find(index)].append(index)
    groups = []
    for members in components.values():
        if len(members) >= 2:
            groups.extend(_refine(members, keys, cutoff))
    return groups


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
