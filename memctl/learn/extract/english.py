"""What an English sentence says about its speaker, and the sentence in the third person.

`classify` reads one sentence (questions and chit-chat give None) and says what kind of
memory it is: a name, a job, a home, an age, a relative or a thing the speaker has
(profile/entity, with a topic and the field it sets), a like or dislike (preference, topic the
thing), a decision, a lesson, a plan or a happening (event), or another statement the speaker
makes about themself (event, lower confidence). `rewrite` turns "I"/"my"/"we" into the speaker
("I love my dog" said by Caroline: "Caroline loves their dog"), the verb agreeing.
"""

from __future__ import annotations

import re

from memctl.learn.extract.statement import Cues, Statement

_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'll|we'd|us|our|ours)\b",
                           re.IGNORECASE)
_LEAD_FILLER = re.compile(
    r"^(?:(?:wow|whoa|oh|ooh|ah|aw+|yeah|yes|yep|yup|hey|hi|hello|haha+|lol|omg|well|so|um+|uh+|okay|ok|sure|"
    r"thanks|thank you|totally|absolutely|definitely|nice|cool|great|awesome|right|true|exactly|honestly|"
    r"btw|by the way|anyway|also|and|but|plus|haha|hmm+|ya|yea|you know(?: what)?|ya know|guess what|fyi|tbh|"
    r"to be honest|in fact|funny enough|oh man|man|dude|gosh|yay|woo+|phew)\b[\s,!.:;-]*)+", re.IGNORECASE)
# a sentence whose subject is left out, as people write: "Just got some new shoes!" (I just got),
# "Researching adoption agencies" (I'm researching), "Gonna continue my edu" (I'm gonna)
_IMPLIED_PAST = re.compile(r"^(?:just|finally|recently|also|then|already)?\s*(?:[a-z]+ed|went|got|had|made|took|saw|met|"
                           r"ran|won|lost|bought|found|gave|began|did|wrote|read|built|drew|painted|sang|taught|felt|"
                           r"left|came|spent|flew|drove|rode|swam|ate|sold|kept|heard|caught|brought|became|grew|"
                           r"chose|wore|sent|been)\b", re.IGNORECASE)
_IMPLIED_STATE = re.compile(r"^(?:so |really |super |pretty |totally )?(?:excited|stoked|thrilled|psyched|pumped|tired|"
                            r"exhausted|bored|stressed|worried|scared|obsessed|interested|amazed|overwhelmed|swamped|"
                            r"blessed|grateful|thankful|lucky|busy|proud|nervous|determined)\b", re.IGNORECASE)
_IMPLIED_ING = re.compile(r"^(?:just |still |currently |finally |also )?(?!(?:nothing|something|everything|anything|"
                          r"thing|morning|evening|being|king|ring|spring|string|sibling|darling|wedding|building|"
                          r"painting|feeling|meeting|seeing|saying)\b)[a-z]{3,}ing\b|^(?:gonna|going to|planning to|"
                          r"hoping to|about to|off to)\b", re.IGNORECASE)
_IMPLIED_BEEN = re.compile(r"^(?:just |also |really |finally )?been\b", re.IGNORECASE)
# an -ing phrase that is the subject of the clause's verb: "Learning German has been tough", "Parenting
# can be tough" (not "Working on a project that is hard": that verb is the relative clause's)
_GERUND_SUBJECT = re.compile(r"^\w+ing\b(?:(?!\b(?:that|which|who|where|when|because|so|and then)\b)[^,;:.!?–-])*?"
                             r"\b(?:is|was|isn't|wasn't|has|hasn't|had|must|can|can't|could|will|won't|would|should|"
                             r"might|may|makes|made|keeps|helps|gives|feels|felt|seems|means|brings|takes|sounds)\b",
                             re.IGNORECASE)
_QUESTION_START = re.compile(
    r"^(?:what|who|whom|whose|where|when|why|how|which|do|does|did|are|is|was|were|can|could|will|would|"
    r"should|have|has|had|shall|may|might|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|any)\b", re.IGNORECASE)
_REQUEST = re.compile(r"^(?:please|pls|can you|could you|would you|will you|help me|show me|tell me|give me|"
                      r"write|fix|explain|create|generate|implement|refactor|summari[sz]e|translate)\b",
                      re.IGNORECASE)
_HEDGES = re.compile(r"\b(?:maybe|perhaps|probably|might|i think|i guess|i suppose|not sure|kind of|kinda|sort of|"
                     r"possibly|i believe|i feel like|seems|hopefully|i hope)\b", re.IGNORECASE)
_LISTENER = re.compile(r"\b(?:you|your|you're|you've|you'll|you'd|yours|yourself|ya)\b", re.IGNORECASE)
# sentences that are only about the conversation itself: "I agree", "I'm so happy for you", "I can't wait"
_SMALL_TALK = re.compile(
    r"^(?:i|we)(?:'m| am|'re| are)?\s+(?:so |really |totally |very |just |also |too )*"
    r"(?:agree|know|see|understand|bet|hope so|think so|guess so|glad|happy for|proud of|sorry|appreciate|"
    r"can't wait|cannot wait|miss|feel you|hear you|get it|mean it|love that|love it|love this|like that|"
    r"like it|am here|'m here|here for|fine|good|okay|ok|great|doing (?:good|well|great|fine|ok)|"
    r"(?:will|'ll) (?:keep (?:you|ya) posted|talk to you|catch (?:you|ya)|let you know|see you)|"
    r"(?:gotta|have to|must) (?:go|run))\b",
    re.IGNORECASE)
_RELATIONS = (r"sister|brother|mother|mom|mum|father|dad|wife|husband|partner|son|daughter|boss|manager|friend|"
              r"best friend|cousin|aunt|uncle|grandma|grandmother|grandpa|grandfather|girlfriend|boyfriend|"
              r"fiancee?|roommate|neighbou?r|colleague|coworker|co-worker|niece|nephew|kid|child|baby|"
              r"dog|cat|puppy|kitten|pet|horse|bird|parrot|hamster|rabbit|fish|turtle|snake")
_ONE_OF = frozenset("mother mom mum father dad wife husband partner boss manager girlfriend boyfriend fiance "
                    "fiancee".split())
_CAPITALIZED = r"([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)"
_NAME = re.compile(r"\b(?i:my name is|my name's|i'm called|i am called|call me|people call me)\s+" + _CAPITALIZED)
_RELATION_NAME = re.compile(r"\b(?i:my\s+((?:little |older |younger |big |new |best )?(?:" + _RELATIONS + r"))"
                            r"(?:'s name is|'s called| is called| is named| named|,)?)\s+" + _CAPITALIZED)
_HAS_NAMED = re.compile(r"\b(?i:(?:i|we)\s+(?:have|has|got|adopted|own)\s+(?:an?|two|three|\d+)?\s*(?:\w+\s+)?("
                        + _RELATIONS + r")s?\s+(?:named|called))\s+" + _CAPITALIZED)
_JOB_NOUN = (r"(?:[\w-]+(?:er|or|ist|ian|ant|ent|eon|ect|ive|man|woman|person)|nurse|chef|doctor|coach|pilot|"
             r"student|teacher|lawyer|barista|artist|architect|dentist|vet|ceo|cto|founder|intern|clerk|"
             r"scientist|analyst|engineer|designer|developer|programmer|mom|dad|parent)")
_JOB = re.compile(r"\b(?:i work as|i'm working as|i am working as|i'm an?|i am an?|i became an?|i've become an?|"
                  r"i got a job as an?|my job is|i'm employed as|my profession is|i'm a professional)\s+"
                  r"((?:[\w-]+\s+){0,2}?" + _JOB_NOUN + r")\b(?!\s+(?:of|at heart|fan))", re.IGNORECASE)
_WORKPLACE = re.compile(r"\bi (?:work|am working|'m working|intern|volunteer)\s+(?:at|for|in)\s+([\w' &.-]+?)"
                        r"(?=[,.;!]| as | and | now| since| because|$)", re.IGNORECASE)
_PLACE = r"((?:the\s+)?[A-Z][\w'-]*(?:(?:\s+|,\s*)[A-Z][\w'-]*)*)"  # capitalised: "in the moment" is no place
_HOME = re.compile(r"\b(?i:i live|i'm living|i am living|we live|i moved|we moved|i've moved|we've moved|"
                   r"i relocated|i'm based|i am based|my home is|my house is)\s+(?i:in|to|at|near)\s+" + _PLACE)
_ORIGIN = re.compile(r"\b(?i:i'm from|i am from|i come from|i grew up in|i was born in|my hometown is)\s+" + _PLACE)
_AGE = re.compile(r"\b(?:i'm|i am|i just turned|i turned|i'll be|i will be)\s+(\d{1,3})(?:\s+years?\s+old)?\b"
                  r"(?!\s*(?:%|percent|minutes|hours|days|weeks|months|km|miles|dollars))", re.IGNORECASE)
_FAVOURITE = re.compile(r"\bmy (?:all-time |absolute )?fav(?:ou?rite)?\s+([\w\s'-]{2,40}?)\s+(?:is|are|was|has to be)\s+"
                        r"([^,.;!?]{2,60})", re.IGNORECASE)
_LIKE = re.compile(r"\b(?:i|we)(?:\s+|(?='))(?:really |absolutely |just |also |totally |truly |still |kinda |do )*"
                   r"(love|loves|like|likes|enjoy|enjoys|adore|prefer|am into|'m into|(?:am|'m) a (?:big |huge )?fan of|"
                   r"am passionate about|'m passionate about|hate|dislike|detest|can't stand|cannot stand|"
                   r"don't like|do not like|don't enjoy|can't bear|am allergic to|'m allergic to)\s+"
                   r"([^,.;!?]{2,80})", re.IGNORECASE)
_NEGATIVE_LIKES = ("hate", "dislike", "detest", "can't stand", "cannot stand", "don't like", "do not like",
                   "don't enjoy", "can't bear", "am allergic to", "'m allergic to")
_DECISION = re.compile(r"\b(?:i|we)(?:'ve| have)?\s+(?:finally |just )?(?:decided|chose|chosen|settled on|agreed|"
                       r"opted|made the decision|made up (?:my|our) mind)\b|\b(?:let's|we'll|we will|i'll)\s+go with\b|"
                       r"\bthe decision is\b|\bwe're going with\b|\bi'm going with\b|\bdecision:", re.IGNORECASE)
_LESSON = re.compile(r"\b(?:next time|lesson learned|the lesson|i learned|i've learned|we learned|i realized|"
                     r"turns out|it turned out|failed because|broke because|didn't work because|should have|"
                     r"shouldn't have|never again|note to self|from now on|make sure to|always remember to|"
                     r"the fix (?:is|was)|the trick (?:is|was)|the problem was)\b", re.IGNORECASE)
_PLAN = re.compile(r"\b(?:i'm|i am|we're|we are)\s+(?:going to|gonna|planning to|planning on|about to|thinking "
                   r"(?:of|about)|hoping to|looking forward to|off to|getting ready to|scheduled to)\b|"
                   r"\b(?:i|we)(?:'ll| will| plan to| want to| intend to| hope to| aim to| wanna)\b|\bgonna\b|"
                   r"\bmy plan\b|\bour plan\b", re.IGNORECASE)
_PAST = re.compile(r"\b(?:i|we)\s+(?:just |recently |finally |also |even |actually |already |once |then |really )*"
                   r"(?:\w+ed|went|got|had|made|took|saw|met|ran|won|lost|bought|found|gave|began|started|did|"
                   r"wrote|read|built|drew|painted|sang|taught|felt|left|came|tried|visited|joined|spent|"
                   r"flew|drove|rode|swam|ate|drank|sold|kept|told|heard|caught|brought|thought|held|became|"
                   r"grew|fell|broke|chose|wore|threw|sent|was|were)\b|\bi've\b|\bwe've\b|\bi have been\b",
                   re.IGNORECASE)
_CUES = Cues(_DECISION, _LESSON, _PLAN, _PAST)
_CORRECTION = re.compile(r"\bactually\b[^.]*\bnot\b|\bi meant\b|\bi mean,|\bcorrection\b|\bi misspoke\b|"
                         r"\bi was wrong\b|\bto correct myself\b|\bscratch that\b|\bnot\s+[\w' -]{1,40},\s*but\b|"
                         r"\b(?:it's|it is)\s+actually\b|\bsorry,\s+(?:it's|it is|i meant)\b", re.IGNORECASE)
_DETERMINER = re.compile(r"^(?:the|a|an|my|our|some|this|that|these|those|to|all|any|really|so much|"
                         r"very much|a lot|it when|when)\s+", re.IGNORECASE)
_TRAILING = re.compile(r"\s+(?:a lot|so much|very much|too|as well|now|lately|these days|anymore|again)$",
                       re.IGNORECASE)

_NAMED_THING = re.compile(r"(?<![.!?:]\s)(?<![.!?:])\b[A-Z][a-z]+|\d|\"[^\"]{2,}\"")
_INTENSIFIERS = re.compile(r"\b(?:really|super|totally|definitely|absolutely|literally|honestly|truly|kinda|sorta|"
                           r"pretty much|very|so(?= (?:\w+(?:ful|ing|ed|ive|ous|y|ic|al|le)\b))|just)\s+",
                           re.IGNORECASE)
_TAIL_TAGS = re.compile(r"(?:[,\s]+(?:you know|haha+|lol|lmao|hehe+|right|huh|too|as well)|\s*[:;][-']?[()DPp]|"
                        r"\s*<3)+(?=[.!?]*$)", re.IGNORECASE)
_CONTENT_WORD = re.compile(r"[A-Za-z]{3,}|\d")
_CONTENT_STOP = frozenset("""the and but for with that this have has had was were are you your just really
very so too not all can can't will would could should been being they them then than there their what when
also about some much like yeah know think get got its it's i'm i've i'd i'll we're we've our ours mine myself
from into out over then now well way lot lots thing things stuff something everything anything one ones
amazing awesome great good nice cool fun happy glad excited love loved loving proud special inspiring
powerful wonderful fantastic beautiful incredible sweet cute glad thanks thank sure totally""".split())
MIN_CONTENT_WORDS = 3


def is_question(sentence: str) -> bool:
    """A question, or a request to the listener ("Please fix …", "Can you write …"): neither is a
    fact about anyone."""
    stripped = sentence.rstrip()
    if stripped.endswith("?") or _REQUEST.match(stripped):
        return True
    return _QUESTION_START.match(stripped) is not None and not stripped.endswith(".")


def strip_filler(sentence: str) -> str:
    """The sentence without the interjections that open it ("Wow, yeah, I went …" -> "I went …")."""
    return _LEAD_FILLER.sub("", sentence.strip()).strip()


def tighten(sentence: str) -> str:
    """The sentence without the intensifiers and tags that add bytes and no fact ("really so
    happy, haha!" -> "happy.")."""
    sentence = _INTENSIFIERS.sub("", sentence)
    sentence = _TAIL_TAGS.sub("", sentence).strip()
    return re.sub(r"[!.]{2,}|!", ".", sentence) if sentence else sentence


def with_subject(sentence: str) -> str:
    """A sentence that leaves its subject out given its "I" back ("Just got new shoes" -> "I just
    got new shoes", "Researching agencies" -> "I'm researching agencies", "Been busy" -> "I've
    been busy"); others unchanged, among them a sentence whose subject is the -ing phrase
    ("Winning first place is amazing")."""
    if _IMPLIED_STATE.match(sentence) or (_IMPLIED_ING.match(sentence) and not _GERUND_SUBJECT.match(sentence)):
        return "I'm " + sentence[:1].lower() + sentence[1:]
    if _IMPLIED_BEEN.match(sentence):
        return "I've " + sentence[:1].lower() + sentence[1:]
    if _IMPLIED_PAST.match(sentence):
        return "I " + sentence[:1].lower() + sentence[1:]
    return sentence


def classify(sentence: str) -> Statement | None:
    """The kind of memory a (filler-stripped, non-question) sentence holds, or None."""
    if _SMALL_TALK.match(sentence):
        return None
    content = [w for w in _CONTENT_WORD.findall(sentence) if w.lower() not in _CONTENT_STOP]
    hedged = _HEDGES.search(sentence) is not None
    corrects = _CORRECTION.search(sentence) is not None
    if _FIRST_PERSON.search(sentence):
        statement = _profile(sentence) or _preference(sentence)
        if statement is None and len(content) >= MIN_CONTENT_WORDS and not _LISTENER.search(sentence):
            statement = _CUES.kind(sentence)  # not "I'm so stoked that art is helping you": the listener's to say
    elif len(content) >= MIN_CONTENT_WORDS:  # about no one in particular: a decision, a lesson, or
        statement = _CUES.kind(sentence)  # the speaker's words about a named thing
        if statement.type not in ("decision", "lesson"):
            statement = _mention(sentence, content)
    else:
        return None
    if statement is None:
        return None
    confidence = statement.confidence - (2 if hedged else 0)
    return statement._replace(confidence=max(1, confidence), corrects=corrects)


def _profile(sentence: str) -> Statement | None:
    match = _NAME.search(sentence)
    if match:
        return Statement("profile", "name", {"name": match[1]}, 8)
    match = _HAS_NAMED.search(sentence) or _RELATION_NAME.search(sentence)
    if match and match[2].lower() not in ("i", "and"):
        relation = _singular_noun(match[1].lower().strip())
        # one has one mother (keyed by the relation: a correction replaces the name) but many
        # friends (keyed by the person, or the second would supersede the first)
        topic = f"{relation}'s name" if relation.split()[-1] in _ONE_OF else match[2]
        return Statement("entity", topic, {f"{relation}'s name": match[2]}, 7)
    for pattern, topic in ((_ORIGIN, "hometown"), (_HOME, "home city")):
        match = pattern.search(sentence)
        if match:
            return Statement("profile", topic, {topic: match[1].strip(" ,")}, 7)
    match = _AGE.search(sentence)
    if match and 1 <= int(match[1]) <= 120:
        return Statement("profile", "age", {"age": match[1]}, 7)
    match = _JOB.search(sentence)
    if match:
        return Statement("profile", "job", {"job": match[1].lower()}, 7)
    match = _WORKPLACE.search(sentence)
    if match and match[1][:1].isupper():
        return Statement("profile", "workplace", {"workplace": match[1].strip()}, 7)
    return None


def _preference(sentence: str) -> Statement | None:
    match = _FAVOURITE.search(sentence)
    if match:
        topic = f"favorite {match[1].strip().lower()}"
        return Statement("preference", topic, {topic: match[2].strip()}, 7)
    match = _LIKE.search(sentence)
    if not match:
        return None
    thing = _thing(match[2])
    if not thing or _LISTENER.fullmatch(thing) or thing.lower() in ("it", "that", "this", "them"):
        return None
    negative = match[1].lower() in _NEGATIVE_LIKES
    return Statement("preference", thing.lower(), {"dislikes" if negative else "likes": thing}, 7)


def _thing(phrase: str) -> str:
    """The thing a like names: its first few words, without articles or trailing intensifiers."""
    phrase = phrase.strip()
    for _ in range(3):
        phrase = _DETERMINER.sub("", phrase)
    phrase = re.split(r"\s+(?:and|but|because|since|so|when|with|which|that|who|while|if|as)\s+", phrase)[0]
    phrase = _TRAILING.sub("", phrase)
    return " ".join(phrase.split()[:5])


def _mention(sentence: str, content: list[str]) -> Statement | None:
    """A sentence naming something (a name, a title, a number) that is not the listener's business:
    "It's a map of Middle-earth from LOTR", "Cindy wrote it"; or one whose subject is what the
    speaker does ("Fitting into the new team's style of play was a challenge")."""
    if len(content) < 3 or _LISTENER.search(sentence):
        return None
    if not _NAMED_THING.search(sentence, 1) and not _GERUND_SUBJECT.match(sentence):
        return None
    return Statement("event", "", {}, 4, attributed=True)


def _singular_noun(word: str) -> str:
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


# ---------------------------------------------------------------- rewrite to the third person

_MODALS = frozenset("can could will would should shall may might must can't couldn't won't wouldn't shouldn't "
                    "mustn't need used ought".split())
_ADVERBS = frozenset("really also just always usually never still often actually totally definitely recently "
                     "finally sometimes even already rarely seldom truly absolutely honestly kinda mostly only "
                     "generally normally currently".split())
_IRREGULAR_PAST = frozenset("""went got had made took saw met ran won lost bought found gave began started did wrote
read built drew painted sang taught felt left came tried visited joined spent flew drove rode swam ate drank sold
kept told heard caught brought thought held became grew fell broke chose wore threw sent was were said knew paid
put set let hit cut quit""".split())
_SINGULAR = {"am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "don't": "doesn't", "go": "goes",
             "haven't": "hasn't", "'d": "would", "'ll": "will", "are": "are"}
_PLURAL = {"am": "are", "was": "were", "wasn't": "weren't"}
_SPELLED = {"'re": "are", "'ve": "have", "'ll": "will", "'d": "would"}
_FIRST_PERSON_WORD = re.compile(
    r"\b(?:(?P<i>[Ii])(?:(?P<contraction>'m|'ve|'d|'ll)\b|\s+(?P<adverbs>(?:(?:" + "|".join(sorted(_ADVERBS))
    + r")\s+)*)(?P<verb>[A-Za-z']+)\b)|(?P<we>[Ww]e)(?P<we_contraction>'re|'ve|'ll|'d)?\b"
    r"|(?P<word>[Mm]e|[Mm]y|[Mm]ine|[Mm]yself|[Oo]urselves|[Uu]s|[Oo]ur|[Oo]urs)\b)")
# (first mention, later mentions): the name once, then the pronoun, which reads as well and keeps an
# entry short (every "I" a name would grow it by the name's length)
_WORDS = {"me": ("{s}", "them"), "my": ("{p}", "their"), "mine": ("{p}", "theirs"), "myself": ("themself", "themself"),
          "ourselves": ("themselves", "themselves"), "us": ("{s} and others", "them"), "our": ("{p}", "their"),
          "ours": ("{p}", "theirs")}


def rewrite(sentence: str, subject: str, named_before: bool = False) -> str:
    """`sentence` with its first person rewritten: the first mention `subject` ("Caroline", "the
    user"), later ones "they" ("I love my dog" -> "Caroline loves their dog"); every mention
    "they" when the sentence follows one that named the speaker (`named_before`)."""
    possessive = subject + "'" if subject.endswith("s") else subject + "'s"
    named = [True] if named_before else []

    def third_person(match: re.Match) -> str:
        first = not named
        named.append(True)
        if match["i"]:
            return _named_subject(match, subject) if first else _plural_subject(match, "they")
        if match["we"]:
            return _plural_subject(match, f"{subject} and others" if first else "they")
        word = _WORDS[match["word"].lower()][0 if first else 1]
        return word.format(s=subject, p=possessive)

    text = _FIRST_PERSON_WORD.sub(third_person, sentence)
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _named_subject(match: re.Match, subject: str) -> str:
    if match["contraction"]:
        return f"{subject} {_SINGULAR[match['contraction']]}"
    return f"{subject} {match['adverbs']}{_agree(match['verb'])}"


def _plural_subject(match: re.Match, subject: str) -> str:
    contraction = match["contraction"] or match["we_contraction"]
    if contraction and subject == "they":
        return "they're" if contraction == "'m" else f"they{contraction}"
    if contraction:
        return f"{subject} {_SPELLED[contraction]}"
    if match["verb"] is None:
        return subject
    verb = match["verb"]
    return f"{subject} {match['adverbs']}{_PLURAL.get(verb.lower(), verb)}"


def _agree(verb: str) -> str:
    lower = verb.lower()
    if lower in _SINGULAR:
        return _SINGULAR[lower]
    if lower in _MODALS or lower in _IRREGULAR_PAST or lower.endswith("ed") or "'" in lower:
        return verb
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"
