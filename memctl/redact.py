"""Secret redaction: one place that finds API keys, tokens and passwords in text.

Redaction runs before text reaches history, the index, L1, compose output or logs
(design.md §11). A match becomes `[REDACTED:<kind>]`, so redacting twice equals once.
"""

from __future__ import annotations

import re
from typing import Sequence

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_\w{82})\b")),
    ("anthropic-key", re.compile(r"\bsk-ant-(?:api|admin)\d\d-[\w-]{80,100}")),
    ("stripe-key", re.compile(r"\b(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}\b")),
)


def redact(text: str, extra_patterns: Sequence[str] = ()) -> str:
    for kind, pattern in _PATTERNS:
        text = pattern.sub(f"[REDACTED:{kind}]", text)
    for extra in extra_patterns:
        text = re.sub(extra, "[REDACTED:custom]", text)
    return text
