"""The default extractor: rules over each message's sentences, English and Chinese, no model.

A message is bounded (its first `SCAN_CHARS` characters, `MAX_SENTENCES` sentences), cleaned
(lone surrogates and control characters out), and cut into sentences. A sentence that names
a credential or that the redaction rules would change is dropped before anything is made of
it; questions and chit-chat give nothing. The rest go to the language's rules
(`english`/`chinese`), which say what kind of memory the sentence is; the sentence is then
written in the third person and its relative dates made absolute against the message's time.
A user's message gives every kind; an assistant's only its decisions, lessons and corrections
(what it says about the user is the user's to say); a tool's nothing. A message's events are one
entry (what one turn tells reads, and is found, together), closed by the images it describes
("[image: …]" -> "(photo: …)"). A named speaker's merge topics are theirs ("Caroline's home city").
"""

from __future__ import annotations

import re

from memctl.core.secret_gate import may_hold_secret
from memctl.learn.candidates import Candidate, Message
from memctl.learn.extract import chinese, dates, english
from memctl.learn.extract.statement import Statement

SCAN_CHARS = 65536  # a message past this is read no further: extraction stays milliseconds
MAX_SENTENCES = 400
MAX_SENTENCE_CHARS = 600  # a longer "sentence" is a paste (a log, a table), not a statement
MAX_EVENT_CHARS = 2000  # a message's events joined: past this the rest of a long message is left out
ASSISTANT_TYPES = frozenset(("decision", "lesson"))

_SENTENCE_END = re.compile(r"(?<=[.!?]) |(?<=[。！？；])|\n")  # over text whose spaces are runs of one
_SPACES = re.compile(r"\s+")
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_IMAGE = re.compile(r"\[(?:image|photo|picture|img|图片|照片)\s*[:：]\s*([^\]\n]{3,300})\]", re.IGNORECASE)
_PHOTO_OF = re.compile(r"^(?:a |an )?(?:photo|photograph|photography|picture|image|close up|closeup|screenshot)s? of\s+"
                       r"(?:an? |the )?", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(?:a|an|the) (?=\w)", re.IGNORECASE)  # a caption's articles say nothing a search finds
_EVALUATION = re.compile(r"^(?:It|That|This)(?:'s| is| was| has been| feels| felt| sounds| seems)\b")  # an English event's
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
# a sentence naming a credential is not kept even when its value has no shape the rules know
# ("my password is hunter2", 我的密码是…)
_CREDENTIAL = re.compile(r"\b(?:pass(?:word|wd|phrase|code)|pin(?: code| number)?|api[ _-]?key|secret[ _-]?key|"
                         r"access[ _-]?key|private[ _-]?key|token|credentials?|social security|ssn|credit card|"
                         r"card number|cvv|otp|one-time code|recovery code|seed phrase)\b|密码|口令|密钥|私钥|"
                         r"验证码|令牌|身份证号|银行卡号|卡号|安全码", re.IGNORECASE)


class Secrets:
    """Whether a text would hold a secret: the credential words, then the redaction rules
    (always on here, with the root's extra patterns, whatever [redaction] enabled says)."""

    __slots__ = ("extra",)

    def __init__(self, settings) -> None:
        self.extra = tuple(settings.get("redaction", "extra_patterns") or ())

    def found_in(self, text: str) -> bool:
        if _CREDENTIAL.search(text):
            return True
        if not self.extra and not may_hold_secret(text):
            return False
        from memctl.core.redact import find_secrets

        return bool(find_secrets(text, self.extra))


def extract(settings, messages: list[Message]) -> list[Candidate]:
    """The candidates of every message, in message order, each text once."""
    wanted = frozenset(settings.types)
    secrets = Secrets(settings)
    candidates: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for message in messages:
        for candidate in message_candidates(message, wanted, secrets):
            key = (candidate.type, candidate.text)
            if key not in seen:
                seen.add(key)
                candidates.append(candidate)
    return candidates


def readable(message: Message) -> bool:
    """A message whose fields are the strings `Message` promises (a caller may build one by hand)."""
    return all(isinstance(value, str) for value in (message.session, message.id, message.role, message.content,
                                                     message.time, message.speaker))


def message_candidates(message: Message, wanted: frozenset[str], secrets: Secrets) -> list[Candidate]:
    if not readable(message) or message.role not in ("user", "assistant"):
        return []
    said = dates.message_day(message.time)
    content, images = _images(message.content[:SCAN_CHARS])
    shown = [caption for caption in images if not secrets.found_in(caption)]
    shown = shown if "event" in wanted and message.role == "user" else []
    told = [sentence for sentence in sentences(content) if not secrets.found_in(sentence)]
    found = _statements(told, message, said, wanted)
    evaluations = {index for index, candidate in found if _evaluates(candidate)}
    if evaluations and (shown or any(_is_event(c) and i not in evaluations for i, c in found)):
        found = _statements(told, message, said, wanted, evaluations)
    found = [candidate for _index, candidate in found
             if not any(secrets.found_in(value) for value in _texts(candidate))]
    if shown:
        found.append(_shared_images(shown, message))
    return _one_event(found)


def _statements(told: list[str], message: Message, said, wanted: frozenset[str],
                skipped: frozenset[int] | set[int] = frozenset()) -> list[tuple[int, Candidate]]:
    """The candidates of the message's sentences but the skipped ones, with their sentence's index."""
    found = []
    named = False  # an event sentence named the speaker: the next ones of the message say "they"
    for index, sentence in enumerate(told):
        if index in skipped:
            continue
        candidate = _candidate(sentence, message, said, wanted, named)
        if candidate is not None:
            found.append((index, candidate))
            named = named or _is_event(candidate)
    return found


def _is_event(candidate: Candidate) -> bool:
    return candidate.type == "event" and not candidate.corrects


def _evaluates(candidate: Candidate) -> bool:
    """An event that says how something was rather than what happened ("It was tough, but …",
    "That's what keeps them going"): left out of a message that tells something else."""
    return _is_event(candidate) and _EVALUATION.match(candidate.text) is not None


def _images(content: str) -> tuple[str, list[str]]:
    """The content without the images it describes ("[image: a photo of a dog]"), and their
    captions ("a dog")."""
    if "[" not in content:
        return content, []
    captions = [_ARTICLES.sub("", _PHOTO_OF.sub("", " ".join(clean(caption).split())))
                for caption in _IMAGE.findall(content)]
    return _IMAGE.sub(" ", content), [caption for caption in captions if caption][:10]


def _shared_images(captions: list[str], message: Message) -> Candidate:
    """The images the speaker shared, as their descriptions say: what one shows is what one talks
    of ("Caroline's photo: a painting of a sunset"; closing the message's event, "(photo: …)")."""
    shown = "; ".join(captions)
    in_chinese = chinese.has_chinese(shown)
    subject = _subject(message, in_chinese)
    text = f"{subject}分享的图片：{shown}" if in_chinese else f"{_possessive(subject)} photo: {shown}"
    return Candidate("event", text, "", 3.0, [message.source()], message.speaker, message.time,
                     {"kind": "image", "photo": shown})


def _one_event(found: list[Candidate]) -> list[Candidate]:
    """A message's events as one entry: what one turn tells happened reads (and is found) together;
    its images close it, or close the message's other statement when it tells no event ("Melanie
    loves live music. (photo: band playing on stage)": the name once, not again for the photo)."""
    events = [candidate for candidate in found if _is_event(candidate)]
    if len(events) == 1 and events[0].fields.get("kind") == "image" and len(found) > 1:
        return _photo_closing(found, events[0])
    if len(events) < 2:
        return found
    first = events[0]
    fields: dict[str, str] = {}
    for event in reversed(events):
        fields.update(event.fields)
    if fields.get("kind") == "image":
        del fields["kind"]
    texts, size = [], 0
    for text in dict.fromkeys(_joined_text(event) for event in events):  # a sentence said twice, once
        size += len(text) + 1
        if size > MAX_EVENT_CHARS:
            break
        texts.append(text)
    joined = Candidate("event", ("" if chinese.has_chinese(texts[0]) else " ").join(texts), "",
                       max(event.confidence for event in events), first.sources, first.speaker, first.time, fields)
    return [candidate for candidate in found if candidate not in events] + [joined]


def _photo_closing(found: list[Candidate], images: Candidate) -> list[Candidate]:
    """The images closing the message's last statement that corrects nothing."""
    closed = [candidate for candidate in found if candidate is not images and not candidate.corrects]
    if not closed:
        return found
    last = closed[-1]
    text = f"{last.text}{'' if chinese.has_chinese(last.text) else ' '}{_joined_text(images)}"
    joined = Candidate(last.type, text, last.topic, last.confidence, last.sources, last.speaker, last.time,
                       last.fields, last.corrects)
    return [joined if candidate is last else candidate for candidate in found if candidate is not images]


def _joined_text(event: Candidate) -> str:
    if event.fields.get("kind") == "image":
        photo = event.fields["photo"]
        return f"（图片：{photo}）" if chinese.has_chinese(photo) else f"(photo: {photo})"
    return event.text if event.text[-1:] in ".!?。！？" else event.text + "."


def _capitalised(subject: str) -> str:
    return subject[:1].upper() + subject[1:]


def _possessive(subject: str) -> str:
    return subject + "'" if subject.endswith("s") else subject + "'s"


def sentences(content: str) -> list[str]:
    """The message's sentences, bounded and cleaned."""
    text = _CODE_BLOCK.sub("\n", clean(content[:SCAN_CHARS]))  # a pasted program or log states nothing of anyone
    text = _SPACES.sub(_one_space, text)  # no pattern backtracks over a long run
    parts = (part.strip() for part in _SENTENCE_END.split(text, maxsplit=MAX_SENTENCES))
    return [part for part in parts if 2 <= len(part) <= MAX_SENTENCE_CHARS][:MAX_SENTENCES]


def _one_space(run: re.Match) -> str:
    return "\n" if "\n" in run.group() else " "


def clean(text: str) -> str:
    """Lone surrogates and control characters out, curly quotes straight."""
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    return _CONTROL.sub(" ", text).translate(_QUOTES)


def _candidate(sentence: str, message: Message, said, wanted: frozenset[str], named: bool) -> Candidate | None:
    in_chinese = chinese.has_chinese(sentence)
    language = chinese if in_chinese else english
    sentence = chinese.strip_filler(sentence) if in_chinese else english.with_subject(english.strip_filler(sentence))
    if not sentence or language.is_question(sentence):
        return None
    statement = language.classify(sentence)
    if statement is None or statement.type not in wanted:
        return None
    if message.role == "assistant" and statement.type not in ASSISTANT_TYPES and not statement.corrects:
        return None
    subject = _subject(message, in_chinese)
    if not in_chinese and not statement.corrects:
        sentence = english.tighten(sentence)
    if statement.attributed:  # after an event that named the speaker it joins, it needs no name
        written = sentence if named and statement.type == "event" else f"{_capitalised(subject)}: {sentence}"
    else:
        written = language.rewrite(sentence, subject, named and statement.type == "event")
    resolved = dates.resolve(written, said)
    return _built(statement, resolved, message, subject)


def _subject(message: Message, in_chinese: bool) -> str:
    if message.speaker.strip():
        return " ".join(clean(message.speaker).split())[:60]
    if in_chinese:
        return "用户" if message.role == "user" else "助手"
    return "the user" if message.role == "user" else "the assistant"


def _built(statement: Statement, resolved: dates.Resolved, message: Message, subject: str) -> Candidate:
    fields = dict(statement.fields)
    if resolved.day and statement.type == "event":
        fields["date"] = resolved.day
    text = resolved.text.rstrip()
    return Candidate(statement.type, text, _topic(statement, message, subject), float(statement.confidence),
                     [message.source()], message.speaker, message.time, fields, statement.corrects)


def _topic(statement: Statement, message: Message, subject: str) -> str:
    """A named speaker's topic is theirs ("Caroline's home city"): in a conversation of several
    people one's home city must not supersede another's. The user's stays plain ("home city"), and
    so does an entity keyed by its own name ("Ana")."""
    topic = statement.topic
    if not topic or not message.speaker.strip() or topic in statement.fields.values():
        return topic
    return f"{subject}的{topic}" if chinese.has_chinese(topic) else f"{_possessive(subject)} {topic}"


def _texts(candidate: Candidate) -> list[str]:
    return [candidate.text, candidate.topic, *candidate.fields.values()]
