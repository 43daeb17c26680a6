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

import math
import re
from collections import Counter, namedtuple

from memctl.core.secret_gate import PIVOTS

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms: every printed line passes here
if TYPE_CHECKING:
    from typing import Callable, Iterable, Sequence

MARKER = "[REDACTED:{kind}]"

_R = r"(?![A-Za-z0-9_])"
_RD = r"(?![A-Za-z0-9_-])"  # for shapes whose alphabet includes '-'


class SecretFinding(namedtuple("SecretFinding", "kind start end")):
    __slots__ = ()


class _Rule(namedtuple("_Rule", "kind pattern keywords group check left_boundary lowered trigger",
                       defaults=(0, None, False, False, ""))):
    """kind; pattern (compiled); keywords: lowercase substrings, the regex runs only if one
    occurs; group: the part that is the secret (the rest is context kept as is); check: a test
    of the captured value; left_boundary: must start after a non-word character or a JSON
    escape; lowered: a lowercase pattern run on the lowercased text (case-insensitive);
    trigger: a lowercase regex the lowercased text must hold for the rule to run, where the
    keywords alone are common English (`gh`, `pass`, `asia`); all triggers together are the
    prefilter."""

    __slots__ = ()



def _entropy(value: str) -> float:
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


# sources, compiled on first use (`_compiled`): most texts never reach a value check, and
# compiling at import was a share of every printed line's and every write's start-up
_PLACEHOLDER = (
    r"^(?:[*xX.•#-]+|<[^>]*>|\{[^}]*\}|\$.*|%.*%|(?i:password|passwd|pass|secret|token|changeme|"
    r"redacted|example|dummy|placeholder|none|null|true|false|undefined|string|your[_-].*|\.\.\.))$"
)
_TIMESTAMP = r"^\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?)?(?:Z|[+-]\d\d:?\d\d)?$"
# identifiers and dotted attribute paths: `token = self.tokenizer`, `key: config.api_key`
_IDENTIFIER = r"^[A-Za-z_][A-Za-z_.]*(?:\(\))?$"


def _secretish(value: str) -> bool:
    """A value that looks like a credential rather than a word, a path or a variable."""
    if "REDACTED" in value or _compiled(_PLACEHOLDER).match(value) or _compiled(_IDENTIFIER).match(value):
        return False
    if value.isdigit() or value[0] in "/~" or value.startswith(("./", "../", "http")):
        return False
    if not any(c.isalpha() for c in value) or _compiled(_TIMESTAMP).match(value):  # dates, versions, addresses
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
    import base64
    import binascii

    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _url_password(value: str) -> bool:
    return "REDACTED" not in value and not _compiled(_PLACEHOLDER).match(value)


def _rule(kind, pattern, keywords, group=0, check=None, lowered=False, trigger="") -> _Rule:
    return _Rule(kind, pattern, tuple(keywords), group, check, lowered=lowered, trigger=trigger)


def _token(kind, pattern, keywords, check=None, trigger="") -> _Rule:
    """A provider token: a literal prefix the regex engine can scan for, a word boundary left.

    The left boundary is checked in code, not by a leading lookbehind: a pattern that starts
    with a lookbehind loses the engine's literal-prefix scan and runs ~30x slower.
    """
    return _Rule(kind, pattern, tuple(keywords), 0, check, left_boundary=True, trigger=trigger)


# For lowercase rules that must also work inside JSON strings, where a line break is the two
# characters `\n`: a left boundary that accepts such an escape, a separator that is one, and
# a value character that stops at one.
_LB = r"(?:(?<![a-z0-9_])|(?<=\\[nrt]))"
_SEP = r"(?:\s|\\[nrt])"
_VAL = r"(?:(?!\\[nrt])\S)"

# The Chinese keywords also as JSON writes them with ensure_ascii (`"\u5bc6\u7801": "..."`, lowered):
# GenericAgent's logs and other programs' JSON carry them that way.
_CJK_KEYWORDS = ("密码", "口令", "密钥")
_CJK_ESCAPED = tuple("".join(f"\\u{ord(c):04x}" for c in word) for word in _CJK_KEYWORDS)
_CJK_ALTERNATIVES = "|".join(_CJK_KEYWORDS + tuple(re.escape(e) for e in _CJK_ESCAPED))

# A sentence that states a password (`the password is x`, `my NAS password was x`, `密码是x`,
# `口令为x`): narrower keywords than an assignment's (`my key is under the mat` is prose), the
# value's check (`_secretish`) keeping words out (`the password is strong`).
_STATED = (
    r"(?:\s{1,4}(?:for|of|to|on)\s{1,4}(?:the\s{1,4}|my\s{1,4}|our\s{1,4})?[\w.@-]{1,40})?"
    r"\s{1,4}(?:is now|is set to|was set to|is changed to|was changed to|is|was)\s{1,4}(?:\\?[\"'])?"
)
_STATED_KEYWORDS = ("password", "passwd", "passphrase", "passcode")
_STATED_CJK = r"\s{0,4}(?:是|为|為|改成了|改成|改为|設為|设为|设成)\s{0,4}"
# A value ends at Chinese punctuation and Chinese text (`密码：Hunter2x9，记得改` keeps 记得改).
_CJK_STOPS = "\u3000-\u303f\u4e00-\u9fff\uff01-\uff0f\uff1a-\uff20"

_KEYWORDS = (
    r"api[_-]?key|apikey|access[_-]?key|auth[_-]?key|secret[_-]?key|client[_-]?secret|secret|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|token|passw(?:or)?d|passphrase|pass|pwd|"
    r"priv(?:ate)?[_-]?key|credentials?|" + _CJK_ALTERNATIVES
)

RULES: tuple[_Rule, ...] = (
    _rule(
        "private-key",
        r"-----begin[a-z0-9 ]{0,40} private key(?: block)?-----"
        r"(?:[\s\S]{0,16384}?-----end[a-z0-9 ]{0,40} private key(?: block)?-----|[a-z0-9+/=\s\\:,.-]{0,16384})",
        ["private key"],
        lowered=True,
    ),
    _token("aws-access-key", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _R, ["akia", "asia", "abia", "acca", "a3t"],
           trigger=r"(?:a3t[a-z0-9]|akia|asia|abia|acca)[a-z0-9]{16}"),
    _rule(
        "aws-secret-key",
        r"aws[\w.-]{0,20}(?:secret|key)[\w.-]{0,20}(?:\\?[\"'])?\s{0,4}(?::=|=>|=|:)\s{0,4}(?:\\?[\"'])?"
        r"([a-z0-9/+]{40})(?![a-z0-9/+=])",
        ["aws"],
        group=1,
        trigger=r"aws[\w.-]{0,20}(?:secret|key)",
        lowered=True,
    ),
    _token("github-token", r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{82,255})" + _R, ["gh", "github_pat_"],
           trigger=r"gh[pousr]_|github_pat_"),
    _token("anthropic-key", r"sk-ant-[a-z]{2,8}\d\d-[A-Za-z0-9_-]{32,200}" + _RD, ["sk-ant-"]),
    _token(
        "openai-key",
        r"sk-(?:(?:proj|svcacct|admin|service)-)?[A-Za-z0-9_-]{8,200}T3BlbkFJ[A-Za-z0-9_-]{8,200}" + _RD,
        ["t3blbkfj"],
    ),
    # OpenAI's project/service-account/admin keys without the T3BlbkFJ marker, and `sk-live-`-style
    # keys of other providers: a known word after `sk-`, then a random tail
    _token(
        "sk-key",
        r"sk-(?:proj|svcacct|admin|service|live|test|prod)-[A-Za-z0-9_-]{16,300}" + _RD,
        ["sk-"],
        trigger=r"sk-(?:proj|svcacct|admin|service|live|test|prod)-",
        check=_random_token,
    ),
    _token("openrouter-key", r"sk-or-v1-[a-f0-9]{64}" + _R, ["sk-or-"]),
    # sk- + 32..64 letters/digits: DeepSeek, Moonshot and other OpenAI-compatible providers
    _token("sk-key", r"sk-[A-Za-z0-9]{32,64}" + _RD, ["sk-"], check=_random_token, trigger=r"sk-[a-z0-9]{32}"),
    _token("stripe-key", r"(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}" + _R, ["_test_", "_live_", "_prod_"],
           trigger=r"[sr]k_(?:test|live|prod)_"),
    _token("google-api-key", r"AIza[A-Za-z0-9_-]{35}" + _RD, ["aiza"]),
    _token("gitlab-token", r"gl(?:pat|ptt|dt|rt|cbt|oas)-[A-Za-z0-9_-]{20,100}" + _RD, ["gl"],
           trigger=r"gl(?:pat|ptt|dt|rt|cbt|oas)-"),
    _token("npm-token", r"npm_[A-Za-z0-9]{36}" + _R, ["npm_"], trigger=r"npm_[a-z0-9]{36}"),
    _token("pypi-token", r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,1000}" + _RD, ["pypi-ag"]),
    _token("huggingface-token", r"(?:hf_|api_org_)[A-Za-z0-9]{34,40}" + _R, ["hf_", "api_org_"], check=_random_token),
    _token("groq-key", r"gsk_[A-Za-z0-9]{52}" + _R, ["gsk_"]),
    _token("slack-token", r"xox[abeoprs]-(?:[0-9]{6,13}-){1,4}[A-Za-z0-9-]{8,100}" + _RD, ["xox"]),
    _token("slack-config-token", r"xoxe(?:\.xox[bp])?-\d-[A-Za-z0-9-]{20,300}" + _RD, ["xoxe"]),
    _token("slack-app-token", r"xapp-\d-[A-Z0-9]{6,20}-\d{6,20}-[A-Za-z0-9]{20,100}" + _R, ["xapp-"]),
    _rule(
        "slack-webhook",
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,200}",
        ["hooks.slack.com"],
    ),
    _token("sendgrid-key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _RD, ["sg."]),
    _token("twilio-key", r"SK[0-9a-f]{32}" + _R, ["sk"], trigger=r"sk[0-9a-f]{32}"),
    _token("digitalocean-token", r"do[opr]_v1_[a-f0-9]{64}" + _R, ["_v1_"]),
    _token("shopify-token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _R, ["shp"], trigger=r"shp(?:at|ca|pa|ss)_"),
    _token("replicate-token", r"r8_[A-Za-z0-9]{37}" + _R, ["r8_"]),
    # not a left-bounded token: Telegram's API URLs glue it to `bot` (`/bot123456789:AA…/getMe`)
    _rule("telegram-bot-token", r"(?<![0-9])\d{8,10}:AA[A-Za-z0-9_-]{33}" + _RD, [":aa"]),
    _token(
        "discord-token",
        r"[MNO][A-Za-z0-9]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}" + _RD,
        ["."],
        check=_random_token,
        trigger=r"[mno][a-z0-9]{23,27}\.[a-z0-9_-]{6}\.",
    ),
    _token("azure-client-secret", r"[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}" + _RD, ["q~"]),
    _rule(
        "azure-storage-key",
        r"accountkey=([a-z0-9+/]{86}==)",
        ["accountkey="],
        group=1,
        lowered=True,
    ),
    _rule(
        "gcp-private-key-id",
        r"\\?\"private_key_id\\?\"\s{0,4}:\s{0,4}\\?\"([a-f0-9]{40})\\?\"",
        ["private_key_id"],
        group=1,
        lowered=True,
    ),
    _rule(
        # ~/.netrc: `machine HOST login USER password SECRET`, on one line or several
        "netrc-password",
        _LB + r"machine" + _SEP + r"{1,10}" + _VAL + r"{1,200}" + _SEP + r"{1,10}(?:login" + _SEP + r"{1,10}"
        + _VAL + r"{1,200}" + _SEP + r"{1,10})?password" + _SEP + r"{1,10}(" + _VAL + r"{1,200})",
        ["machine"],
        group=1,
        trigger=r"machine" + _SEP + r"{1,10}\S{1,200}" + _SEP + r"{1,10}(?:login|password)",
        check=_url_password,
        lowered=True,
    ),
    _rule(
        # ~/.pgpass: `host:port:database:user:password`, one a line
        "pgpass-password",
        r"(?m)(?:^|(?<=\\[nr])|(?<=\"))[a-z0-9.*_-]{1,200}:(?:\d{1,5}|\*):[^:\s\\\"]{1,200}:[^:\s\\\"]{1,200}:"
        r"((?:(?!\\[nrt])[^\s\"]){1,200})(?:$|(?=\\[nr]|\"))",
        [":"],
        group=1,
        trigger=r"(?:^|\n|\\[nr]|\")[a-z0-9.*_-]{1,200}:(?:\d{1,5}|\*):",
        check=_secretish,
        lowered=True,
    ),
    _token("jwt", r"eyJ[A-Za-z0-9_-]{8,4000}\.eyJ[A-Za-z0-9_-]{8,8000}\.[A-Za-z0-9_-]{0,4000}" + _RD, ["eyj"], trigger=r"eyj[a-z0-9_-]{8}"),
    _rule(
        "bearer-token",
        r"\bbearer(?:\s|\\[nrt]){1,4}([a-z0-9._~+/-]{16,4000}=*)",
        ["bearer"],
        group=1,
        trigger=r"bearer(?:\s|\\[nrt])",
        check=_random_token,
        lowered=True,
    ),
    _rule(
        "basic-auth",
        r"\bbasic\s{1,4}([a-z0-9+/]{8,4000}={0,2})(?![a-z0-9+/=])",
        ["basic"],
        group=1,
        trigger=r"basic\s{1,4}[a-z0-9+/]{8}",
        check=_basic_credentials,
        lowered=True,
    ),
    _rule(
        "curl-user",
        _LB + r"curl\b[^\n]{0,400}?\s(?:-u|--user)\s{0,4}[\"']?[^\s\"':]{0,100}:([^\s\"'\\]{1,200})",
        ["curl"],
        group=1,
        trigger=r"curl\b[^\n]{0,400}?\s(?:-u|--user)",
        check=_url_password,
        lowered=True,
    ),
    _rule(
        # scheme://user:PASSWORD@host; matching starts at the literal "://" for speed
        "url-password",
        r"://[^\s/:@\"'<>]{0,100}:([^\s/@\"'<>\\]{1,200})@(?=[A-Za-z0-9\[])",
        ["://"],
        group=1,
        trigger=r"://[^\s/@]{0,100}:[^\s/@]{1,200}@",
        check=_url_password,
    ),
    _rule(
        "password-assignment",
        r"(?P<kw>" + _KEYWORDS + r")(?:\\?[\"'])?\s{0,4}(?::=|=>|=|:|：)\s{0,4}(?:\\?[\"'])?"
        r"([^\s\"'`,;()\[\]{}<>\\" + _CJK_STOPS + r"]{6,200})",
        ["key", "secret", "token", "pass", "pwd", "credential", *_CJK_KEYWORDS, *_CJK_ESCAPED],
        group=2,
        trigger=r"(?:key|secret|token|pass|pwd|passwd|password|phrase|credentials?|" + _CJK_ALTERNATIVES + ")"
        r"(?:\\?[\"'])?\s{0,4}(?::=|=>|=|:|：)",
        check=_secretish,
        lowered=True,
    ),
    _rule(
        "password-stated",
        r"(?:(?:" + "|".join(_STATED_KEYWORDS) + r")" + _STATED + r"|(?:" + "|".join(_CJK_KEYWORDS) + r")" + _STATED_CJK + r")"
        r"([^\s\"'`,;()\[\]{}<>\\" + _CJK_STOPS + r"]{6,200})",
        [*_STATED_KEYWORDS, *_CJK_KEYWORDS],
        group=1,
        check=_secretish,
        lowered=True,
    ),
)


_GENERIC = frozenset({"password-assignment", "password-stated", "custom"})


def _extra_rules(extra_patterns: Sequence[str]) -> list[_Rule]:
    return [_Rule("custom", p, (), 0, None) for p in extra_patterns]


# Patterns compile on first use: compiling all of them costs ~30 ms, more than the search whose
# output they check, and most text only ever needs a few (the keyword test below comes first).
_COMPILED: dict[str, re.Pattern[str]] = {}


def _compiled(source: str) -> re.Pattern[str]:
    pattern = _COMPILED.get(source)
    if pattern is None:
        pattern = _COMPILED[source] = re.compile(source)
    return pattern


# The prefilter, cheapest first, each step a condition a rule's match cannot do without:
# 1. a character of the shape (`sk-…` has a `-`): one memchr-fast `in` each, once per text,
#    picks the rules still possible (a table of them per set of characters present);
# 2. a substring (the rule's keywords, sharper ones below), found with `in`;
# 3. for the two shapes without a keyword, a regex that starts with a literal (fast scan);
# 4. the rule's gate, then its pattern. One regex of all the gates cost ~0.4 µs a character
#    (an alternation tries every branch at every position): a third of an index build.
_PIVOTS = PIVOTS  # memctl.core.secret_gate: the same characters gate a text before this module loads
# kind -> (characters one of which the match holds, substrings one of which it holds)
_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "private-key": ("-", ("private key",)),
    "aws-secret-key": (":=", ("aws",)),
    "github-token": ("_", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    "anthropic-key": ("-", ("sk-ant-",)), "openai-key": ("-", ("t3blbkfj",)), "sk-key": ("-", ("sk-",)),
    "openrouter-key": ("-", ("sk-or-",)), "stripe-key": ("_", ("_test_", "_live_", "_prod_")),
    "gitlab-token": ("-", ("glpat-", "glptt-", "gldt-", "glrt-", "glcbt-", "gloas-")),
    "npm-token": ("_", ("npm_",)), "pypi-token": ("-", ("pypi-ag",)), "huggingface-token": ("_", ("hf_", "api_org_")),
    "groq-key": ("_", ("gsk_",)), "slack-token": ("-", ("xox",)), "slack-config-token": ("-", ("xoxe",)),
    "slack-app-token": ("-", ("xapp-",)), "slack-webhook": (".", ("hooks.slack.com",)), "sendgrid-key": (".", ("sg.",)),
    "digitalocean-token": ("_", ("_v1_",)), "shopify-token": ("_", ("shpat_", "shpca_", "shppa_", "shpss_")),
    "replicate-token": ("_", ("r8_",)), "telegram-bot-token": (":", (":aa",)), "discord-token": (".", (".",)),
    "azure-client-secret": ("~", ("q~",)), "azure-storage-key": ("=", ("accountkey=",)),
    "gcp-private-key-id": ("_", ("private_key_id",)), "pgpass-password": (":", (":",)), "jwt": (".", (".eyj",)),
    "curl-user": ("-", ("curl",)), "url-password": (":", ("://",)), "password-assignment": (":=：", ()),
    "password-stated": ("", ("passw", "passphrase", "passcode", "密码", "口令", "密钥")),
}
_HINTS = {"discord-token": r"\.[a-z0-9_-]{6}\.", "pgpass-password": r":(?:\d{1,5}|\*):"}  # sources
# A gate that starts with a letter class scans every position (the discord trigger: 4.5 ms of a
# 256k-character batch of prose, most of the prefilter). Its match holds a hint at a known
# offset, so it is searched only in the window around each place the hint starts:
# kind -> (the hint's start, zero-width so that overlapping ones are all found; characters of
# the gate's match before that start, at most; after it, at most). The gate has no anchor or
# look-around, so a match inside a window is a match in the text, and every match is in one.
_GATE_NEAR = {"discord-token": (r"\.(?=[a-z0-9_-]{6}\.)", 28, 8)}


def _gate(rule: _Rule) -> str:
    """The regex the lowercased text must hold for the rule to run: its trigger, else its keywords."""
    return rule.trigger or "|".join(re.escape(k) for k in rule.keywords)


def _check(rule: _Rule) -> tuple:
    pivots, needles = _NEEDS.get(rule.kind, ("", ()))
    return rule, pivots, needles or rule.keywords, _HINTS.get(rule.kind), _gate(rule), _GATE_NEAR.get(rule.kind)


def _gate_holds(lowered: str, gate: str, near: tuple | None) -> bool:
    pattern = _compiled(gate)
    if near is None:
        return pattern.search(lowered) is not None
    starts, before, after = near
    return any(pattern.search(lowered, max(0, at - before), at + after) is not None
               for at in map(re.Match.start, _compiled(starts).finditer(lowered)))


_CHECKS = tuple(_check(rule) for rule in RULES)
_CHECKS_BY_PIVOTS: dict[str, tuple] = {}  # filled as texts meet each combination (not all 256 at import)


def _checks_for(present: str) -> tuple:
    """The checks whose pivot characters `present` (the pivots a text holds, in order) allows."""
    found = _CHECKS_BY_PIVOTS.get(present)
    if found is None:
        found = _CHECKS_BY_PIVOTS[present] = tuple(
            check for check in _CHECKS if not check[1] or any(c in present for c in check[1]))
    return found


def _possible_checks(lowered: str, among: tuple | None = None) -> Iterable[tuple]:
    """The checks (in RULES' order) whose rule may match `lowered`; `among`: only those of a
    batch's checks that `batch_checks` left."""
    if among is None:
        checks = _checks_for("".join(c for c in _PIVOTS if c in lowered))
    else:
        checks = (check for check in among if not check[1] or any(c in lowered for c in check[1]))
    for check in checks:
        _, _, needles, hint, gate, near = check
        for needle in needles:
            if needle in lowered:
                break
        else:
            if needles:
                continue
        if (hint is None or _compiled(hint).search(lowered)) and _gate_holds(lowered, gate, near):
            yield check


def batch_checks(texts: Sequence[str]) -> tuple:
    """The checks that may match any of `texts`, found once over them joined by newlines, for
    `find_secrets(..., among=)`: a check that matches one text matches the joined texts too
    (pivots and needles are substrings; gates and hints are regexes without negative
    look-arounds, and a newline bounds a word or a line as the ends of a text do). An index
    batch of session text most often leaves none (bench/RESULTS.md)."""
    return tuple(_possible_checks(_lower_aligned("\n".join(texts))))


def find_secrets(text: str, extra_patterns: Sequence[str] = (), among: tuple | None = None) -> list[SecretFinding]:
    """Every secret in `text`, sorted, overlapping hits merged (the first kind wins)."""
    lowered = _lower_aligned(text)
    hits: list[SecretFinding] = []
    for check in _possible_checks(lowered, among):
        hits.extend(_rule_hits(check[0], text, lowered))
    for rule in _extra_rules(extra_patterns):
        hits.extend(_rule_hits(rule, text, lowered))
    return _merge(hits)


def _lower_aligned(text: str) -> str:
    """`text.lower()` with the same length, so a span in it is a span in `text`."""
    lowered = text.lower()
    if len(lowered) != len(text):  # U+0130 is the one character that lowers to two
        lowered = text.replace("\u0130", "i").lower()
    return lowered


def _left_ok(text: str, start: int) -> bool:
    """A token starts after a non-word character, at the start, or after a JSON escape."""
    if start == 0:
        return True
    before = text[start - 1]
    if not (before.isascii() and (before.isalnum() or before == "_")):
        return True
    return before in "nrt" and start >= 2 and text[start - 2] == "\\"


def _keyword_ok(lowered: str, match: re.Match[str]) -> bool:
    """`pass`/`pwd` only as words of their own: `DB_PASS=` yes, `bypass:` and `compass:` no.

    Checked here rather than by a lookbehind, which would cost the regex its fast scan."""
    keyword = match.group("kw")
    if keyword not in ("pass", "pwd"):
        return True
    start = match.start("kw")
    return start == 0 or not lowered[start - 1].isalpha()


def _rule_hits(rule: _Rule, text: str, lowered: str) -> Iterable[SecretFinding]:
    for match in _compiled(rule.pattern).finditer(lowered if rule.lowered else text):
        start, end = match.span(rule.group)
        if start == end or (rule.left_boundary and not _left_ok(text, start)):
            continue
        if rule.kind == "password-assignment" and not _keyword_ok(lowered, match):
            continue
        value = text[start:end]
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


def redact(text: str, extra_patterns: Sequence[str] = (), among: tuple | None = None) -> str:
    """`text` with every secret replaced by `[REDACTED:<kind>]`; idempotent. `among`: the
    `batch_checks` of a batch that holds `text` (the same result, fewer checks per text)."""
    if among is not None and not among and not extra_patterns:
        return text
    findings = find_secrets(text, extra_patterns, among)
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
