"""The token estimate every budget is counted in (compose's block, compact's summary).

Every CJK character (Han, kana, hangul, CJK and full-width punctuation) counts 1; the rest counts
max(number of whitespace-separated words, ⌈characters / 4⌉). It overestimates common BPE
tokenizers on English and counts Chinese at one token per character, so a text within the
estimate is within a real budget of the same size.
"""

from __future__ import annotations

import math
import re

_CJK = re.compile("[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                  "\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f]")


def estimate_tokens(text: str) -> int:
    """CJK characters one each; other text max(words, ⌈chars / 4⌉)."""
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text) if cjk else text
    other_chars = len(text) - cjk
    return cjk + max(len(rest.split()), math.ceil(other_chars / 4))
