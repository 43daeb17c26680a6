"""A session's compressed summary (`compact`, `dispose`) and its tags: deterministic, no model.

The summary is built from what matters most to what matters least, and every line goes in only
while the whole still fits the budget (tokens, `core.tokens.estimate_tokens`, or bytes): a
header (the session, how many messages, when), what the user first asked, what was learned from
the session (newest first), then the last messages (newest first, shown in order). Tags are
what the session was about: the topics it taught first, then its most frequent distinctive
words.
"""

from __future__ import annotations

import re
from collections import Counter

from memctl.core.tokens import estimate_tokens
from memctl.learn.candidates import Message

ASKED_CHARS = 300
LINE_CHARS = 200
MAX_TAGS = 8
_WORD = re.compile(r"(?<![\w-])[a-z][a-z0-9'-]{2,}[a-z0-9]")  # Latin words (CJK text would need segmenting)
_STOP = frozenset("""
about after again also because been before being could does doing done from have having here just like
make more most much need only other over really should some still such than that their them then there
these they thing think this those through want were what when where which while will with would your
yours yeah okay please thanks thank sure right well let's i'm it's don't that's actually user agent
assistant tool prefer prefers preferred like likes liked want wants wanted plan plans planned need needs
going today tomorrow yesterday
""".split())


def summary_text(session: str, messages: list[Message], learned: list[dict], fits) -> str:
    """The summary as text, every line kept only while `fits(text)` (a budget's test)."""
    lines: list[str] = []
    if not messages:
        return ""
    first, last = messages[0].time[:16].replace("T", " "), messages[-1].time[:16].replace("T", " ")
    when = f", {first} – {last}" if first and last else ""
    _add(lines, [f"Session {session}: {len(messages)} messages{when}"], fits)
    asked = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
    if asked:
        _add(lines, [f"Asked: {_clip(asked, ASKED_CHARS)}"], fits)
    replaced = {item.get("replaces") for item in learned}
    standing = [_learned_line(item) for item in reversed(learned) if item.get("id") not in replaced]
    _add_section(lines, "Learned:", standing, fits)
    tail = [f"- {m.speaker or m.role}: {_clip(m.content, LINE_CHARS)}" for m in messages[-8:] if m.content.strip()]
    _add_section(lines, "Last messages:", list(reversed(tail)), fits, keep_order=False)
    return _joined(lines)


def _learned_line(item: dict) -> str:
    topic = f" ({item['topic']})" if item.get("topic") else ""
    return f"- {item.get('type', '')}{topic}: {_clip(str(item.get('text', '')), LINE_CHARS)}"


def _add_section(lines: list[str], heading: str, items: list[str], fits, keep_order: bool = True) -> None:
    """The heading and as many items as fit, most important first; nothing when none fits.
    `keep_order=False`: the items come newest first and are shown oldest first."""
    chosen: list[str] = []
    for item in items:
        trial = chosen + [item] if keep_order else [item] + chosen
        if not fits(_joined(lines + [heading] + trial)):
            break
        chosen = trial
    if chosen:
        lines += [heading] + chosen


def _add(lines: list[str], more: list[str], fits) -> bool:
    if fits(_joined(lines + more)):
        lines += more
        return True
    return False


def _joined(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


def within_tokens(budget: int):
    return lambda text: estimate_tokens(text) <= budget


def within_bytes(limit: int):
    return lambda text: len(text.encode("utf-8", "surrogatepass")) <= limit


def tags(messages: list[Message], learned: list[dict]) -> list[str]:
    """The topics the session taught, then its most frequent distinctive words (the users' twice)."""
    found: list[str] = []
    for item in learned:
        topic = " ".join(str(item.get("topic", "")).lower().split())
        if topic and topic not in found:
            found.append(topic)
    texts = [m.content for m in messages for _ in range(2 if m.role == "user" else 1)]
    names = {word for m in messages for word in m.speaker.lower().split()}  # who spoke is not what it was about
    words = [w for w in distinctive_words(texts, MAX_TAGS + len(names)) if w not in found and w not in names]
    return (found + words)[:MAX_TAGS]


def distinctive_words(texts: list[str], limit: int = MAX_TAGS) -> list[str]:
    """The words said more than once, most frequent first, common words left out."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(word for word in _WORD.findall(text.lower()) if word not in _STOP)
    return [word for word, count in counts.most_common(limit) if count > 1]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
