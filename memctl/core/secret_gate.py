"""Whether a text can hold a secret at all, without loading the redaction rules.

`memctl.core.redact` costs ~4.6M instructions to import (its rules, `re`, `collections`), and a
write or a printed line pays it even when nothing in the text could match. Every rule's match
holds one of the pivot characters below, or, for the few shapes without one (`AKIA…`, `AIza…`,
`SK…`, `machine … password`, `Bearer …`, `Basic …`, `the password is …`, `密码是…`), one of
their keywords:
tests/test_secret_gate.py checks this over redact's rule table, so a text the gate passes over
is one `redact` would return unchanged.
"""

from __future__ import annotations

PIVOTS = "-_:.=~："
# the keywords of the rules without a pivot character (lowercase, as redact matches them)
WORDS = ("akia", "asia", "abia", "acca", "a3t", "aiza", "sk", "machine", "bearer", "basic",
         "passw", "passphrase", "passcode", "密码", "口令", "密钥")


def may_hold_secret(text: str) -> bool:
    """False only when no redaction rule can match `text` (the user's extra patterns aside)."""
    lowered = text.replace("\u0130", "i").lower()  # as redact lowers: U+0130 is the one that grows
    for char in PIVOTS:
        if char in lowered:
            return True
    for word in WORDS:
        if word in lowered:
            return True
    return False
