"""The JSON schema of each operation's arguments: what MCP's tools/list and the OpenAPI
description publish, and what every call is checked against before it runs (one-line errors
naming the field, never a traceback)."""

from __future__ import annotations

from memctl.core.errors import UsageError

MAX_TEXT = 65536  # characters of a fact, a query or a reason
LAYERS = ["L2", "L3", "L4", "L5", "L6"]

_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT}
_NAMESPACE = {"type": "string", "maxLength": 64,
              "description": "Namespace (a key bound to one may omit it; an unbound key may pick one)."}
_SESSION = {"type": "string", "minLength": 1, "maxLength": 256, "description": "The session's id."}
_REF = {"type": "string", "minLength": 1, "maxLength": 512,
        "description": "A ref from search (L5:ID, L6:ID, L2:SECTION, L3:path, L4:session#hN) or an entry id."}


def _object(properties: dict, required: list[str], description: str) -> dict:
    return {"type": "object", "description": description, "properties": properties, "required": required,
            "additionalProperties": False}


OPERATION_SCHEMAS: dict[str, dict] = {
    "remember": _object({
        "text": {**_TEXT, "description": "The fact, in any language."},
        "type": {"type": "string", "maxLength": 64,
                 "description": "Entry type (profile, preference, entity, event, case, lesson, decision, …); "
                                "default event. Merge types (preference, profile, …) need a topic."},
        "topic": {"type": "string", "maxLength": 256, "description": "What it is about; a merge type keeps one "
                                                                     "entry per (type, topic)."},
        "confidence": {"type": "number", "minimum": 0, "maximum": 10},
        "namespace": _NAMESPACE,
    }, ["text"], "Write one fact to long-term memory (L5) under its type's policy; returns its id."),
    "search": _object({
        "query": {**_TEXT, "description": "Words to look for (Chinese, English or both)."},
        "k": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Number of hits (default 5)."},
        "layers": {"type": "array", "items": {"type": "string", "enum": LAYERS}, "maxItems": 5,
                   "description": "Layers to search (default L2-L5; L6, the forgotten, only when asked)."},
        "namespace": _NAMESPACE,
    }, ["query"], "Ranked search over the memory's layers; each hit has a ref for `get`."),
    "get": _object({"ref": _REF}, ["ref"], "The whole item a ref names (an entry as JSON, a section, a file, "
                                           "a session)."),
    "compose": _object({
        "query": {**_TEXT, "description": "What the next turn is about."},
        "budget": {"type": "integer", "minimum": 1, "maximum": 100000,
                   "description": "Token budget of the block (default [compose] budget)."},
        "namespace": _NAMESPACE,
    }, ["query"], "The recalled-memory block to inject before a turn, cut to a token budget."),
    "recent": _object({"n": {"type": "integer", "minimum": 0, "maximum": 50, "description": "How many sessions."}},
                      [], "The last archived sessions, newest first."),
    "forget": _object({"ref": _REF, "reason": {"type": "string", "maxLength": 1024}}, ["ref"],
                      "Soft-forget an entry: it leaves L5 for L6 and `restore` brings it back."),
    "restore": _object({"ref": _REF}, ["ref"], "Put a forgotten entry back in L5."),
    "turn": _object({
        "session": _SESSION,
        "messages": {"type": "array", "maxItems": 1000, "items": {"type": "object"},
                     "description": "The new messages: {id, role (user|assistant|…), content, time, speaker}."},
    }, ["session", "messages"], "Hand memctl a session's new messages after a turn; they are kept durably "
                                "(a retried message once) and turned into memories at a threshold."),
    "compact": _object({"session": _SESSION, "budget": {"type": "integer", "minimum": 1, "maximum": 100000,
                                                        "description": "Token budget of the summary."}},
                       ["session"], "Learn what the session holds so far; its summary within a budget."),
    "dispose": _object({"session": _SESSION}, ["session"],
                       "End a session: learn the rest, keep its summary in L2 short-term, close it."),
    "audit": _object({"n": {"type": "integer", "minimum": 1, "maximum": 1000,
                            "description": "How many of the last records (default 50)."},
                      "key": {"type": "string", "maxLength": 64, "description": "Only this key's writes."}},
                     [], "The last writes of the audit log, newest last: when, which key, what, which ids "
                         "(an admin key's only)."),
    "keys": _object({}, [], "The server's keys: name, scope, namespace, when made, when revoked; never a key "
                            "or its digest (an admin key's only)."),
}

_TYPES = {"string": str, "integer": int, "number": (int, float), "array": list, "object": dict}


def check_arguments(name: str, arguments) -> dict:
    """`arguments` as the schema of operation `name` wants them; UsageError naming the field."""
    schema = OPERATION_SCHEMAS[name]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise UsageError(f"{name}: the arguments must be a JSON object")
    for field in schema["required"]:
        if field not in arguments:
            raise UsageError(f"{name}: {field!r} is required")
    for field, value in arguments.items():
        spec = schema["properties"].get(field)
        if spec is None:
            raise UsageError(f"{name}: unknown argument {field!r}; it takes {', '.join(schema['properties'])}")
        _check(f"{name}: {field!r}", spec, value)
    return arguments


def _check(where: str, spec: dict, value) -> None:
    kind = spec["type"]
    if isinstance(value, bool) or not isinstance(value, _TYPES[kind]):
        raise UsageError(f"{where} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}")
    if kind == "string":
        _check_text(where, spec, value)
    elif kind in ("integer", "number"):
        if not spec.get("minimum", value) <= value <= spec.get("maximum", value):
            raise UsageError(f"{where} must be between {spec['minimum']} and {spec['maximum']}")
    elif kind == "array":
        if len(value) > spec.get("maxItems", len(value)):
            raise UsageError(f"{where} holds at most {spec['maxItems']} items")
        for item in value:
            _check(where, spec["items"], item)


def _check_text(where: str, spec: dict, value: str) -> None:
    if len(value) < spec.get("minLength", 0) or not (value.strip() or not spec.get("minLength")):
        raise UsageError(f"{where} must not be empty")
    if len(value) > spec.get("maxLength", len(value)):
        raise UsageError(f"{where} is longer than {spec['maxLength']} characters")
    if "enum" in spec and value not in spec["enum"]:
        raise UsageError(f"{where} must be one of {', '.join(spec['enum'])}")
    if any("\ud800" <= char <= "\udfff" for char in value):
        raise UsageError(f"{where} is not valid UTF-8 text")
