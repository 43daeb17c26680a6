"""Secret redaction: one place that finds API keys, tokens and passwords in text.

Redaction runs before text reaches history, the index, L1, compose output or logs
(design.md §11). A match becomes `[REDACTED:<kind>]`; no pattern matches a marker, so
redacting twice equals redacting once.

How (conventions.md §7): a cheap keyword prefilter, then a regex per shape, then a check
on the captured value (entropy, placeholders) where the shape alone would hit prose.
Every quantifier is bounded, so a pattern does a bounded amount of work per start position
and a huge log line costs linear time. Left boundaries also accept a JSON escape (`\\n`,
`\\t`, `\\r`) because raw logs hold JSON strings whose escapes glue a token to a letter.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

MARKER = "[REDACTED:{kind}]"

# A token starts after a non-word character, at the start of text, or after a JSON escape.
_L = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
_R = r"(?![A-Za-z0-9_])"
_RD = r"(?![A-Za-z0-9_-])"  # for shapes whose alphabet includes '-'


@dataclass(frozen=True)
class SecretFinding:
    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...]  # lowercase substrings; the regex runs only if one occurs
    group: int = 0  # the part that is the secret (the rest is context kept as is)
    check: Callable[[str], bool] | None = None


def _entropy(value: str) -> float:
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


_PLACEHOLDER = re.compile(
    r"^(?:[*xX.•#-]+|<[^>]*>|\{[^}]*\}|\$.*|%.*%|(?i:password|passwd|pass|secret|token|changeme|"
    r"redacted|example|dummy|placeholder|none|null|true|false|undefined|string|your[_-].*|\.\.\.))$"
)
# identifiers and dotted attribute paths: `token = self.tokenizer`, `key: config.api_key`
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z_.]*(?:\(\))?$")


def _secretish(value: str) -> bool:
    """A value that looks like a credential rather than a word, a path or a variable."""
    if "REDACTED" in value or _PLACEHOLDER.match(value) or _IDENTIFIER.match(value):
        return False
    if value.isdigit() or value[0] in "/~" or value.startswith(("./", "../", "http")):
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    if len(value) >= 20:
        return _entropy(value) >= 3.0 and classes >= 2
    return len(value) >= 6 and classes >= 2 and any(c.isdigit() or not c.isalnum() for c in value)


def _random_token(value: str) -> bool:
    """A bearer-style token: long, mixed letters and digits, not a word."""
    return (
        "REDACTED" not in value
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and _entropy(value) >= 3.0
    )


def _basic_credentials(value: str) -> bool:
    """`Basic <b64>` is a secret when it decodes to `user:password`."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _url_password(value: str) -> bool:
    return "REDACTED" not in value and not _PLACEHOLDER.match(value)


def _rule(kind, pattern, keywords, group=0, check=None, flags=0) -> _Rule:
    return _Rule(kind, re.compile(pattern, flags), tuple(keywords), group, check)


_KEYWORDS = (
    r"api[_-]?key|apikey|access[_-]?key|auth[_-]?key|secret[_-]?key|client[_-]?secret|secret|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|token|passw(?:or)?d|passphrase|pass|pwd|"
    r"priv(?:ate)?[_-]?key|credentials?|密码|口令|密钥"
)

RULES: tuple[_Rule, ...] = (
    _rule(
        "private-key",
        r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,16384}?-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\:,.-]{0,16384})",
        ["private key"],
        flags=re.I,
    ),
    _rule("aws-access-key", _L + r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _R, ["akia", "asia", "abia", "acca", "a3t"]),
    _rule(
        "aws-secret-key",
        r"(?i:aws)[\w.-]{0,20}(?i:secret|key)[\w.-]{0,20}(?:\\?[\"'])?\s*(?::=|=>|=|:)\s*(?:\\?[\"'])?"
        r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ["aws"],
        group=1,
    ),
    _rule("github-token", _L + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{82,255})" + _R, ["gh", "github_pat_"]),
    _rule("anthropic-key", _L + r"sk-ant-[a-z]{2,8}\d\d-[A-Za-z0-9_-]{32,200}" + _RD, ["sk-ant-"]),
    _rule(
        "openai-key",
        _L + r"sk-(?:(?:proj|svcacct|admin|service)-)?[A-Za-z0-9_-]{8,200}T3BlbkFJ[A-Za-z0-9_-]{8,200}" + _RD,
        ["t3blbkfj"],
    ),
    _rule("openrouter-key", _L + r"sk-or-v1-[a-f0-9]{64}" + _R, ["sk-or-"]),
    # sk- + 32..64 letters/digits: DeepSeek, Moonshot and other OpenAI-compatible providers
    _rule("sk-key", _L + r"sk-[A-Za-z0-9]{32,64}" + _RD, ["sk-"], check=_random_token),
    _rule("stripe-key", _L + r"(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}" + _R, ["_test_", "_live_", "_prod_"]),
    _rule("google-api-key", _L + r"AIza[A-Za-z0-9_-]{35}" + _RD, ["aiza"]),
    _rule("gitlab-token", _L + r"gl(?:pat|ptt|dt|rt|cbt|oas)-[A-Za-z0-9_-]{20,100}" + _RD, ["gl"]),
    _rule("npm-token", _L + r"npm_[A-Za-z0-9]{36}" + _R, ["npm_"]),
    _rule("pypi-token", _L + r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,1000}" + _RD, ["pypi-ag"]),
    _rule("huggingface-token", _L + r"(?:hf_|api_org_)[A-Za-z0-9]{34,40}" + _R, ["hf_", "api_org_"], check=_random_token),
    _rule("groq-key", _L + r"gsk_[A-Za-z0-9]{52}" + _R, ["gsk_"]),
    _rule("slack-token", _L + r"xox[abeoprs]-(?:[0-9]{6,13}-){1,4}[A-Za-z0-9-]{8,100}" + _RD, ["xox"]),
    _rule("slack-app-token", _L + r"xapp-\d-[A-Z0-9]{6,20}-\d{6,20}-[A-Za-z0-9]{20,100}" + _R, ["xapp-"]),
    _rule(
        "slack-webhook",
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,200}",
        ["hooks.slack.com"],
    ),
    _rule("sendgrid-key", _L + r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _RD, ["sg."]),
    _rule("twilio-key", _L + r"SK[0-9a-f]{32}" + _R, ["sk"]),
    _rule("digitalocean-token", _L + r"do[opr]_v1_[a-f0-9]{64}" + _R, ["_v1_"]),
    _rule("shopify-token", _L + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _R, ["shp"]),
    _rule("jwt", _L + r"eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}\.[A-Za-z0-9_-]{0,4000}" + _RD, ["eyj"]),
    _rule(
        "bearer-token",
        r"(?i:\bbearer)(?:\s|\\[nrt]){1,4}([A-Za-z0-9._~+/-]{16,4000}=*)",
        ["bearer"],
        group=1,
        check=_random_token,
    ),
    _rule(
        "basic-auth",
        r"(?i:\bbasic)\s{1,4}([A-Za-z0-9+/]{8,4000}={0,2})(?![A-Za-z0-9+/=])",
        ["basic"],
        group=1,
        check=_basic_credentials,
    ),
    _rule(
        "curl-user",
        r"(?i:\bcurl\b)[^\n]{0,400}?\s(?:-u|--user)\s{0,4}[\"']?[^\s\"':]{0,100}:([^\s\"'\\]{1,200})",
        ["curl"],
        group=1,
        check=_url_password,
    ),
    _rule(
        "url-password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@\"'<>]{0,100}:([^\s/@\"'<>\\]{1,200})@(?=[A-Za-z0-9\[])",
        ["://"],
        group=1,
        check=_url_password,
    ),
    _rule(
        "password-assignment",
        r"(?i:" + _KEYWORDS + r")(?:\\?[\"'])?\s{0,4}(?::=|=>|=|:|：)\s{0,4}(?:\\?[\"'])?"
        r"([^\s\"'`,;()\[\]{}<>\\]{6,200})",
        ["key", "secret", "token", "pass", "pwd", "credential", "密码", "口令", "密钥"],
        group=1,
        check=_secretish,
    ),
)


_GENERIC = frozenset({"password-assignment", "custom"})


def _extra_rules(extra_patterns: Sequence[str]) -> list[_Rule]:
    return [_Rule("custom", re.compile(p), (), 0, None) for p in extra_patterns]


def find_secrets(text: str, extra_patterns: Sequence[str] = ()) -> list[SecretFinding]:
    """Every secret in `text`, sorted, overlapping hits merged (the first kind wins)."""
    lowered = text.lower()
    hits: list[SecretFinding] = []
    for rule in (*RULES, *_extra_rules(extra_patterns)):
        if rule.keywords and not any(k in lowered for k in rule.keywords):
            continue
        hits.extend(_rule_hits(rule, text))
    return _merge(hits)


def _rule_hits(rule: _Rule, text: str) -> Iterable[SecretFinding]:
    for match in rule.pattern.finditer(text):
        start, end = match.span(rule.group)
        if start == end:
            continue
        value = match.group(rule.group)
        if rule.kind in _GENERIC:  # a sentence's full stop is not part of the value
            trimmed = value.rstrip(".")
            end -= len(value) - len(trimmed)
            value = trimmed
        if not value:
            continue
        if rule.check is not None and not rule.check(value):
            continue
        yield SecretFinding(rule.kind, start, end)


def _merge(hits: list[SecretFinding]) -> list[SecretFinding]:
    """Overlapping hits become one; a provider's name beats a generic assignment's."""
    merged: list[SecretFinding] = []
    for hit in sorted(hits, key=lambda h: (h.start, h.kind in _GENERIC, -h.end)):
        if merged and hit.start < merged[-1].end:
            last = merged[-1]
            kind = hit.kind if last.kind in _GENERIC and hit.kind not in _GENERIC else last.kind
            merged[-1] = SecretFinding(kind, last.start, max(last.end, hit.end))
        else:
            merged.append(hit)
    return merged


def redact(text: str, extra_patterns: Sequence[str] = ()) -> str:
    """`text` with every secret replaced by `[REDACTED:<kind>]`; idempotent."""
    findings = find_secrets(text, extra_patterns)
    if not findings:
        return text
    parts: list[str] = []
    cursor = 0
    for finding in findings:
        parts.append(text[cursor : finding.start])
        parts.append(MARKER.format(kind=finding.kind))
        cursor = finding.end
    parts.append(text[cursor:])
    return "".join(parts)


def redactor(enabled: bool = True, extra_patterns: Sequence[str] = ()) -> Callable[[str], str]:
    """The redaction function `[redaction]` in memctl.toml asks for (identity when disabled)."""
    if not enabled:
        return lambda text: text
    extra = tuple(extra_patterns)
    return lambda text: redact(text, extra)


def redactor_for(settings) -> Callable[[str], str]:
    """`redactor` configured from a Settings object (config.py's [redaction] table)."""
    return redactor(bool(settings.get("redaction", "enabled")), settings.get("redaction", "extra_patterns"))
