"""The key of an embedded text, without numpy: a search that fuses in a forked helper
(memctl.recall.semantic_helper) checks its candidates' texts with it and never imports numpy."""

from __future__ import annotations

import hashlib


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()
