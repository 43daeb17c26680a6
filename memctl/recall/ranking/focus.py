"""The question a query asks, and its asides.

A query of several sentences often carries context before (or after) what it asks — "Fixed the
build yesterday. Anyway, where did we keep the signing key?", "今天天气真好……对了，我真正想问的是：
我上司在哪工作？". Its focus is the last sentence that asks (ends with a question mark); the
terms found only in its other sentences, the asides, count `aside_weight` each ([ranking];
memctl.recall.ranking.ranking.Ranking.term_weights), so that the question, not the talk around it,
decides the ranking. This is verbose-query reduction (Bendersky & Croft 2008; Kumaran &
Carvalho 2009) in its plainest form: by position and punctuation, no model. A query of one
sentence, or one that asks nothing, is left as it is: every term counts alike. So is a query
whose question names fewer than MIN_QUESTION_WORDS things of its own ("I cooked something for
my friend a couple of days ago. What was it?", "I'm going to Denver soon. Any suggestions on
what to do there?"): such a question points back at its context, which says what it asks about.
"""

from __future__ import annotations

import re
from collections import namedtuple

# a sentence ends after 。！？； not followed by a closing quote, after a line break, and after
# . ! ? ; followed by a space ("v1.2", "e.g.," and the "why?" of 'he wrote "why?" on the board',
# the 为什么？ of 他说“为什么？”然后走了 end none)
BOUNDARY = r"(?<=[。！？；])(?![”’」』）)】\"'])|(?<=\n)|(?<=[.!?;])(?=\s)"
_WORDY = re.compile(r"\w")
_CLOSERS = " \t\r\n\"'”’」』)）]】!！"  # what may follow the question mark of an asking sentence
_ASKS = ("?", "？")
_LATIN_WORD = re.compile(r"\w+(?:[-.]\w+)*")  # memctl.recall.indexing.text's word, as the tokenizer reads it
MIN_QUESTION_WORDS = 2


class Focus(namedtuple("Focus", "question asides")):
    """The sentence a query asks, and the text of its other sentences."""

    __slots__ = ()
    question: str
    asides: str


def question_focus(query: str) -> Focus | None:
    """The query's last asking sentence and the rest; None for a query of one sentence, one
    with no question mark (nothing tells its question from its context) or one whose question
    names too little of its own (`names_things`)."""
    if "?" not in query and "？" not in query:
        return None
    # compiled on first need (~0.5 ms, which every search process would pay at import); re caches it
    sentences = [s.strip() for s in re.split(BOUNDARY, query) if _WORDY.search(s)]
    if len(sentences) < 2:
        return None
    asking = [at for at, s in enumerate(sentences) if s.rstrip(_CLOSERS).endswith(_ASKS)]
    if not asking:  # the question mark was inside a sentence (a quoted "?"), not ending one
        return None
    at = asking[-1]
    if not names_things(sentences[at]):
        return None
    return Focus(sentences[at], " ".join(sentences[:at] + sentences[at + 1:]))


def names_things(question: str) -> bool:
    """Whether a question holds MIN_QUESTION_WORDS words that are not stop words (a Chinese
    one: as many characters that are not stop characters, twice over)."""
    from memctl.recall.indexing.text import _CHINESE_STOP_CHARS, CJK_RUN, latin_tokens

    count = 0
    for number, part in enumerate(CJK_RUN.split(question)):
        if number % 2:  # a CJK run: its characters that are not stop characters, two a word
            count += sum(char not in _CHINESE_STOP_CHARS for char in part) / 2
        else:
            count += sum(bool(latin_tokens(word)) for word in _LATIN_WORD.findall(part))
        if count >= MIN_QUESTION_WORDS:
            return True
    return False


def searched_focus(query: str, aside_weight: float) -> Focus | None:
    """question_focus, when the search weighs asides less than the question (aside_weight
    below 1); None when it does not: then the whole query is the question."""
    return question_focus(query) if aside_weight < 1.0 else None


def aside_terms(focus: Focus | None, tokens) -> frozenset[str]:
    """The terms of the asides that the question does not hold; `tokens(text)` -> terms (the
    search's tokenizer, so that the terms are the query's own)."""
    if focus is None:
        return frozenset()
    return frozenset(tokens(focus.asides)) - frozenset(tokens(focus.question))
