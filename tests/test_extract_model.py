"""Extraction by a model (memctl.learn.extract.model): a real command (a python script the test
writes) and a real OpenAI-compatible endpoint (http.server on 127.0.0.1, port 0). A good answer is
validated against the batch; garbage, a timeout, an HTTP 500, an exit status or an absent program
fall back to the deterministic extractor with one note; the key reaches neither argv nor a note;
the model never sees a secret and never gets one through."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memctl.core.config import init_root, load_settings
from memctl.learn.candidates import Message
from memctl.learn.extract import extract_candidates

KEY = "sk-test-0123456789abcdefghijklmnopqrstuv"
MESSAGES = [Message("s1", "m1", 0, "user", "I moved to Porto last month.", "2023-05-08T10:00:00", "Ines"),
            Message("s1", "m2", 1, "user", "My password is hunter2, do not tell anyone.", "2023-05-08T10:01:00", "Ines")]


def settings_with(tmp_path, extract: str):
    root = tmp_path / "memory"
    root.mkdir(exist_ok=True)
    init_root(root)
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[extract]\n" + extract + "\n")
    return load_settings(root)


def good_answer(request: dict) -> dict:
    return {"candidates": [{"type": "profile", "topic": "home city", "text": f"{m['speaker']} lives in Porto.",
                            "fields": {"home city": "Porto"}, "confidence": 8, "message_ids": [m["id"]]}
                           for m in request["messages"] if "Porto" in m["content"]]}


# ---------------------------------------------------------------- a command

def command_settings(tmp_path, body: str, timeout: float = 10):
    script = tmp_path / "model.py"
    script.write_text("import json, sys, time, os\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv))\n"
                      "request = sys.stdin.read()\n"
                      f"open({str(tmp_path / 'stdin.json')!r}, 'w').write(request)\n"
                      "request = json.loads(request)\n" + body, encoding="utf-8")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    return settings_with(tmp_path, f"command = {json.dumps(command)}\ntimeout = {timeout}")


def test_a_commands_good_answer_becomes_candidates_with_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMCTL_EXTRACT_KEY", KEY)
    answer = json.dumps(good_answer({"messages": [{"id": "m1", "speaker": "Ines", "content": "Porto"}]}))
    settings = command_settings(tmp_path, f"print({answer!r})")
    candidates, notes = extract_candidates(settings, MESSAGES)
    assert notes == []
    assert [c.to_dict() for c in candidates] == [{
        "type": "profile", "topic": "home city", "text": "Ines lives in Porto.", "confidence": 8.0,
        "sources": [{"session": "s1", "message": "m1"}], "speaker": "Ines", "time": "2023-05-08T10:00:00",
        "fields": {"home city": "Porto"}}]
    assert KEY not in (tmp_path / "argv.json").read_text()
    shown = (tmp_path / "stdin.json").read_text()
    assert "hunter2" not in shown and "Porto" in shown  # the model never sees the secret


def test_invented_message_ids_are_dropped(tmp_path):
    answer = {"candidates": [
        {"type": "event", "text": "Ines moved to Porto in April 2023.", "message_ids": ["m1"]},
        {"type": "event", "text": "Ines won the lottery.", "message_ids": ["m99"]},
        {"type": "event", "text": "Ines is a spy.", "message_ids": []},
        {"type": "no-such-type", "text": "Ines likes Porto.", "message_ids": ["m1"]},
        {"type": "event", "text": "Ines's password is hunter2.", "message_ids": ["m2"]},
        {"type": "event", "text": "Ines's key is sk-abcdef1234567890abcdef1234567890.", "message_ids": ["m2"]}]}
    settings = command_settings(tmp_path, f"print(json.dumps({answer!r}))")
    candidates, notes = extract_candidates(settings, MESSAGES)
    assert [c.text for c in candidates] == ["Ines moved to Porto in April 2023."]
    assert notes == ["dropped 2 candidate(s) of the model naming no message of the batch",
                     "dropped 3 candidate(s) of the model of an unknown type, without text or holding a secret"]


@pytest.mark.parametrize("body, note", [
    ("print('this is not json')", "the model's answer is not JSON"),
    ("print(json.dumps({'candidates': 'none'}))", "the model's answer is not the candidate schema"),
    ("print(json.dumps([{'type': 'event', 'text': 'x', 'message_ids': ['nope']}]))",
     "the model's answer held no usable candidate"),
    ("sys.exit(3)", "the extract command exited with status 3"),
    ("time.sleep(60)", "the model timed out after 0.5 s"),
])
def test_a_failing_command_falls_back_with_one_note(tmp_path, monkeypatch, body, note):
    monkeypatch.setenv("MEMCTL_EXTRACT_KEY", KEY)
    settings = command_settings(tmp_path, body, timeout=0.5 if "sleep" in body else 10)
    candidates, notes = extract_candidates(settings, MESSAGES)
    assert notes == [f"{note}: used the deterministic extractor"]
    assert [c.text for c in candidates] == ["Ines moved to Porto in April 2023."]  # the rules' answer
    assert KEY not in notes[0]


def test_messages_of_wrong_types_never_reach_the_model(tmp_path):
    settings = command_settings(tmp_path, "print(json.dumps({'candidates': []}))")
    hand_built = Message("s1", "m9", 0, "user", b"bytes", "", None)  # type: ignore[arg-type]
    assert extract_candidates(settings, [hand_built]) == ([], [])
    assert not (tmp_path / "stdin.json").exists()  # nothing was asked


def test_an_absent_program_falls_back(tmp_path):
    settings = settings_with(tmp_path, f'command = "{tmp_path}/no-such-program --flag"')
    candidates, notes = extract_candidates(settings, MESSAGES)
    assert len(notes) == 1 and notes[0].startswith("the extract command could not start")
    assert len(candidates) == 1


# ---------------------------------------------------------------- an endpoint

class Endpoint:
    """A local OpenAI-compatible server whose answer each test sets."""

    def __init__(self):
        self.requests: list[dict] = []
        self.status = 200
        self.content: str | None = None  # the chat message's content; None: the raw body below
        self.raw = b""
        self.release = threading.Event()
        self.hold = False
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                          "body": body})
                if endpoint.hold:
                    endpoint.release.wait(10)
                data = endpoint.raw if endpoint.content is None else json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": endpoint.content}}]}).encode()
                try:
                    self.send_response(endpoint.status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def endpoint():
    server = Endpoint()
    yield server
    server.close()


def endpoint_settings(tmp_path, url: str, timeout: float = 10):
    return settings_with(tmp_path, f'endpoint = "{url}"\nmodel = "tiny"\nkey_env = "TEST_MODEL_KEY"\n'
                                   f"timeout = {timeout}")


def test_an_endpoints_good_answer(tmp_path, monkeypatch, endpoint):
    monkeypatch.setenv("TEST_MODEL_KEY", KEY)
    endpoint.content = "```json\n" + json.dumps(good_answer({"messages": [
        {"id": "m1", "speaker": "Ines", "content": "Porto"}]})) + "\n```"
    candidates, notes = extract_candidates(endpoint_settings(tmp_path, endpoint.url), MESSAGES)
    assert notes == [] and [(c.type, c.topic, c.sources) for c in candidates] == \
        [("profile", "home city", [{"session": "s1", "message": "m1"}])]
    (request,) = endpoint.requests
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == f"Bearer {KEY}"
    assert request["body"]["model"] == "tiny"
    shown = json.loads(request["body"]["messages"][-1]["content"])["messages"]
    assert [m["id"] for m in shown] == ["m1", "m2"] and "hunter2" not in json.dumps(request)


@pytest.mark.parametrize("status, content, raw, note", [
    (500, None, b"internal error", "the extract endpoint answered HTTP 500"),
    (200, None, b"<html>garbage</html>", "the extract endpoint's answer is not a chat completion"),
    (200, "I think Ines lives in Porto!", b"", "the model's answer is not JSON"),
    (200, json.dumps({"candidates": [{"type": "event", "text": "Ines won.", "message_ids": ["m77"]}]}), b"",
     "the model's answer held no usable candidate"),
])
def test_a_failing_endpoint_falls_back_with_one_note(tmp_path, monkeypatch, endpoint, status, content, raw, note):
    monkeypatch.setenv("TEST_MODEL_KEY", KEY)
    endpoint.status, endpoint.content, endpoint.raw = status, content, raw
    candidates, notes = extract_candidates(endpoint_settings(tmp_path, endpoint.url), MESSAGES)
    assert notes == [f"{note}: used the deterministic extractor"]
    assert [c.text for c in candidates] == ["Ines moved to Porto in April 2023."]


def test_a_slow_endpoint_times_out(tmp_path, endpoint):
    endpoint.hold, endpoint.content = True, json.dumps({"candidates": []})
    candidates, notes = extract_candidates(endpoint_settings(tmp_path, endpoint.url, timeout=0.5), MESSAGES)
    assert notes == ["the model timed out after 0.5 s: used the deterministic extractor"]
    assert len(candidates) == 1


def test_an_unreachable_endpoint_falls_back_without_naming_the_address(tmp_path, monkeypatch):
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv("TEST_MODEL_KEY", KEY)
    url = f"http://user:{KEY}@127.0.0.1:{port}/v1"
    candidates, notes = extract_candidates(endpoint_settings(tmp_path, url), MESSAGES)
    assert notes == ["the extract endpoint could not be reached: used the deterministic extractor"]
    assert len(candidates) == 1
