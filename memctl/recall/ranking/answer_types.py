"""The expected answer's type: a question that asks *when*, *how old*, *how many*, *how much*
or for a phone number or an e-mail address wants an item that holds a time, an age, a number, a
price, a measure or a contact, whichever words it shares with the question.

This is the answer typing of question-answering retrieval (a "when" question's answer is a date
expression), kept to the types whose surface is recognisable by a pattern in English and Chinese.
A query's type is found from its interrogative words; the candidates whose text holds an
expression of that type are scaled by `1 + answer_type_weight` ([ranking]). A query that asks
for none of them, or a weight of 0, leaves the ranking as it was.
"""

from __future__ import annotations

import re

from memctl.recall.ranking import tuning
from memctl.recall.ranking.hits import scale_where_text
from memctl.recall.indexing.text import has_cjk  # the search has it loaded (its pattern costs 2 ms to compile)

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.ranking.hits import Hit
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.indexing.store import SQLiteStore

_CN_NUMBER = "[0-9０-９一二两三四五六七八九十百千万几]"
_LATIN_WORD = re.compile(r"[a-z]+")
_CUT = 2_000  # characters of an item read: a long item's expression past them does not count


class Expression:
    """An answer type's surface in a text: any of `words` (lowercase Latin words, a set lookup),
    else `latin` (a pattern over the lowercased text), else `cjk` (only in a text with Chinese).
    Split so, the time type costs ~85 µs per 550-character item, not the ~127 of one alternation
    (measured on bench/search_scale.py's 1 GB memory)."""

    __slots__ = ("name", "words", "sources", "compiled")

    def __init__(self, name: str, words: str = "", latin: str = "", cjk: str = ""):
        self.name = name
        self.words = frozenset(words.split())
        self.sources = (latin, cjk)
        self.compiled = None  # (latin, cjk) patterns, compiled at the first search: not by every process

    def search(self, text: str) -> bool:
        if self.compiled is None:
            self.compiled = tuple(re.compile(source) if source else None for source in self.sources)
        latin, cjk = self.compiled
        lower = text[:_CUT].lower()
        if self.words and not self.words.isdisjoint(_LATIN_WORD.findall(lower)):
            return True
        if latin is not None and latin.search(lower):
            return True
        return cjk is not None and has_cjk(lower) and cjk.search(lower) is not None

    def __repr__(self) -> str:
        return f"Expression({self.name!r})"


_UNITS_OF_TIME = r"(?:days?|nights?|weeks?|months?|years?|summer|winter|spring|autumn|fall|morning|evening)"
# a date, a weekday or month, a year, a clock time, a relative day or period
TIME = Expression(
    "time",
    words="yesterday today tonight tomorrow ago recently lately weekend weekends since monday tuesday wednesday "
          "thursday friday saturday sunday january february march april june july august september october "
          "november december",  # not "may": a word too ("may 3" below)
    latin=r"\b(?:(?:19|20)\d\d\b|may \d|\d{1,2}(?::\d\d)? ?[ap]\.?m\b|\d{1,2}(?:st|nd|rd|th)\b)"
          r"|\b(?:\d+|last|next|this|past|few|couple of|other|a|an|one|two|three|four|five|six|seven|eight|nine|ten"
          rf"|several) (?:\w+ )?{_UNITS_OF_TIME}\b",
    cjk=rf"{_CN_NUMBER}+\s*(?:年|月|日|号|点)|(?:周|星期|礼拜)[一二三四五六日天末]"
        r"|昨天|今天|明天|前天|后天|昨晚|今晚|去年|今年|明年|前年|上周|下周|本周|上个?月|下个?月|这个月"
        r"|早上|上午|中午|下午|傍晚|晚上|凌晨|最近|刚才|刚刚|以前|之前|那天|当天|春节|国庆|元旦|中秋|端午",
)
AGE = Expression("age", words="aged age", latin=r"\b\d+ ?-? ?(?:years? ?-? ?old|yo)\b",
                 cjk=rf"{_CN_NUMBER}+\s*(?:周岁|岁)|年龄|岁数")
NUMBER = Expression("number", words="one two three four five six seven eight nine ten eleven twelve dozen dozens "
                                    "hundred hundreds thousand thousands once twice several both",
                    latin=r"\d", cjk=rf"{_CN_NUMBER}+\s*[个次位名人只件种回遍把台辆本张家所]")
MONEY = Expression("money", words="dollar dollars bucks euro euros usd rmb yuan",
                   latin=r"[$€£¥￥] ?\d|\b\d+(?:[.,]\d+)? ?(?:pounds)\b",
                   cjk=rf"{_CN_NUMBER}+\s*(?:元|块|毛|万|千)|价格|价钱")
MEASURE = Expression("measure", latin=r"\b\d+(?:\.\d+)? ?(?:cm|mm|km|kg|lbs?|m|meters?|metres?|feet|foot|ft"
                                      r"|inch(?:es)?|miles?|pounds|kilos?|grams?)\b",
                     cjk=rf"{_CN_NUMBER}+(?:\.\d+)?\s*(?:厘米|公分|毫米|公里|千米|米|公斤|千克|斤|克)")
PHONE = Expression("phone", latin=r"\+?\d[\d\s-]{6,}\d")
EMAIL = Expression("email", latin=r"[\w.+-]+@[\w-]+\.[\w.]+")

# (what the question asks, the answer's expression); the first that the query asks wins
QUESTIONS: tuple[tuple[str, Expression], ...] = (
    (r"(?i:\bhow\s+old\b|\bwhat\s+age\b)|多大了|多大岁数|几岁|多少岁|年龄多大|年纪多大|岁数", AGE),
    (r"(?i:\bwhen\b|\bwhat\s+(?:time|date|day|year|month)\b|\bwhich\s+(?:day|date|year|month|week)\b"
     r"|\bhow\s+long\b)|什么时候|啥时候|啥时|哪天|哪一天|哪年|哪一年|几月|几号|几点|何时|多久|多长时间", TIME),
    (r"(?i:\bhow\s+much\b[^?]*\b(?:cost|pay|paid|price|spend|spent|worth)\w*|\bwhat\b[^?]*\bcost\b)"
     r"|多少钱|多贵|价格是?多少|价钱是?多少|花了多少", MONEY),
    (r"(?i:\bhow\s+(?:tall|high|far|heavy)\b)|多高|多重|多远|(?:身高|体重|距离)是?多少", MEASURE),
    (r"(?i:\b(?:phone|telephone)\s+number\b)|(?:电话|号码|手机号)[^，。？?]{0,4}(?:多少|什么|啥)", PHONE),
    (r"(?i:\be-?mail\s+address\b)|(?:邮箱|邮件)[^，。？?]{0,4}(?:多少|什么|啥|哪个)", EMAIL),
    (r"(?i:\bhow\s+(?:many|much|often)\b)|几个|多少个|几次|多少次|几位|多少位|多少人|几口人|几只|几件|几种", NUMBER),
)
# a query holding none of these asks for no type: most searches never compile the patterns above
# (~1 ms for the questions', up to ~0.8 ms more for an answer's, in every search process)
_TRIGGERS = ("when", "how", "what", "which", "phone", "mail", "时", "天", "年", "月", "号", "点", "多", "几",
             "岁", "钱", "价", "贵", "高", "重", "远", "话", "码", "邮", "久")
_compiled: list[tuple[re.Pattern, Expression]] = []


def expected_answer(query: str) -> Expression | None:
    """The expression of the answer the query asks for, or None (no recognisable type)."""
    lower = query.lower()
    if not any(trigger in lower for trigger in _TRIGGERS):
        return None
    if not _compiled:
        _compiled.extend((re.compile(asks), answer) for asks, answer in QUESTIONS)
    for asks, answer in _compiled:
        if asks.search(query):
            return answer
    return None


def favour_typed_answers(store: SQLiteStore, candidates: list[Hit], answer: Expression | None,
                         ranking: Ranking) -> None:
    """The best candidates whose text holds an expression of the expected type, scaled by
    1 + answer_type_weight (in place; the others keep their scores)."""
    weight = ranking.answer_type_weight
    if answer is None or weight <= 0 or not candidates:
        return
    scale_where_text(store, candidates, answer.search, 1.0 + weight, tuning.TYPED_ANSWERS_READ)
