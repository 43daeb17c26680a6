"""The key of an embedded text, without numpy: a search that fuses in a forked helper
(memctl.recall.embeddings.semantic_helper) checks its candidates' texts with it and never imports numpy."""

from __future__ import annotations

try:  # CPython's own module: 0.5 ms to import, where hashlib (OpenSSL's bindings) takes 5
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another interpreter
    from hashlib import blake2b


def text_hash(text: str) -> bytes:
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).digest()
