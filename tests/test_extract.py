"""The deterministic extractor (memctl.learn.extract): what English and Chinese messages give,
dates made absolute from the message's time, the first person rewritten, corrections, chit-chat,
secrets, and hostile content."""

from __future__ import annotations

import pytest

from memctl.core.config import Settings, init_root, load_settings
from memctl.learn.candidates import Message
from memctl.learn.extract import dates, extract_candidates
from memctl.learn.extract.deterministic import MAX_EVENT_CHARS

SAID = "2023-05-08T13:56:00"  # a Monday
SAID_ZH = "2024-04-03T08:30:00"  # a Wednesday


@pytest.fixture
def settings(tmp_path) -> Settings:
    root = tmp_path / "memory"
    root.mkdir()
    init_root(root)
    return load_settings(root)


def said(settings, content: str, speaker: str = "", role: str = "user", time: str = SAID, id: str = "m1"):
    candidates, notes = extract_candidates(settings, [Message("s1", id, 0, role, content, time, speaker)])
    assert notes == []
    return candidates


def one(settings, content: str, **kwargs):
    found = said(settings, content, **kwargs)
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------- English statements of each kind

def test_name_job_home_are_profile_facts_with_their_topic(settings):
    name = one(settings, "My name is Jordan Lee.")
    assert (name.type, name.topic, name.fields) == ("profile", "name", {"name": "Jordan Lee"})
    job = one(settings, "I work as a software engineer at a bank.")
    assert (job.type, job.topic, job.fields["job"]) == ("profile", "job", "a software engineer")
    home = one(settings, "I live in Berlin.", speaker="Jordan")
    assert (home.type, home.topic, home.fields, home.text) == \
        ("profile", "Jordan's home city", {"home city": "Berlin"}, "Jordan lives in Berlin.")
    age = one(settings, "I'm 34 years old.")
    assert (age.topic, age.fields) == ("age", {"age": "34"})


@pytest.mark.parametrize("content", ["I moved to a new apartment last week.", "I live in the moment these days."])
def test_a_place_is_capitalised(settings, content):
    assert one(settings, content).type == "event"  # not a home city called "a new apartment"


def test_contracted_likes(settings):
    assert one(settings, "I'm a big fan of the Lakers.").fields == {"likes": "Lakers"}
    assert one(settings, "I'm allergic to peanuts.").fields == {"dislikes": "peanuts"}


def test_family_and_possessions_are_entities_keyed_by_relation(settings):
    sister = one(settings, "My sister's name is Ana.", speaker="Caroline")
    assert (sister.type, sister.topic, sister.fields) == ("entity", "Ana", {"sister's name": "Ana"})
    assert sister.text == "Caroline's sister's name is Ana."
    dog = one(settings, "We have a dog named Max.")
    assert (dog.type, dog.topic, dog.fields) == ("entity", "Max", {"dog's name": "Max"})
    boss = one(settings, "My boss is called Dana.")
    assert (boss.topic, boss.fields) == ("boss's name", {"boss's name": "Dana"})


def test_one_has_many_friends_but_one_mother(settings):
    """A relation one has several of is keyed by the person: the second friend supersedes no one."""
    first, second = one(settings, "My friend Tom plays chess."), one(settings, "My friend Ana plays golf.")
    assert (first.topic, second.topic) == ("Tom", "Ana")
    found = said(settings, "陈梦婷是我的同事。孙志宏是我的同事。我妈妈叫李兰。", time=SAID_ZH)
    assert [(c.topic, c.fields) for c in found] == [("陈梦婷", {"同事": "陈梦婷"}), ("孙志宏", {"同事": "孙志宏"}),
                                                    ("妈妈", {"妈妈": "李兰"})]


def test_likes_and_dislikes_are_preferences_keyed_by_the_thing(settings):
    found = said(settings, "I really love hiking in the Alps. I can't stand cilantro.")
    assert [(c.type, c.topic, c.fields) for c in found] == [
        ("preference", "hiking in the alps", {"likes": "hiking in the Alps"}),
        ("preference", "cilantro", {"dislikes": "cilantro"})]
    assert found[0].text == "The user loves hiking in the Alps."
    favourite = one(settings, "My favorite band is Radiohead.")
    assert (favourite.topic, favourite.fields) == ("favorite band", {"favorite band": "Radiohead"})


def test_a_named_speakers_topics_are_theirs(settings):
    """Two people of one conversation each have a home city: neither supersedes the other."""
    ana, ben = one(settings, "I live in Lisbon.", speaker="Ana"), one(settings, "I live in Oslo.", speaker="Ben")
    assert (ana.topic, ben.topic) == ("Ana's home city", "Ben's home city")
    assert one(settings, "我住在上海。", speaker="小王", time=SAID_ZH).topic == "小王的住处"


def test_decisions_and_lessons(settings):
    decision = one(settings, "We decided to use Postgres for the billing service.")
    assert decision.type == "decision"
    assert decision.text == "The user and others decided to use Postgres for the billing service."
    lesson = one(settings, "The deploy failed because the cache was stale; next time clear the cache first.",
                 role="assistant")
    assert lesson.type == "lesson" and "next time clear the cache" in lesson.text


def test_events_carry_provenance_speaker_and_time(settings):
    event = one(settings, "I went to a LGBTQ support group yesterday and it was so powerful.", speaker="Caroline",
                id="D1:3")
    assert event.type == "event"
    assert event.text == "Caroline went to a LGBTQ support group on 7 May 2023 and it was powerful."
    assert event.sources == [{"session": "s1", "message": "D1:3"}]
    assert (event.speaker, event.time, event.fields["date"]) == ("Caroline", SAID, "2023-05-07")


def test_a_messages_events_are_one_entry(settings):
    event = one(settings, "I painted a lake sunrise last year. I sold it at a fair in Austin.", speaker="Mel")
    assert event.text == "Mel painted a lake sunrise in 2022. They sold it at a fair in Austin."


def test_a_sentence_saying_how_it_was_is_left_out_beside_what_happened(settings):
    event = one(settings, "It's been tough, but I'm finding comfort in the good memories. I joined a grief support "
                          "group last week.", speaker="Mel")
    assert event.text == "Mel joined a grief support group in the week of 1 May 2023."  # named in what is kept
    alone = one(settings, "It was so much fun and reminded me how music brings us together.", speaker="Mel")
    assert alone.text.startswith("It was so much fun")  # all the message tells: kept


def test_shared_images_close_the_message_without_their_articles(settings):
    liked = one(settings, "Check it out! I love live music. [image: a photo of a band playing on a stage in a park]",
                speaker="Mel")
    assert (liked.type, liked.text) == ("preference", "Mel loves live music. (photo: band playing on stage in park)")
    shown = one(settings, "Look at this! [image: a photo of a dog catching a frisbee]", speaker="Mel")
    assert shown.text == "Mel's photo: dog catching frisbee"


@pytest.mark.parametrize("content, written", [
    ("Winning first place was amazing for the whole team.", "Mel: Winning first place was amazing for the whole team."),
    ("Dancing is like second nature to me.", "Dancing is like second nature to Mel."),
    ("Researching adoption agencies this week.", "Mel is researching adoption agencies in the week of 8 May 2023."),
    ("Been practicing dance routines lately.", "Mel has been practicing dance routines lately."),
])
def test_an_ing_phrase_that_is_the_subject_is_not_the_speaker_doing_it(settings, content, written):
    assert one(settings, content, speaker="Mel").text == written


def test_hedged_statements_have_lower_confidence(settings):
    plain = one(settings, "I moved to Denver.")
    hedged = one(settings, "I think I moved to Denver.")
    assert hedged.confidence < plain.confidence


def test_an_assistant_gives_only_decisions_lessons_and_corrections(settings):
    assert said(settings, "I recommend trying the pasta at Luigi's in Rome.", role="assistant") == []
    assert said(settings, "I went to the museum in Paris on Friday.", role="tool") == []
    assert one(settings, "We decided to ship the fix on Monday.", role="assistant").type == "decision"


def test_types_the_memory_does_not_configure_are_not_extracted(settings):
    values = dict(settings.values)
    values["types"] = {name: spec for name, spec in settings.types.items() if name != "preference"}
    narrowed = Settings(settings.layout, values, settings.origins)
    assert said(narrowed, "I love hiking in the Alps.") == []


# ---------------------------------------------------------------- Chinese

def test_chinese_statements_of_each_kind(settings):
    found = said(settings, "我叫王小明。我是一名程序员。我住在上海。赵雅琳是我的上司。我最喜欢的水果是芒果。我讨厌香菜。"
                           "我穿的运动鞋是亚瑟士Gel-Kayano26。我们决定用PostgreSQL。", time=SAID_ZH)
    kinds = [(c.type, c.topic, c.fields) for c in found]
    assert kinds == [
        ("profile", "名字", {"名字": "王小明"}), ("profile", "职业", {"职业": "程序员"}),
        ("profile", "住处", {"住处": "上海"}), ("entity", "上司", {"上司": "赵雅琳"}),
        ("preference", "最喜欢的水果", {"最喜欢的水果": "芒果"}), ("preference", "香菜", {"不喜欢": "香菜"}),
        ("entity", "运动鞋", {"运动鞋": "亚瑟士Gel-Kayano26"}), ("decision", "", {})]
    assert found[2].text == "用户住在上海。"
    assert found[-1].text == "用户等人决定用PostgreSQL。"


def test_chinese_first_person_becomes_the_speaker(settings):
    lesson = one(settings, "这次部署失败是因为缓存没清，下次我要先清缓存。", speaker="小王", time=SAID_ZH)
    assert lesson.type == "lesson" and lesson.text == "这次部署失败是因为缓存没清，下次小王要先清缓存。"


def test_chinese_opinion_without_first_person_is_a_lower_confidence_preference(settings):
    opinion = one(settings, "绿洲家园这个地方真的太适合居住了，绿化做得特别好。", time=SAID_ZH)
    assert (opinion.type, opinion.topic) == ("preference", "绿洲家园") and opinion.confidence < 5


def test_chinese_preference_said_with_more_and_an_allergy(settings):
    prefers = one(settings, "我更喜欢每天晚上用邮件发一份详细的汇总。", speaker="王磊", time=SAID_ZH)
    assert (prefers.type, prefers.fields) == ("preference", {"喜欢": "每天晚上用邮件发一份详细的汇总"})
    allergy = one(settings, "另外我对花生过敏，评审会如果订午饭要注意。", speaker="王磊", time=SAID_ZH)
    assert (allergy.type, allergy.fields) == ("preference", {"过敏": "花生"})
    assert allergy.text == "王磊对花生过敏，评审会如果订午饭要注意。"  # the opening 另外 says nothing


def test_chinese_greetings_and_assents_opening_a_sentence_are_left_out(settings):
    assert one(settings, "对，我打算下周五在技术评审会上讲方案。", time=SAID_ZH).text == "用户打算2024年4月12日在技术评审会上讲方案。"
    assert one(settings, "好的，我下午就放进去。", time=SAID_ZH).text.startswith("用户")
    # the assistant's "记住了" acknowledges; it is no lesson
    assert said(settings, "记住了，订餐时会避开花生。", role="assistant", time=SAID_ZH) == []


def test_our_group_is_the_speakers_group(settings):
    event = one(settings, "我们组在把订单系统拆成微服务。", speaker="王磊", time=SAID_ZH)
    assert event.text == "王磊所在的组在把订单系统拆成微服务。"


# ---------------------------------------------------------------- dates relative to the message

@pytest.mark.parametrize("phrase, written, day", [
    ("yesterday", "on 7 May 2023", "2023-05-07"),
    ("the day before yesterday", "on 6 May 2023", "2023-05-06"),
    ("last Friday", "on 5 May 2023", "2023-05-05"),
    ("3 days ago", "on 5 May 2023", "2023-05-05"),
    ("last week", "in the week of 1 May 2023", "2023-05-01"),
    ("last month", "in April 2023", "2023-04-01"),
    ("last year", "in 2022", "2022-01-01"),
])
def test_past_dates_resolved_against_the_message_time(settings, phrase, written, day):
    event = one(settings, f"I visited my aunt in Ohio {phrase}.", speaker="Jo")
    assert event.text == f"Jo visited their aunt in Ohio {written}."
    assert event.fields["date"] == day


def test_plans_resolve_forward(settings):
    plan = one(settings, "I'm going to visit my aunt in Ohio next Friday.", speaker="Jo")
    assert plan.text == "Jo is going to visit their aunt in Ohio on 12 May 2023."
    assert plan.fields == {"kind": "plan", "date": "2023-05-12"}
    assert dates.resolve("we fly out tomorrow", dates.message_day(SAID)).day == "2023-05-09"
    opening = one(settings, "Next Friday I'm going to present the plan to the board.", speaker="Jo")
    assert opening.text == "On 12 May 2023 Jo is going to present the plan to the board."


@pytest.mark.parametrize("phrase, written", [
    ("上周五", "2024年3月29日"), ("明天", "2024年4月4日"), ("3天前", "2024年3月31日"), ("昨天", "2024年4月2日"),
    ("下周二", "2024年4月9日"), ("上个月", "2024年3月"), ("去年", "2023年"),
])
def test_chinese_relative_dates(settings, phrase, written):
    event = one(settings, f"我{phrase}去了医院看牙。", time=SAID_ZH)
    assert event.text == f"用户{written}去了医院看牙。"


def test_the_days_a_message_time_may_be_written_in():
    assert str(dates.message_day("1:56 pm on 8 May, 2023")) == "2023-05-08"
    assert str(dates.message_day("2024年04月01日 周一 08:30")) == "2024-04-01"
    assert dates.message_day("") is None and dates.message_day("soon") is None
    assert dates.resolve("I went yesterday", None).text == "I went yesterday"  # no day to count from


# ---------------------------------------------------------------- rewrite, corrections, chit-chat

def test_first_person_rewritten_to_who_said_it(settings):
    assert one(settings, "I adopted my cat from a shelter in Leeds.", speaker="Sam").text == \
        "Sam adopted their cat from a shelter in Leeds."
    assert one(settings, "I adopted my cat from a shelter in Leeds.").text == \
        "The user adopted their cat from a shelter in Leeds."
    assert one(settings, "We moved to Oslo last year.", role="user").text == "The user and others moved to Oslo in 2022."


def test_corrections_set_corrects_and_fields(settings):
    sister = one(settings, "Actually, my sister's name is Maria, not Ana.")
    assert sister.corrects and sister.fields == {"sister's name": "Maria"}
    home = one(settings, "Sorry, I meant I live in Lyon.")
    assert home.corrects and home.fields == {"home city": "Lyon"}
    chinese = one(settings, "我妹妹不是叫小红，而是叫小丽。", time=SAID_ZH)
    assert chinese.corrects and chinese.fields == {"妹妹": "小丽"}
    assert one(settings, "更正一下，我住在杭州。", time=SAID_ZH).corrects
    instead = one(settings, "其实我更喜欢每天早上用钉钉发一条简短的汇总，不是晚上的邮件。", time=SAID_ZH)
    assert instead.corrects and instead.type == "preference"


@pytest.mark.parametrize("content", [
    "lol", "thanks!", "Thank you so much!", "Hey Mel! Good to see you!", "How have you been?",
    "What's up with you? Anything new?", "I agree.", "I'm so happy for you!", "Haha, I know, right?",
    "Talk to you soon!", "I'll keep you posted.", "谢谢！", "哈哈哈", "你好吗？", "好的", "你最近怎么样？",
])
def test_chit_chat_and_questions_give_nothing(settings, content):
    assert said(settings, content, time=SAID_ZH) == []


def test_requests_and_pasted_code_give_nothing(settings):
    assert said(settings, "Please fix the failing test in tests/test_api.py; it fails with KeyError: 'user_id'.") == []
    assert said(settings, "Write a Python function that reverses a string.") == []
    assert said(settings, "要的，先帮我列个提纲。", time=SAID_ZH) == []
    assert said(settings, "请把评审材料发给我。", time=SAID_ZH) == []
    assert said(settings, "```\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n```") == []


# ---------------------------------------------------------------- secrets

@pytest.mark.parametrize("content, secret", [
    ("My password is hunter2 and I use it everywhere.", "hunter2"),
    ("I set my API key to sk-abcdef1234567890abcdef1234567890 yesterday.", "sk-abcdef1234567890abcdef1234567890"),
    ("I pushed with token ghp_abcdefghijklmnopqrstuvwxyz0123456789 last week.", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    ("I love my new laptop. My pin is 4821.", "4821"),
    ("我的密码是abc123456，我一直用它。", "abc123456"),
])
def test_no_candidate_holds_a_secret(settings, content, secret):
    for candidate in said(settings, content, time=SAID_ZH):
        assert secret not in repr(candidate.to_dict())


def test_secrets_are_dropped_even_with_redaction_disabled(settings):
    values = dict(settings.values)
    values["redaction"] = {**settings.values["redaction"], "enabled": False}
    unredacted = Settings(settings.layout, values, settings.origins)
    found = said(unredacted, "I deployed with AKIAIOSFODNN7EXAMPLE as the access key id on Friday.")
    assert all("AKIAIOSFODNN7EXAMPLE" not in repr(c.to_dict()) for c in found)


def test_the_rest_of_a_message_with_a_secret_is_kept(settings):
    found = said(settings, "I moved to Porto last month. My password is hunter2.", speaker="Ines")
    assert [c.text for c in found] == ["Ines moved to Porto in April 2023."]


# ---------------------------------------------------------------- hostile content

def test_huge_binary_and_invalid_content_is_bounded_and_raises_nothing(settings):
    huge = "I went hiking in the Alps with my brother yesterday. " * 200_000  # ~10 MB
    found = said(settings, huge, speaker="Al")
    assert found and all(len(c.text) <= MAX_EVENT_CHARS for c in found)
    assert found[0].text.count("went hiking") == 2  # named once, then "They": a sentence said again is kept once
    binary = bytes(range(256)).decode("latin-1") * 1000 + "\x00\ud800 I moved to Kyoto last year.\udfff"
    for content in (binary, "\ud800\udc00\udfff" * 1000, "\x00" * 100_000, "。" * 100_000, "I " * 100_000):
        for candidate in said(settings, content):
            candidate.text.encode("utf-8")  # no lone surrogate survives
    assert said(settings, "[image: " + "a" * 100_000) == []


def test_wrong_types_give_nothing(settings):
    candidates, notes = extract_candidates(settings, [
        Message("s", "m", 0, "user", None),  # type: ignore[arg-type]
        Message("s", "n", 1, "robot", "I moved to Kyoto last year."),
        Message("s", "o", 2, "user", "I moved to Kyoto last year.", speaker=["Al"]),  # type: ignore[arg-type]
        Message("s", "p", 3, "user", "I moved to Kyoto last year.", time=20230508)])  # type: ignore[arg-type]
    assert (candidates, notes) == ([], [])
    assert extract_candidates(settings, []) == ([], [])


def test_a_speaker_name_is_cleaned_and_bounded(settings):
    event = one(settings, "I moved to Kyoto last year.", speaker="Al\x00\n" + "x" * 500)
    assert "\x00" not in event.text and "\n" not in event.text and len(event.text) < 120
