"""Extraction by a model: `[extract] command` (a program: the messages as JSON on stdin, the
candidates as JSON on stdout) or `[extract] endpoint` (OpenAI-compatible: POST
/chat/completions, the key from the environment variable `[extract] key_env` names).

The model sees the messages redacted (a sentence naming a credential left out); its answer must
be the candidate schema, `{"candidates": [{"type", "text", "topic", "confidence", "fields",
"corrects", "message_ids": [...]}]}` (or the list alone). A candidate naming no message of the
batch is dropped (a model invents ids), as is one of a type the memory does not know or whose
text would hold a secret. Anything else — no answer within `[extract] timeout`, an exit status,
an HTTP error, an answer that is not the schema — raises `ModelFailed`, and the caller falls back
to the deterministic extractor. The key travels in a header only: never in argv, a note or an
error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time

from memctl.core.errors import MemctlError
from memctl.learn.candidates import Candidate, Message
from memctl.learn.extract.deterministic import SCAN_CHARS, Secrets, clean, readable, sentences

MAX_ANSWER_BYTES = 4 << 20
MAX_TEXT_CHARS = 2000
MAX_TOPIC_CHARS = 200
PROMPT = (
    "You extract long-term memories from a conversation. The user message is JSON: {\"messages\": [{\"id\", "
    "\"role\", \"speaker\", \"time\", \"content\"}]}. Answer with JSON only: {\"candidates\": [{\"type\": one of "
    "TYPES, \"text\": the fact as a sentence that reads on its own (first person rewritten to the speaker's name, "
    "relative dates made absolute from the message's time), \"topic\": the key of a profile, preference or entity "
    "fact (e.g. \"home city\", \"sister's name\", the thing liked), \"confidence\": 0-10 (explicit statements "
    "higher than hedged ones), \"fields\": {name: value}, \"corrects\": true when it corrects an earlier "
    "statement, \"message_ids\": [ids of the messages it comes from]}]}. Leave out chit-chat, questions and "
    "anything secret (passwords, keys, tokens).")


class ModelFailed(MemctlError):
    """The model gave no usable answer; the message says why in one line, without the key."""


def extract(settings, messages: list[Message]) -> tuple[list[Candidate], list[str]]:
    """The model's candidates of `messages`, validated, and notes on what was dropped."""
    messages = [message for message in messages if readable(message)]
    if not messages:
        return [], []
    secrets = Secrets(settings)
    request = {"messages": [_shown(message, secrets) for message in messages]}
    timeout = float(settings.get("extract", "timeout"))
    if settings.get("extract", "command"):
        answer = _run_command(str(settings.get("extract", "command")), request, timeout)
    else:
        answer = _ask_endpoint(settings, request, timeout)
    return validated(answer, messages, frozenset(settings.types), secrets)


def _shown(message: Message, secrets: Secrets) -> dict[str, str]:
    """A message as the model sees it: its sentences that hold no secret."""
    kept = [sentence for sentence in sentences(message.content) if not secrets.found_in(sentence)]
    return {"id": message.id, "role": message.role, "speaker": clean(message.speaker), "time": message.time,
            "content": " ".join(kept)[:SCAN_CHARS]}


# ---------------------------------------------------------------- the command

def _run_command(command: str, request: dict, timeout: float) -> bytes:
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise ModelFailed(f"[extract] command cannot be parsed ({error})") from None
    if not argv:
        raise ModelFailed("[extract] command is empty")
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        raise ModelFailed(f"the extract command could not start ({error.strerror or error})") from None
    answer = _bounded_output(process, json.dumps(request, ensure_ascii=False).encode("utf-8"), timeout)
    if process.returncode != 0:
        raise ModelFailed(f"the extract command exited with status {process.returncode}")
    return answer


def _bounded_output(process: subprocess.Popen, payload: bytes, timeout: float) -> bytes:
    """The process's stdout (at most MAX_ANSWER_BYTES), its stdin fed from a thread; killed at
    the deadline."""
    chunks: list[bytes] = []

    def feed() -> None:
        try:
            process.stdin.write(payload)
            process.stdin.close()
        except OSError:
            pass  # it stopped reading: its answer (or its status) says what it made of that

    def read() -> None:
        size = 0
        while size <= MAX_ANSWER_BYTES:
            chunk = process.stdout.read(65536)
            if not chunk:
                return
            chunks.append(chunk)
            size += len(chunk)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=read, daemon=True)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    threads[1].join(timeout)
    try:
        process.wait(max(0.05, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    if threads[1].is_alive() or process.poll() is None:
        process.kill()
        process.wait(5)
        raise ModelFailed(f"the model timed out after {timeout:g} s")
    answer = b"".join(chunks)
    if len(answer) > MAX_ANSWER_BYTES:
        raise ModelFailed(f"the model's answer is over {MAX_ANSWER_BYTES >> 20} MiB")
    return answer


# ---------------------------------------------------------------- the endpoint

def _ask_endpoint(settings, request: dict, timeout: float) -> bytes:
    import urllib.error
    import urllib.request

    url = str(settings.get("extract", "endpoint")).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ModelFailed("[extract] endpoint must be an http:// or https:// address")
    if not url.endswith("/chat/completions"):
        url += "/chat/completions"
    types = ", ".join(sorted(settings.types))
    body = {"model": str(settings.get("extract", "model")), "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": PROMPT.replace("TYPES", types)},
                         {"role": "user", "content": json.dumps(request, ensure_ascii=False)}]}
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(str(settings.get("extract", "key_env")) or "MEMCTL_EXTRACT_KEY", "")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    posted = urllib.request.Request(url, json.dumps(body).encode("utf-8"), headers, method="POST")
    try:
        with urllib.request.urlopen(posted, timeout=timeout) as response:
            raw = _read_within(response, time.monotonic() + timeout, timeout)
    except urllib.error.HTTPError as error:
        raise ModelFailed(f"the extract endpoint answered HTTP {error.code}") from None
    except TimeoutError:
        raise ModelFailed(f"the model timed out after {timeout:g} s") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ModelFailed(f"the model timed out after {timeout:g} s") from None
        raise ModelFailed("the extract endpoint could not be reached") from None
    return _message_content(raw)


def _read_within(response, deadline: float, timeout: float) -> bytes:
    chunks, size = [], 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = response.read(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ModelFailed(f"the model's answer is over {MAX_ANSWER_BYTES >> 20} MiB")
        chunks.append(chunk)


def _message_content(raw: bytes) -> bytes:
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ModelFailed("the extract endpoint's answer is not a chat completion") from None
    if not isinstance(content, str):
        raise ModelFailed("the extract endpoint's answer is not a chat completion")
    return content.encode("utf-8", "replace")


# ---------------------------------------------------------------- the answer

_FENCE = re.compile(rb"^\s*```(?:json)?\s*|\s*```\s*$")


def validated(answer: bytes, messages: list[Message], types: frozenset[str],
              secrets: Secrets) -> tuple[list[Candidate], list[str]]:
    """The candidates of a model's answer that name messages of the batch, of known types, with
    no secret; ModelFailed when the answer is not the schema."""
    try:
        data = json.loads(_FENCE.sub(b"", answer).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ModelFailed("the model's answer is not JSON") from None
    items = data.get("candidates") if isinstance(data, dict) else data
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ModelFailed("the model's answer is not the candidate schema")
    by_id: dict[str, Message] = {}
    for message in messages:
        by_id.setdefault(message.id, message)
    candidates, invented, unusable = [], 0, 0
    for item in items:
        named = [by_id[ref] for ref in dict.fromkeys(_ids(item)) if ref in by_id]
        if not named:
            invented += 1
            continue
        candidate = _candidate(item, named, types)
        if candidate is None or any(secrets.found_in(text) for text in (candidate.text, *candidate.fields.values())):
            unusable += 1
            continue
        candidates.append(candidate)
    notes = []
    if invented:
        notes.append(f"dropped {invented} candidate(s) of the model naming no message of the batch")
    if unusable:
        notes.append(f"dropped {unusable} candidate(s) of the model of an unknown type, without text or holding a secret")
    if items and not candidates:
        raise ModelFailed("the model's answer held no usable candidate")
    return candidates, notes


def _ids(item: dict) -> list[str]:
    refs = item.get("message_ids", item.get("sources", []))
    if not isinstance(refs, list):
        refs = [refs]
    found = []
    for ref in refs[:100]:
        if isinstance(ref, dict):
            ref = ref.get("message")
        if isinstance(ref, (str, int)) and not isinstance(ref, bool):
            found.append(str(ref))
    return found


def _candidate(item: dict, named: list[Message], types: frozenset[str]) -> Candidate | None:
    kind, text = item.get("type"), item.get("text")
    if not isinstance(kind, str) or kind not in types or not isinstance(text, str):
        return None
    text = " ".join(clean(text).split())[:MAX_TEXT_CHARS]
    if not text:
        return None
    topic = item.get("topic")
    topic = " ".join(clean(topic).split())[:MAX_TOPIC_CHARS] if isinstance(topic, str) else ""
    confidence = item.get("confidence", 5)
    if not isinstance(confidence, (int, float)) or isinstance(confidence, bool) or confidence != confidence:
        confidence = 5
    fields = item.get("fields")
    fields = {clean(str(k))[:MAX_TOPIC_CHARS]: clean(str(v))[:MAX_TEXT_CHARS]
              for k, v in list(fields.items())[:50]} if isinstance(fields, dict) else {}
    first = named[0]
    return Candidate(kind, text, topic, float(min(10, max(0, confidence))), [m.source() for m in named],
                     first.speaker, first.time, fields, item.get("corrects") is True)
