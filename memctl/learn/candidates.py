"""The two shapes the write link passes between its parts: a session's `Message` and the
`Candidate` memory extracted from it. Plain classes with slots (see `longterm.entries.Entry`)."""

from __future__ import annotations

from typing import Any

ROLES = ("user", "assistant", "tool")


class Message:
    """One message of a session as buffered. `id` is the sender's id, else `#<position>`;
    `position` counts the session's messages from 0; `time` is ISO 8601 or ""."""

    __slots__ = ("session", "id", "position", "role", "content", "time", "speaker", "tool_calls")

    def __init__(self, session: str, id: str, position: int, role: str, content: str, time: str = "",
                 speaker: str = "", tool_calls: list[dict[str, Any]] | None = None) -> None:
        self.session, self.id, self.position, self.role = session, id, position, role
        self.content, self.time, self.speaker = content, time, speaker
        self.tool_calls = [] if tool_calls is None else tool_calls

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in Message.__slots__}
        return {key: value for key, value in data.items() if value not in ("", [], None) or key == "content"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Message":
        return cls(str(data.get("session", "")), str(data.get("id", "")), int(data.get("position", 0)),
                   str(data.get("role", "")), str(data.get("content", "")), str(data.get("time", "")),
                   str(data.get("speaker", "")), list(data.get("tool_calls") or []))

    def source(self) -> dict[str, str]:
        """The provenance an entry learned from this message records."""
        return {"session": self.session, "message": self.id}

    def __repr__(self) -> str:
        return f"Message({self.session!r}, {self.id!r}, {self.role!r}, {self.content[:40]!r})"


class Candidate:
    """A memory extracted from messages, before the policy router writes it.

    `text` reads on its own (the speaker's first person rewritten to who said it, relative
    dates made absolute); `topic` is the merge key for merge and aggregate types; `fields`
    holds what a merge may replace field by field (e.g. {"sister's name": "Ana"});
    `corrects`: the message corrects an earlier statement on the same key; `sources`:
    [{"session": ID, "message": MESSAGE_ID}, …]."""

    __slots__ = ("type", "topic", "text", "confidence", "sources", "speaker", "time", "fields", "corrects")

    def __init__(self, type: str, text: str, topic: str = "", confidence: float = 5,
                 sources: list[dict[str, str]] | None = None, speaker: str = "", time: str = "",
                 fields: dict[str, str] | None = None, corrects: bool = False) -> None:
        self.type, self.text, self.topic, self.confidence = type, text, topic, confidence
        self.sources = [] if sources is None else sources
        self.speaker, self.time = speaker, time
        self.fields = {} if fields is None else fields
        self.corrects = corrects

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in Candidate.__slots__}
        return {key: value for key, value in data.items() if value not in ("", [], {}, None, False)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Candidate":
        return cls(str(data["type"]), str(data["text"]), str(data.get("topic", "")),
                   float(data.get("confidence", 5)), list(data.get("sources") or []),
                   str(data.get("speaker", "")), str(data.get("time", "")), dict(data.get("fields") or {}),
                   bool(data.get("corrects", False)))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in Candidate.__slots__)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Candidate({self.type!r}, {self.topic!r}, {self.text!r}, {self.confidence})"
