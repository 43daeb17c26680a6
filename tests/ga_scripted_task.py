"""One user task through GenericAgent's own `agent_loop.agent_runner_loop`, with a scripted model
and the plugins `memctl init` installed (loaded by GenericAgent's own `plugins.hooks`).

Run as a script: `python ga_scripted_task.py CHECKOUT REQUEST_FILE` (the request in a file: it may
be longer than one argument may be); prints one JSON object: the
loop's result, and how long each hook call kept the loop waiting (GenericAgent's `trigger` is
timed by wrapping it before agent_loop binds it; nothing of GenericAgent is changed or copied).
The scripted model calls `web_fetch` three times (each fails: the PDF is too large) and
`file_read` once (it works), then answers.
"""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

checkout = sys.argv[1]
sys.path.insert(0, checkout)

import plugins.hooks as hooks  # noqa: E402  (GenericAgent's own)

waits: list[tuple[str, float]] = []
_trigger = hooks.trigger


def timed_trigger(event, ctx):
    started = time.monotonic()
    try:
        return _trigger(event, ctx)
    finally:
        waits.append((event, time.monotonic() - started))


hooks.trigger = timed_trigger
hooks.discover_and_load()

import agent_loop  # noqa: E402  (binds the timed trigger)


def _call(number: int, name: str, args: dict) -> SimpleNamespace:
    return SimpleNamespace(id=f"toolu_{number:04d}", function=SimpleNamespace(name=name, arguments=json.dumps(args)))


SCRIPT = [
    ("<summary>fetch the two reports</summary>Fetching the reports.",
     [_call(1, "web_fetch", {"url": "https://files.example.org/q3-report.pdf"}),
      _call(2, "web_fetch", {"url": "https://files.example.org/q4-report.pdf"})]),
    ("<summary>PDFs too large; try the annual one and the notes</summary>",
     [_call(3, "web_fetch", {"url": "https://files.example.org/annual.pdf"}),
      _call(4, "file_read", {"path": "notes.txt"})]),
    ("The reports are too large to fetch (over 20 MB); your notes say the review is on Friday.", []),
]


class ScriptedModel:
    def __init__(self) -> None:
        self.turn = 0
        self.last_tools = ""

    def chat(self, messages, tools=None):
        content, calls = SCRIPT[min(self.turn, len(SCRIPT) - 1)]
        self.turn += 1
        yield content
        return SimpleNamespace(content=content, tool_calls=calls)


class Handler(agent_loop.BaseHandler):
    def __init__(self) -> None:
        self.parent = SimpleNamespace(task_dir=None)
        self._done_hooks: list[str] = []

    def do_web_fetch(self, args, response):
        size = 20_000_000 + len(args["url"]) * 1000
        return agent_loop.StepOutcome({"status": "error", "msg": f"file too large: {size} bytes at {args['url']}"},
                                      next_prompt="the fetch failed")

    def do_file_read(self, args, response):
        return agent_loop.StepOutcome({"status": "success", "content": "review on Friday"}, next_prompt="read it")

    def do_no_tool(self, args, response):
        return agent_loop.StepOutcome(None, next_prompt=None)


REQUEST = open(sys.argv[2], encoding="utf-8").read()
started = time.monotonic()
result = agent_loop.exhaust(agent_loop.agent_runner_loop(ScriptedModel(), "system prompt", REQUEST, Handler(),
                                                         [], max_turns=10, verbose=False))
print(json.dumps({"result": result, "loop_seconds": time.monotonic() - started,
                  "waits": [[event, seconds] for event, seconds in waits]}), flush=True)
