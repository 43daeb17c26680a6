"""rapidfuzz's `default_process` and `fuzz.ratio` top hits, in pure Python, for a few candidates.

A `remember` scores its text against the handful of rows the lookups return; importing
rapidfuzz (its C modules import each other and `typing`) costs a write process ~16 ms of CPU,
more than scoring a few hundred short keys here. What is computed is what rapidfuzz computes,
bit for bit (tests/test_indel.py compares both over random and real texts, Latin and Chinese):

- `process_text`: lowercase, every character that is not alphanumeric to a space, the ends
  trimmed. Python's and rapidfuzz's Unicode tables differ for some characters (newer scripts,
  U+0130), so only texts whose characters all lie in ranges where the two agree are handled
  (`None` otherwise: the caller asks rapidfuzz);
- `ratio`: the normalized Indel similarity 100 * (1 - (a + b - 2 LCS) / (a + b)), in the same
  float operations, the LCS by the bit-parallel algorithm of Allison-Dix / Hyyrö over
  Python ints (exact, one pass over the candidate);
- `extract`: `process.extract(query, keys, scorer=fuzz.ratio, processor=None,
  score_cutoff=cutoff, limit=limit)` — the hits reaching the cutoff, best first, ties to the
  earlier key.
"""

from __future__ import annotations

# (low, high) code points, inclusive, where str.isalnum/str.lower agree with rapidfuzz's table
_AGREED = ((0x0000, 0x012F), (0x0131, 0x017F), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x9FEF),
           (0xAC00, 0xD7A3), (0xFF00, 0xFFEF))


def agreed(text: str) -> bool:
    """Whether every character of `text` is in the ranges where `process_text` is exact."""
    if text.isascii():
        return True
    for char in text:
        point = ord(char)
        if not any(low <= point <= high for low, high in _AGREED):
            return False
    return True


def process_text(text: str) -> str | None:
    """rapidfuzz.utils.default_process(text), or None where this cannot promise the same."""
    if text.isascii():
        if text.isalnum():
            return text.lower()
        return "".join(c if c.isalnum() else " " for c in text.lower()).strip(" ")
    if not agreed(text):
        return None
    return "".join(c.lower() if c.isalnum() else " " for c in text).strip(" ")


def _masks(query: str) -> dict[str, int]:
    masks: dict[str, int] = {}
    bit = 1
    for char in query:
        masks[char] = masks.get(char, 0) | bit
        bit <<= 1
    return masks


def lcs_length(masks: dict[str, int], width: int, other: str) -> int:
    """Length of the longest common subsequence of the query of `masks` (`width` characters)
    and `other`."""
    full = (1 << width) - 1
    row = full
    get = masks.get
    for char in other:
        match = get(char)
        if match:
            low = row & match
            row = ((row + low) | (row - low)) & full
    return width - row.bit_count()


def similarity_from_lcs(lcs: int, total: int) -> float:
    """rapidfuzz's normalized Indel similarity (0..1, its own float steps) for an LCS over two
    lengths summing to `total`."""
    if not total:
        return 1.0
    return 1.0 - (total - 2 * lcs) / total


def ratio(a: str, b: str) -> float:
    return similarity_from_lcs(lcs_length(_masks(a), len(a), b), len(a) + len(b)) * 100


def extract(query: str, keys, cutoff: float, limit: int) -> list[tuple[float, int]]:
    """(score, index) of the keys scoring >= cutoff, best first, ties to the lower index."""
    masks, width = _masks(query), len(query)
    fraction = cutoff / 100
    hits = []
    for index, key in enumerate(keys):
        total = width + len(key)
        if total and 2 * min(width, len(key)) * 100 < cutoff * total * (1 - 1e-9):
            continue  # the length bound alone rules it out (the LCS is at most the shorter)
        similar = similarity_from_lcs(lcs_length(masks, width, key), total)
        # both of rapidfuzz's checks: the scorer's (0..1) and extract's (0..100)
        if similar >= fraction and similar * 100 >= cutoff:
            hits.append((-similar * 100, index))
    hits.sort()
    return [(-negative, index) for negative, index in hits[:limit]]
