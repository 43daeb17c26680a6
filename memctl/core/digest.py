"""sha256 for the write path without loading OpenSSL.

`hashlib` loads libcrypto (~2.5 ms of a `remember` process, more than the hashing); the
interpreter's own `_sha2` (`_sha256` before 3.12) computes the same digest. The write
lookups' freshness check and an entry's fingerprint hash a few KiB, where its speed does not
matter; bulk hashing (the index, the zips) keeps using hashlib.
"""

from __future__ import annotations

try:
    from _sha2 import sha256  # Python >= 3.12
except ImportError:
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:  # a build without the builtin modules
        from hashlib import sha256


def sha256_hex(data: bytes) -> str:
    return sha256(data).hexdigest()
