"""The tokenizer shared by the index and the query side (design.md §5).

- CJK runs: jieba's search mode, Chinese stop words dropped. Where `rjieba` (jieba-rs: the
  same dictionary and algorithm, ~15x faster, a 0.15 s start against jieba's 1.3 s) is
  installed it cuts the runs, with the same tokens; jieba stays the reference, the fallback,
  and the segmenter of a root with a `custom_dict.txt` (rjieba has no user-dictionary loader,
  and its `add_word` keeps a different dictionary total than jieba's, so the cuts could
  differ). Either is imported only when a text has CJK characters, so English-only work
  never pays its start. At query time the caller may pass a segmenter that cuts CJK runs
  against the index's own vocabulary instead (no jieba at all).
- Latin text: lowercase words, English stop words dropped, a Porter stemmer.
- Identifiers and numbers are kept whole (`bk-02`, `v3`, `sk_live`, `3.11`), and their parts
  are emitted too, so `bk` finds `bk-02` while `bk-02` ranks the exact identifier first.
- `aliases.txt` (`a = b` lines) expands a query with the other side of a matching line.
"""

from __future__ import annotations

import re
from collections import namedtuple
from itertools import chain, filterfalse
from functools import lru_cache
from pathlib import Path

from memctl.core.config import DEFAULTS

TYPE_CHECKING = False  # typing and dataclasses cost ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Callable, Iterable, Iterator, Sequence

    CjkSegmenter = Callable[[str], list[str]]

_CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef"
CJK_RUN = re.compile(f"([{_CJK_CHARS}]+)")
# Latin words only ever run over text with the CJK runs already cut out (a class that
# excludes CJK ranges costs ~30 ms to compile at every start).
_WORD = re.compile(r"\w+(?:[-.]\w+)*")
# the same words in ASCII text, where `\w` is [a-zA-Z0-9_] either way: ~20% faster to match
_ASCII_WORD = re.compile(r"\w+(?:[-.]\w+)*", re.ASCII)
_IDENTIFIER_SPLIT = re.compile(r"[-_.]+")

ENGLISH_STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before
being below between both but by can could did do does doing don down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself just let me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them themselves
then there these they this those through to too under until up very was we were what when where
which while who whom why will with would you your yours yourself yourselves s t d ll m o re ve y
also did does doesn didn isn wasn weren hasn haven hadn won wouldn shouldn couldn mustn
yes ok okay oh hey hi hello yeah really just much many
""".split())

CHINESE_STOP_WORDS = frozenset("""
的 了 是 在 和 与 及 也 就 都 而 又 吗 呢 吧 啊 呀 哦 嗯 么 着 过 得 地 之 其 或 等 被 把 给 对 从 到
为 以 于 这 那 这个 那个 这些 那些 这样 那样 什么 怎么 怎样 怎么样 哪 哪里 哪个 哪些 谁 多少 几 一个 有 没有
不 还 很 太 非常 就是 还是 但是 但 可是 所以 因为 如果 虽然 然后 而且 并且 或者 以及 一些 一下 一样 已经
我 你 他 她 它 我们 你们 他们 她们 它们 自己 咱们 您 啦 嘛 呗 哈 罢了 而已 之后 之前 时候 吗？ 呢？
请问 知道 告诉 一直 曾经 那么 这么 如何 为什么 是不是 有没有 能不能 可以 能 会 要 想 说 问
个 下 最 可 以 对 于 对于 关于 以下 以上 可能 来着 一下 的话 呀 哇 哎 哎呀 嗯嗯 呃 额
""".split())
_CHINESE_STOP_CHARS = frozenset(word for word in CHINESE_STOP_WORDS if len(word) == 1)

# Irregular English forms -> their base, so "What did she find?" meets "she found"
# (regular forms are the stemmer's job).
_IRREGULAR = """
went:go gone:go goes:go ran:run saw:see seen:see took:take taken:take made:make came:come
got:get gotten:get gave:give given:give found:find thought:think told:tell said:say says:say
felt:feel kept:keep left:leave met:meet began:begin begun:begin won:win bought:buy brought:bring
caught:catch taught:teach sold:sell built:build sent:send spent:spend lost:lose paid:pay
held:hold stood:stand understood:understand wrote:write written:write drove:drive driven:drive
rode:ride ridden:ride ate:eat eaten:eat drank:drink drunk:drink sang:sing sung:sing swam:swim
knew:know known:know grew:grow grown:grow threw:throw thrown:throw flew:fly flown:fly drew:draw
drawn:draw chose:choose chosen:choose spoke:speak spoken:speak broke:break broken:break
forgot:forget forgotten:forget fell:fall fallen:fall woke:wake hid:hide hidden:hide led:lead
read:read heard:hear wore:wear worn:wear tore:tear torn:tear slept:sleep felt:feel fought:fight
sought:seek struck:strike hung:hang shot:shoot sat:sit lay:lie laid:lay meant:mean dealt:deal
became:become children:child men:man women:woman people:person mice:mouse feet:foot teeth:tooth
better:good best:good worse:bad worst:bad
"""
IRREGULAR = dict(pair.split(":") for pair in _IRREGULAR.split())

StopWords = frozenset[str]
CJK_CHAR_TERMS = True
# how much a query term counts in an item's score (query_term_weights); words count 1
CJK_CHAR_WEIGHT = DEFAULTS["ranking"]["cjk_char_weight"]


def has_cjk(text: str) -> bool:
    return CJK_RUN.search(text) is not None


# ---------------------------------------------------------------- Porter stemmer (1980)

_VOWELS = frozenset("aeiou")


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in the stem."""
    m, previous_vowel = 0, False
    for i in range(len(stem)):
        consonant = _is_consonant(stem, i)
        if consonant and previous_vowel:
            m += 1
        previous_vowel = not consonant
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    if len(word) < 3:
        return False
    return (_is_consonant(word, len(word) - 3) and not _is_consonant(word, len(word) - 2)
            and _is_consonant(word, len(word) - 1) and word[-1] not in "wxy")


def _replace(word: str, rules: Sequence[tuple[str, str]], min_measure: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if _measure(stem) > min_measure else word
    return word


_STEP2 = (("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
          ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
          ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"),
          ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"),
          ("logi", "log"))
_STEP3 = (("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
          ("ness", ""))
_STEP4 = ("al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
          "ism", "ate", "iti", "ous", "ive", "ize")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Porter stemmer: `verification` and `verified` both become `verifi`."""
    if len(word) <= 2 or not word.isascii() or not word.isalpha():
        return word
    # step 1a
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # step 1b
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif _double_consonant(word) and word[-1] not in "lsz":
                    word = word[:-1]
                elif _measure(word) == 1 and _cvc(word):
                    word += "e"
                break
    # step 1c
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    # step 4
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem_part = word[: -len(suffix)]
            if _measure(stem_part) > 1 and (suffix != "ion" or stem_part.endswith(("s", "t"))):
                word = stem_part
            break
    # step 5
    if word.endswith("e"):
        stem_part = word[:-1]
        m = _measure(stem_part)
        if m > 1 or (m == 1 and not _cvc(stem_part)):
            word = stem_part
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


# ---------------------------------------------------------------- Latin and CJK tokens

@lru_cache(maxsize=200_000)
def latin_tokens(word: str) -> tuple[str, ...]:
    """One lowercase word or identifier -> its index terms (stop words dropped, stems)."""
    word = word.lower().strip("_")
    if not word:
        return ()
    if word.isalpha():
        if word in ENGLISH_STOP_WORDS:
            return ()
        return (stem(IRREGULAR.get(word, word)),)
    parts = [p for p in _IDENTIFIER_SPLIT.split(word) if p]
    out = [word]
    if len(parts) > 1:
        for part in parts:
            if part.isalpha():
                if part not in ENGLISH_STOP_WORDS:
                    out.append(stem(IRREGULAR.get(part, part)))
            else:
                out.append(part)
    return tuple(dict.fromkeys(out))


RUN_CACHE_LIMIT = 50_000  # CJK runs whose terms a tokenizer keeps (chat logs repeat phrases)


class _WordCache(dict):
    """word -> its terms; bounded, because logs hold endless unique ids and hashes."""

    limit = 500_000

    def __missing__(self, word: str) -> tuple[str, ...]:
        if len(self) >= self.limit:
            self.clear()
        terms = self[word] = self.terms(word)
        return terms

    terms = staticmethod(latin_tokens)


_WORD_CACHE = _WordCache()

# ASCII bytes -> the bytes `_ASCII_WORD`'s words are made of (letters lowercased, digits, '_',
# '-', '.'), every other byte a space: the chunks that `split()` gives then hold every word of
# the text and each word whole (Tokenizer.body).
_WORD_BYTES = bytes(c + 32 if 65 <= c <= 90 else c if chr(c).isalnum() and c < 128 or c in b"_-." else 32
                    for c in range(256))


class _ChunkBodyCache(_WordCache):
    """An ASCII chunk (bytes, `_WORD_BYTES`) -> its words' terms joined by spaces (bytes; empty
    for stop words): an index body is these joined, with no word or term list in between.
    Each tokenizer has its own; a chunk it meets for the first time goes into `new` (when not
    None: the surface words collected), so that a build does not put every chunk of its text
    into a set (~0.1 cpu-s of an 8 MB Latin build) to learn the few thousand distinct ones."""

    new: set[bytes] | None = None

    def __missing__(self, chunk: bytes) -> bytes:
        if self.new is not None:
            self.new.add(chunk)
        return super().__missing__(chunk)

    @staticmethod
    def terms(chunk: bytes) -> bytes:
        words = _ASCII_WORD.findall(chunk.decode())
        return " ".join(chain.from_iterable(map(_WORD_CACHE.__getitem__, words))).encode()


class JiebaSegmenter:
    """jieba search mode, loaded on first use, with the root's custom dictionary."""

    def __init__(self, custom_dict: Path | None = None):
        self.custom_dict = custom_dict
        self._tokenizer = None

    def _load(self):
        import logging

        import jieba  # imported here on purpose: only text with CJK pays for it

        jieba.setLogLevel(logging.WARNING)
        tokenizer = jieba.Tokenizer()
        if self.custom_dict is not None and Path(self.custom_dict).is_file():
            tokenizer.load_userdict(str(self.custom_dict))
        return tokenizer

    def __call__(self, run: str) -> list[str]:
        return list(self._cached(run))

    @lru_cache(maxsize=100_000)
    def _cached(self, run: str) -> tuple[str, ...]:
        if self._tokenizer is None:
            self._tokenizer = self._load()
        return tuple(self._tokenizer.cut_for_search(run))


# jieba's own split of a text into blocks it segments (`re_han_default`); any other CJK
# character (extension A, the compatibility ideographs, the supplementary planes) it yields
# one by one, and rjieba's wider class would not: the blocks are cut here, as jieba does.
# Compiled with rjieba's first use: the negated class alone took ~9 ms to compile, paid by
# every search process, which never segments with rjieba.
_JIEBA_HAN = "([\u4e00-\u9fd5]+)"
_OUTSIDE_JIEBA_HAN = "[^\u4e00-\u9fd5]"
_OUTSIDE_JIEBA_HAN_OR_NEWLINE = "[^\u4e00-\u9fd5\n]"


class RJiebaSegmenter:
    """rjieba's search mode, cut into jieba's blocks: the tokens of `JiebaSegmenter` without a
    custom dictionary (tests/test_index_build.py compares them on the MemDaily dev set).
    Uncached: the tokenizer caches whole runs (Tokenizer._cjk_terms)."""

    custom_dict = None

    def __init__(self):
        self._cut = None
        self._blocks = self._outside = self._outside_or_newline = None  # jieba's blocks: compiled at the first cut

    def __call__(self, run: str) -> list[str]:
        if self._cut is None:
            import rjieba

            self._blocks, self._outside, self._outside_or_newline = (
                re.compile(_JIEBA_HAN), re.compile(_OUTSIDE_JIEBA_HAN), re.compile(_OUTSIDE_JIEBA_HAN_OR_NEWLINE))
            self._cut = rjieba.Jieba().cut_for_search
        if self._outside.search(run) is None:
            return self._cut(run)
        out: list[str] = []
        for number, block in enumerate(self._blocks.split(run)):
            out.extend(self._cut(block) if number % 2 else block)
        return out

    def cut_many(self, runs: list[str]) -> list[list[str]]:
        """Each run's words (as `self(run)`), from one call for all of them: the runs joined by
        newlines, which no block of jieba's crosses (each block is segmented on its own). The
        call's own cost was a fifth of segmenting a Chinese build's ~20-character runs."""
        joined = "\n".join(runs)
        if self._cut is None:
            self("\u4e00")
        if self._outside_or_newline.search(joined) is None:
            cut = " ".join(self._cut(joined)).split(" \n ")  # words of jieba's blocks hold no space
            if len(cut) == len(runs):
                return [piece.split(" ") for piece in cut]
        return [self(run) for run in runs]


def rjieba_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("rjieba") is not None


def segmenter_for_root(custom_dict: Path | None = None) -> JiebaSegmenter | RJiebaSegmenter:
    """rjieba where it is installed and no custom dictionary asks for jieba, jieba otherwise."""
    if custom_dict is not None and Path(custom_dict).is_file():
        return JiebaSegmenter(custom_dict)
    return RJiebaSegmenter() if rjieba_installed() else JiebaSegmenter(custom_dict)


class Tokenizer:
    """Text -> index terms; the same object serves documents and queries."""

    def __init__(self, cjk_segmenter: CjkSegmenter, collect_words: bool = False, words: set[str] | None = None):
        self.cjk_segmenter = cjk_segmenter
        self.words: set[str] = words if words is not None else set()
        self.ascii_chunks: set[bytes] = set()  # the words of ASCII texts, as Tokenizer.body cut them
        self._chunk_bodies = _ChunkBodyCache()
        self.collect_words = collect_words  # the index keeps surface words, for typo matching
        self._run_cache: dict[str, tuple[str, ...]] = {}
        self._wordless_gaps: set[str] = set()  # texts between CJK runs that hold no word (Tokenizer._gap_body)

    @property
    def collect_words(self) -> bool:
        return self._chunk_bodies.new is not None

    @collect_words.setter
    def collect_words(self, on: bool) -> None:
        self._chunk_bodies.new = self.ascii_chunks if on else None

    def start_pass(self) -> None:
        """Forget the ASCII chunks cut before: a new pass collects the surface words of every
        chunk it meets (Tokenizer.body records a chunk where it is new to the cache)."""
        self._chunk_bodies.clear()
        self.ascii_chunks.clear()

    @classmethod
    def for_root(cls, custom_dict: Path | None = None) -> "Tokenizer":
        return cls(segmenter_for_root(custom_dict))

    @classmethod
    def reference(cls, custom_dict: Path | None = None) -> "Tokenizer":
        """jieba's tokenizer, whatever is installed: what the faster paths are checked against."""
        return cls(JiebaSegmenter(custom_dict))

    def portable(self) -> bool:
        """Whether a forked process can use this tokenizer: not when its segmenter reads the
        index (the vocabulary's SQLite connection belongs to this process)."""
        return isinstance(self.cjk_segmenter, (RJiebaSegmenter, JiebaSegmenter))

    def tokens(self, text: str) -> list[str]:
        """The terms of `text`: token_groups' terms one after the other, without the groups."""
        if text.isascii():  # the hot path of indexing: C-level loops over a word cache
            return self._word_terms(_ASCII_WORD.findall(text))
        if not has_cjk(text):
            return self._word_terms(_WORD.findall(text))
        out: list[str] = []
        for number, part in enumerate(CJK_RUN.split(text)):
            if number % 2:
                out.extend(self._cjk_terms(part))
            elif words := _WORD.findall(part):  # between two runs, most often punctuation only
                out.extend(self._word_terms(words))
        return out

    def body(self, text: str) -> str:
        """`tokens(text)` joined by spaces: a document's index body. An ASCII text (the bulk of
        a Latin build) is lowercased and cut into chunks of word characters in one C pass over
        its bytes (a word's terms are those of its lowercase form, and in ASCII lowercasing
        keeps the words), and each chunk's terms come from a cache: no regex, no Python loop.
        The CJK runs of a text are segmented together (`_run_bodies`)."""
        if text.isascii():
            return self._ascii_body(text)
        parts = CJK_RUN.split(text)  # as `tokens`: the runs at odd positions, what lies between them at even
        pieces = []
        for gap, run_body in zip(parts[::2], self._run_bodies(parts[1::2])):
            if gap:
                pieces.append(self._gap_body(gap))
            pieces.append(run_body)
        if parts[-1]:
            pieces.append(self._gap_body(parts[-1]))
        return " ".join(filter(None, pieces))

    def _gap_body(self, gap: str) -> str:
        """The body of the text between two CJK runs: most often punctuation, met again and
        again (`_wordless_gaps` remembers those: no words, no terms, nothing to collect)."""
        if gap in self._wordless_gaps:
            return ""
        if gap.isascii():
            body = self._ascii_body(gap)
        else:
            words = _WORD.findall(gap)
            body = " ".join(self._word_terms(words)) if words else ""
        if not body and _WORD.search(gap) is None:
            if len(self._wordless_gaps) >= RUN_CACHE_LIMIT:
                self._wordless_gaps.clear()
            self._wordless_gaps.add(gap)
        return body

    def _run_bodies(self, runs: list[str]) -> list[str]:
        """Each CJK run's terms joined by spaces; the runs not cached are segmented in one call
        where the segmenter can (RJiebaSegmenter.cut_many: a call per text, not per run)."""
        cache = self._run_cache
        known = [cache.get(run) for run in runs]
        if None in known:
            missing = [run for run, terms in zip(runs, known) if terms is None]
            cut_many = getattr(self.cjk_segmenter, "cut_many", None)
            segmented = cut_many(missing) if cut_many is not None else map(self.cjk_segmenter, missing)
            fresh = {run: self._remember_run(run, segments) for run, segments in zip(missing, segmented)}
            known = [fresh[run] if terms is None else terms for run, terms in zip(runs, known)]
        return list(map(" ".join, known))

    def _ascii_body(self, text: str) -> str:
        chunks = text.encode().translate(_WORD_BYTES).split()
        return b" ".join(filter(None, map(self._chunk_bodies.__getitem__, chunks))).decode()

    def take_words(self, given: set) -> set[str]:
        """The surface words collected since the last call (ASCII ones lowercased; of the ASCII
        chunks, those new since `start_pass`), but those in `given` (the words and chunks given
        before: updated)."""
        words, chunks = self.words - given, self.ascii_chunks - given
        given |= words
        given |= chunks
        self.words.clear()
        self.ascii_chunks.clear()
        for chunk in chunks:
            words.update(_ASCII_WORD.findall(chunk.decode()))
        return words

    def token_groups(self, text: str) -> Iterator[tuple[str, list[str]]]:
        """(surface text, its terms) for each CJK run and each Latin word."""
        for number, part in enumerate(CJK_RUN.split(text)):
            if number % 2:  # split() with a group puts the CJK runs at odd positions
                yield part, list(self._cjk_terms(part))
                continue
            for word in _WORD.findall(part):
                if self.collect_words:
                    self.words.add(word)
                yield word, list(_WORD_CACHE[word])

    def _word_terms(self, words: list[str]) -> list[str]:
        if self.collect_words:  # every word, not only those new to the shared word cache: a
            self.words.update(words)  # second build in one process (or a forked worker) needs them too
        return list(chain.from_iterable(map(_WORD_CACHE.__getitem__, words)))

    def _cjk_terms(self, run: str) -> tuple[str, ...]:
        """A CJK run's words (stop words dropped), then its characters that are not words."""
        terms = self._run_cache.get(run)
        if terms is None:
            terms = self._remember_run(run, self.cjk_segmenter(run))
        return terms

    def _remember_run(self, run: str, segments: list[str]) -> tuple[str, ...]:
        """A run's terms from its segments (`_cjk_terms`), cached."""
        # C-level filters: a run holds only CJK characters, so no segment is blank (the
        # whitespace check of a general text is not needed here)
        words = list(filterfalse(CHINESE_STOP_WORDS.__contains__, segments))
        if CJK_CHAR_TERMS:
            chars = dict.fromkeys(run)  # in the run's order, less the words and the stop words
            for word in words:
                chars.pop(word, None)
            for stop_char in _CHINESE_STOP_CHARS.intersection(chars):
                del chars[stop_char]
            words += chars
        if len(self._run_cache) >= RUN_CACHE_LIMIT:
            self._run_cache.clear()
        terms = self._run_cache[run] = tuple(words)
        return terms


def piece_covers(terms: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each Chinese piece of the query (a word inside a longer query word, a character of one)
    -> the longer query words that hold it. With [ranking] piece_backoff a piece counts only in
    an item that lacks all of them (memctl.recall.indexing.scoring.score_bodies): 联系电话 and its pieces
    联系, 电话, 联, 系 … are one word of the question, which would otherwise score four or more
    times over, above a rare word the question also asks for (the number of "那个联系电话是155…的人")."""
    cjk = [t for t in terms if has_cjk(t)]
    covers = {}
    for term in cjk:
        wholes = tuple(other for other in cjk if len(other) > len(term) and term in other)
        if wholes:
            covers[term] = wholes
    return covers


def query_term_weights(terms: Sequence[str], char_weight: float = CJK_CHAR_WEIGHT) -> dict[str, float]:
    """How much each query term counts when an item is scored. A Chinese query's terms overlap:
    search-mode segmentation yields 电话号码 and also 电话 and 号码, and every character is a term
    of its own (CJK_CHAR_TERMS), so a stray character (美 of 美妆, found in the brand 美的) would
    count as much as a word: a single character counts `char_weight` ([ranking] in memctl.toml).
    A word inside a longer query word counts 1, and with [ranking] piece_backoff only in an item
    that lacks the longer word (piece_covers), so it does not count the same word twice; a share
    for it (the retired cjk_part_weight) moved no family beyond noise. Latin terms keep 1."""
    return {term: char_weight if len(term) == 1 and has_cjk(term) else 1.0 for term in terms}


# ---------------------------------------------------------------- aliases

class Alias(namedtuple("Alias", "left right")):
    """Two term sequences a query for either finds both of."""

    __slots__ = ()
    left: tuple[str, ...]
    right: tuple[str, ...]


def parse_aliases(text: str, tokenizer: Tokenizer) -> list[Alias]:
    """`five-factor = trust verification` lines; `#` starts a comment; more `=` make a group."""
    aliases: list[Alias] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" not in line:
            continue
        sides = [tuple(tokenizer.tokens(side)) for side in line.split("=")]
        sides = [s for s in sides if s]
        for i, left in enumerate(sides):
            for right in sides[i + 1:]:
                aliases.append(Alias(left, right))
    return aliases


def _contains(tokens: Sequence[str], wanted: Sequence[str]) -> bool:
    present = set(tokens)
    return all(w in present for w in wanted)


def expand_aliases(tokens: Sequence[str], aliases: Iterable[Alias]) -> list[str]:
    """Query terms plus the other side of every alias whose one side the query holds."""
    extra: list[str] = []
    for alias in aliases:
        if _contains(tokens, alias.left):
            extra.extend(alias.right)
        if _contains(tokens, alias.right):
            extra.extend(alias.left)
    return list(dict.fromkeys([*tokens, *extra]))
