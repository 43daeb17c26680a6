"""What a Chinese sentence says about its speaker, and the sentence with 我 made the speaker.

The same kinds as `english`: 我叫… (name), …是我的上司 / 我妹妹叫… (a relative's or
colleague's name), 我是一名… / 我在…工作 (job, workplace), 我住在… / 我来自… (home), 我今年…岁
(age), 我的…是… / 我穿的…是… (a thing the speaker has), 我喜欢 / 讨厌… (preference), 决定
(decision), 教训 / 下次 (lesson), 打算 / 明天… (a plan), and other statements the speaker
makes about themself (event). A sentence without 我 that judges a thing ("绿洲家园这个地方真的太适合
居住了") is the speaker's opinion of it: a preference, at a lower confidence. Regular
expressions only: no segmenter is loaded.
"""

from __future__ import annotations

import re

from memctl.learn.extract.statement import Cues, Statement

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_FIRST_PERSON = re.compile(r"[我咱]")
_END = r"(?=[，。,.！!；;、？?\s]|$)"
_RELATIONS = ("上司|老板|领导|经理|主管|下属|同事|舅妈|婶婶|伯伯|伯父|伯母|姨妈|姨父|姑父|嫂子|姐夫|妹夫|弟媳|岳父|岳母|公公|婆婆|"
              "侄子|侄女|外甥女|外甥|孙子|孙女|师傅|徒弟|队友|班主任|朋友|好朋友|好友|闺蜜|兄弟|哥哥|弟弟|姐姐|妹妹|表哥|表弟|表姐|表妹|堂哥|"
              "堂弟|堂姐|堂妹|爸爸|父亲|妈妈|母亲|老公|丈夫|老婆|妻子|爱人|儿子|女儿|孩子|爷爷|奶奶|外公|外婆|姥姥|"
              "姥爷|叔叔|阿姨|舅舅|姑姑|邻居|室友|同学|老师|导师|学生|男朋友|女朋友|对象|宠物|小狗|小猫|狗|猫|客户|合伙人")
_NAME = re.compile(r"(?:我(?:的名字)?叫|我的名字是|大家(?:都)?叫我|叫我)([\u4e00-\u9fffA-Za-z·]{1,8}?)" + _END)
_ONE_OF = frozenset("上司 老板 领导 爸爸 父亲 妈妈 母亲 老公 丈夫 老婆 妻子 爱人 男朋友 女朋友 对象 爷爷 奶奶 外公 外婆 姥姥 姥爷 "
                    "岳父 岳母 公公 婆婆 导师 班主任".split())
_RELATION_IS = re.compile(r"([\u4e00-\u9fffA-Za-z·]{2,8}?)是我(?:的)?(" + _RELATIONS + r")")
_MY_RELATION = re.compile(r"我(?:的)?(" + _RELATIONS + r")(?:的名字)?(?:是叫|叫做|名叫|叫|是)([\u4e00-\u9fffA-Za-z·]{2,8}?)"
                          + _END)
_JOB = re.compile(r"我(?:现在)?是(?:一名|一个|一位|个|名)?([\u4e00-\u9fffA-Za-z]{1,10}?(?:师|员|生|家|工|手|长|者|官|"
                  r"医生|护士|老师|律师|经理|司机|厨师|作家|主播|博主|画家|歌手|演员|记者|会计|老板|店主|创始人|"
                  r"总监|顾问|农民|警察|军人|教授|研究员|自由职业者))" + _END)
_JOB_PLAIN = re.compile(r"(?:我的(?:工作|职业)是|我从事|我做的是)([^，。,.！!；;]{2,20})")
_WORKPLACE = re.compile(r"我(?:现在)?在([^，。,.！!；;在]{2,20}?)(?:工作|上班|实习|任职|打工|读书|上学)")
_HOME = re.compile(r"(?:我(?:现在)?住在|我家(?:住)?在|我(?:已经)?搬到了?|我们(?:现在)?住在)([^，。,.！!；;]{2,20}?)" + _END
                   + r"|我住的(?:那个|这个)?(小区|地方|房子|公寓|街道|城市)(?:叫|是)([^，。,.！!；;]{2,20}?)" + _END)
_ORIGIN = re.compile(r"(?:我来自|我是([\u4e00-\u9fff]{2,6})人" + _END + r"|我老家(?:是|在)|我出生在|我在([^，。,.！!；;]{2,10}?)长大)"
                     r"([^，。,.！!；;]{0,20}?)" + _END)
_AGE = re.compile(r"我(?:今年|已经|快)?(\d{1,3})岁")
_FAVOURITE = re.compile(r"我最(?:喜欢|爱)的([^，。,.！!；;是]{1,10})(?:是|就是)([^，。,.！!；;]{1,20})")
_LIKE = re.compile(r"我(?:们)?(?:也|还|真的|一直|特别|非常|很|最|超|挺|比较|都|向来|从小就|更|还是|其实|平时|一般)*"
                   r"(不喜欢|不爱|讨厌|受不了|反感|害怕|怕|喜欢|爱吃|爱喝|爱看|爱玩|爱听|热爱|偏爱|偏好|倾向于|迷上了|爱上了|爱)"
                   r"([^，。,.！!；;了]{1,16})")
_ALLERGY = re.compile(r"我(?:们)?(?:也|还|一直|从小就)?对([^，。,.！!；;]{1,10}?)过敏")
_NEGATIVE_LIKES = ("不喜欢", "不爱", "讨厌", "受不了", "反感", "害怕", "怕")
_POSSESSION = re.compile(r"我(?:的|穿的|用的|开的|买的|养的|戴的|喝的|吃的|玩的|骑的|看的|读的|听的|拿的|背的|种的|最近在用的)"
                         r"([\u4e00-\u9fffA-Za-z]{1,8}?)(?:是|叫|为)([^，。,.！!；;]{1,30})")
_DECISION = re.compile(r"决定|定下来|定了|选定|拍板|最终选|最后选|就这么定|我们选了|打算就用")
_LESSON = re.compile(r"教训|下次|下回|以后要|以后别|以后一定|记住|原因是|是因为|失败|搞砸|早知道|应该先|吸取|经验是")
_PLAN = re.compile(r"打算|计划|准备|要去|想去|将要|明天|后天|下周|下个月|约了|安排|预约|报名")
_PAST = re.compile(r"了|过|昨天|前天|上周|上个月|去年")
_CUES = Cues(_DECISION, _LESSON, _PLAN, _PAST)
_CORRECTION = re.compile(r"不是[^，。]{0,20}[，,]?而是|更正|说错了|纠正一下|其实是|我是说|准确地说|搞错了|记错了|"
                         r"其实[^。！!]*[，,]\s*(?:而)?不是")  # 其实我更喜欢…，不是…: "actually …, not …"
_CORRECTED = re.compile(r"不是[^，。,]{0,20}?[，,]?\s*而是")
# what opens a sentence and says nothing: a greeting, an assent, an acknowledgement ("好的，我下午就放进去")
_LEAD_FILLER = re.compile(r"^(?:(?:你好|您好|嗨|哈喽|嘿|哈+|嗯+|哦+|噢|对|对的|是的|好的|好吧|好|行|可以|要的|没错|当然|收到|"
                          r"明白|明白了|了解|知道了|记住了|谢谢|好嘞)[，,！!~～]\s*|(?:另外|对了|顺便说一下|顺便说一句)[，,]?\s*)+")
# a request to the listener, not a fact about anyone ("先帮我列个提纲", "请把报告发给我")
_REQUEST = re.compile(r"^(?:先|再|麻烦你?|请你?|能不能|可不可以|你)?(?:帮我|帮忙|给我|替我|帮着)|^(?:请|麻烦)")
_HEDGES = re.compile(r"可能|也许|大概|好像|应该是|估计|或许|不确定|似乎|说不定")
_QUESTION_END = re.compile(r"(?:[吗呢吧么][。.]?|[？?])$")
_QUESTION_WORDS = re.compile(r"什么|怎么|为什么|谁|哪|几|多少|是否|是不是|有没有|能不能|要不要")
_CHIT_CHAT = re.compile(r"^(?:谢谢|多谢|感谢|你好|您好|哈+|嘿|嗨|好的|好吧|嗯+|哦+|拜拜|再见|晚安|早安|早上好|晚上好|没事|不客气|"
                        r"辛苦了|加油|对的|是的|没错|可以|行|收到|明白了?|了解|666|哈哈)+[!！。.~～]*$")
_OPINION = re.compile(r"不错|很好|真好|太好|挺好|喜欢|适合|推荐|满意|失望|糟糕|完美|舒服|方便|好吃|好用|好看|难吃|难用|"
                      r"太差|很差|一般般|值得|划算|贵|便宜|实用|靠谱|不靠谱")
_OPINION_SUBJECT = re.compile(r"^([^，。,.！!；;]{2,14}?)(?:这个|那个|这家|那家|这款|那款|这双|这里|这地方|真的|真是|真心|"
                              r"确实|实在|特别|非常|太|很|挺|还挺|还是|也|都|的|可)")


def has_chinese(text: str) -> bool:
    return _CJK.search(text) is not None


def strip_filler(sentence: str) -> str:
    """The sentence without the greeting or assent that opens it ("对，我打算…" -> "我打算…")."""
    return _LEAD_FILLER.sub("", sentence.strip()).strip()


def is_question(sentence: str) -> bool:
    """A question, or a request to the listener ("先帮我列个提纲"): neither is a fact about anyone."""
    stripped = sentence.strip()
    if _QUESTION_END.search(stripped) or _REQUEST.match(stripped):
        return True
    return stripped[-1:] not in "。！!." and _QUESTION_WORDS.search(stripped) is not None and len(stripped) < 30


def is_chit_chat(sentence: str) -> bool:
    return _CHIT_CHAT.match(sentence.strip()) is not None or len(_CJK.findall(sentence)) < 4


def classify(sentence: str) -> Statement | None:
    """The kind of memory a (non-question) sentence holds, or None."""
    if is_chit_chat(sentence):
        return None
    hedged = _HEDGES.search(sentence) is not None
    corrects = _CORRECTION.search(sentence) is not None
    sentence = _CORRECTED.sub("是", sentence)  # 不是小红，而是小丽 -> 是小丽: the rules read what is meant
    if _FIRST_PERSON.search(sentence):
        statement = _profile(sentence) or _preference(sentence) or _CUES.kind(sentence)
    else:
        statement = _opinion(sentence)
    if statement is None:
        return None
    return statement._replace(confidence=max(1, statement.confidence - (2 if hedged else 0)), corrects=corrects)


def _profile(sentence: str) -> Statement | None:
    match = _NAME.search(sentence)
    if match:
        return Statement("profile", "名字", {"名字": match[1]}, 8)
    match = _RELATION_IS.search(sentence)
    if match:
        return _relative(match[2], _tail_name(match[1]))
    match = _MY_RELATION.search(sentence)
    if match:
        return _relative(match[1], match[2])
    match = _AGE.search(sentence)
    if match and 1 <= int(match[1]) <= 120:
        return Statement("profile", "年龄", {"年龄": match[1]}, 7)
    match = _HOME.search(sentence)
    if match:
        place = match[1] or match[3]
        return Statement("profile", "住处", {"住处": place}, 7)
    match = _ORIGIN.search(sentence)
    if match and (match[1] or match[2] or match[3]):
        return Statement("profile", "家乡", {"家乡": match[1] or match[2] or match[3]}, 7)
    match = _JOB.search(sentence) or _JOB_PLAIN.search(sentence)
    if match:
        return Statement("profile", "职业", {"职业": match[1]}, 7)
    match = _WORKPLACE.search(sentence)
    if match:
        return Statement("profile", "工作单位", {"工作单位": match[1]}, 7)
    match = _POSSESSION.search(sentence)
    if match:
        return Statement("entity", match[1], {match[1]: match[2]}, 7)
    return None


def _relative(relation: str, name: str) -> Statement:
    """One has one 妈妈 (keyed by the relation, a correction replaces the name) but many 同事 (keyed
    by the person, or the second would supersede the first)."""
    return Statement("entity", relation if relation in _ONE_OF else name, {relation: name}, 7)


def _tail_name(text: str) -> str:
    """The name closing a clause ("昨天见到的张伟" -> "张伟" is beyond rules; keep the last 2–4 chars
    after a particle)."""
    return re.split(r"[的了在和与跟说]", text)[-1] or text


def _preference(sentence: str) -> Statement | None:
    match = _FAVOURITE.search(sentence)
    if match:
        topic = f"最喜欢的{match[1]}"
        return Statement("preference", topic, {topic: match[2]}, 7)
    match = _ALLERGY.search(sentence)
    if match:
        return Statement("preference", match[1], {"过敏": match[1]}, 7)
    match = _LIKE.search(sentence)
    if not match:
        return None
    thing = match[2].strip()
    if len(thing) < 1 or thing in ("你", "它", "这个", "那个", "这", "那"):
        return None
    negative = match[1] in _NEGATIVE_LIKES
    return Statement("preference", thing, {"不喜欢" if negative else "喜欢": thing}, 7)


def _opinion(sentence: str) -> Statement | None:
    if not _OPINION.search(sentence):
        kind = _CUES.kind(sentence)
        return kind._replace(confidence=4) if kind.type in ("decision", "lesson") else None
    match = _OPINION_SUBJECT.match(sentence.strip())
    topic = match[1] if match else ""
    return Statement("preference", topic, {"评价": topic} if topic else {}, 4)


_REWRITES = (("我们", "{s}等人"), ("咱们", "{s}等人"), ("我", "{s}"), ("咱", "{s}"))
# 我们组 is the speaker's group, not "the speaker and others' group"
_OUR_GROUP = re.compile(r"(?:我们|咱们)(?=组|小组|团队|部门|公司|家|班|学校|项目组|科室|单位)")


def rewrite(sentence: str, subject: str, named_before: bool = False) -> str:
    """`sentence` with 我 / 我们 made `subject` ("小王", "用户"); a name is short in Chinese, so
    it stays even after a sentence that named the speaker (`named_before`)."""
    sentence = _OUR_GROUP.sub(f"{subject}所在的", sentence)
    for first_person, replacement in _REWRITES:
        if first_person in sentence:
            sentence = sentence.replace(first_person, replacement.format(s=subject))
    return sentence
