"""memctl for GenericAgent: the agent sees what memctl remembers, and memctl learns from each task.

Installed by `memctl init`, removed by `memctl init --undo-genericagent` (or delete this file).
Hooks (see plugins/hooks.py and agent_loop.py):

- agent_before (once per user task): `memctl compose --no-l1 -`, the user's request on stdin
  (never on the command line, where `ps` shows it and 128 KiB is the limit; L1 is left out, the
  system prompt has it). The block - recalled memory, within a token budget (_budget; 1500) - is
  appended to the last user message. The only hook the turn waits for: TIME_LIMIT seconds at
  most (env MEMCTL_RECALL_TIMEOUT, default 1.5); on any failure nothing is appended.
- tool_after: `memctl tools record` (the call, its arguments and result, cut short).
- turn_after: `memctl turn --session ID` (the request, the reply and the tool results as JSON Lines).
- agent_after: `memctl dispose --session ID` (the task's summary goes to L2 short-term).

The last three never make the agent wait: they are queued (at most QUEUE_LIMIT; more are
dropped) and run one after another by a background thread, each killed after HOOK_TIME_LIMIT
seconds (env MEMCTL_HOOK_TIMEOUT, default 10); MEMCTL_LEARN=0 turns them off. A failure is one
line on stderr, never an exception in the agent.
"""
# memctl-genericagent-plugin v2
import atexit
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import plugins.hooks as hooks

_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMORY_ROOT = os.path.join(_PROJECT_ROOT, "memory")
MEMCTL = __MEMCTL_COMMAND__  # the memctl that ran `memctl init`
DEFAULT_BUDGET = 1500
DEFAULT_TIME_LIMIT = 1.5
DEFAULT_HOOK_TIME_LIMIT = 10.0
QUEUE_LIMIT = 256
TEXT_LIMIT = 16000  # characters of one message sent to `memctl turn`
RESULT_LIMIT = 2000  # characters of one tool result (or argument) sent along
_sessions = {}  # id(handler) -> the task's session id, the user's words, what was sent
_numbers = itertools.count(1)
_running = set()  # memctl processes not yet finished (stopped at exit, never left behind)


def _seconds(name, default):
    try:
        return max(0.1, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _budget():
    """MEMCTL_RECALL_BUDGET, else `[compose] budget` of memory/memctl.toml, else 1500 tokens."""
    try:
        if os.environ.get("MEMCTL_RECALL_BUDGET"):
            return max(1, int(os.environ["MEMCTL_RECALL_BUDGET"]))
        import tomllib

        with open(os.path.join(MEMORY_ROOT, "memctl.toml"), "rb") as handle:
            budget = tomllib.load(handle).get("compose", {}).get("budget", DEFAULT_BUDGET)
        return budget if isinstance(budget, int) and budget > 0 else DEFAULT_BUDGET
    except Exception:
        return DEFAULT_BUDGET


def _log(text):
    try:
        sys.stderr.write(f"[memctl_recall] {text}\n")
    except Exception:
        pass


def _last_user_message(messages):
    return next((m for m in reversed(messages or []) if isinstance(m, dict) and m.get("role") == "user"), None)


def _text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _stop(process):
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except OSError:
        pass
    try:
        process.communicate(timeout=0.5)
    except Exception:
        pass


def _run(arguments, data, limit):
    """memctl ARGUMENTS with DATA on stdin, stopped after LIMIT seconds; its stdout (raises on failure)."""
    command = MEMCTL + ["--root", MEMORY_ROOT] + arguments
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    _running.add(process)
    try:
        out, err = process.communicate(data, timeout=limit)
    except subprocess.TimeoutExpired:
        _stop(process)
        raise RuntimeError(f"memctl {arguments[0]} took longer than {limit}s") from None
    finally:
        _running.discard(process)
    if process.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines() or ["no output"]
        raise RuntimeError(f"memctl {arguments[0]} exited {process.returncode}: {lines[-1]}")
    return out.decode("utf-8", "replace").strip()


def _compose(request, limit):
    arguments = ["compose", "--budget", str(_budget()), "--no-l1", "-"]
    return _run(arguments, request.encode("utf-8", "replace"), limit)


# ---------------------------------------------------------------- the background queue


class _Worker:
    """Runs queued memctl calls one after another, in order, off the agent's thread."""

    def __init__(self):
        self.jobs = queue.Queue(maxsize=QUEUE_LIMIT)
        self.idle = threading.Condition()
        self.pending = 0
        self.thread = None

    def submit(self, arguments, data):
        with self.idle:
            if self.pending >= QUEUE_LIMIT:
                _log(f"memctl {arguments[0]} dropped: {QUEUE_LIMIT} calls already waiting")
                return
            self.pending += 1
        self.jobs.put((arguments, data))
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._loop, name="memctl-hooks", daemon=True)
            self.thread.start()

    def _loop(self):
        while True:
            arguments, data = self.jobs.get()
            try:
                _run(arguments, data, _seconds("MEMCTL_HOOK_TIMEOUT", DEFAULT_HOOK_TIME_LIMIT))
            except Exception as exc:
                _log(f"not recorded: {exc}")
            with self.idle:
                self.pending -= 1
                self.idle.notify_all()

    def flush(self, timeout):
        """Wait up to TIMEOUT seconds for the queued calls; True when none is left."""
        deadline = time.monotonic() + timeout
        with self.idle:
            while self.pending and time.monotonic() < deadline:
                self.idle.wait(max(0.0, deadline - time.monotonic()))
            return not self.pending


_worker = _Worker()


@atexit.register
def _finish_queued_calls():
    """Give the queued calls twice one call's limit, then stop what still runs."""
    if not _worker.flush(2 * _seconds("MEMCTL_HOOK_TIMEOUT", DEFAULT_HOOK_TIME_LIMIT)):
        _log(f"{_worker.pending} queued memctl calls left undone at exit")
    for process in list(_running):
        _stop(process)


def _learning():
    return os.environ.get("MEMCTL_LEARN", "1") != "0"


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _bounded(value, depth=0):
    """VALUE with long strings cut and large containers shortened, as JSON can carry it."""
    if isinstance(value, str):
        return value[:RESULT_LIMIT]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if depth > 4:
        return str(value)[:RESULT_LIMIT]
    if isinstance(value, dict):
        return {str(k): _bounded(v, depth + 1) for k, v in itertools.islice(value.items(), 50)}
    if isinstance(value, (list, tuple, set)):
        return [_bounded(v, depth + 1) for v in itertools.islice(value, 50)]
    return str(value)[:RESULT_LIMIT]


def _session(ctx):
    return _sessions.get(id(ctx.get("handler") if isinstance(ctx, dict) else None))


# ---------------------------------------------------------------- hooks


@hooks.register("agent_before")
def inject_recalled_memory(ctx):
    """Append memctl's recalled-memory block for the user's request to the last user message."""
    try:
        message = _last_user_message(ctx.get("messages"))
        if message is None:
            return
        request = ctx.get("user_input") if isinstance(ctx.get("user_input"), str) else _text_of(message.get("content"))
        if _learning():  # `memctl learn` knows a session fed live by this prefix (learn/backfill_sessions.py)
            session = f"ga-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_numbers)}"
            _sessions[id(ctx.get("handler"))] = {"id": session, "request": request, "request sent": False,
                                                 "last turn": 0}
        if not request.strip():
            return
        block = _compose(request, _seconds("MEMCTL_RECALL_TIMEOUT", DEFAULT_TIME_LIMIT))
        if not block:
            return
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = content + "\n\n" + block
        elif isinstance(content, list):
            content.append({"type": "text", "text": "\n\n" + block})
    except Exception as exc:  # a recall must never break a turn
        _log(f"no recalled memory this turn: {exc}")


@hooks.register("tool_after")
def record_tool_call(ctx):
    """Queue `memctl tools record` for the call that just returned."""
    try:
        session = _session({"handler": ctx.get("self")})
        if session is None or ctx.get("tool_name") in (None, "no_tool"):
            return
        outcome = ctx.get("ret")
        calls = getattr(ctx.get("response"), "tool_calls", None) or []
        index = ctx.get("index", 0)
        call = getattr(calls[index], "id", "") if isinstance(index, int) and 0 <= index < len(calls) else ""
        event = {"tool": str(ctx["tool_name"]), "args": _bounded(ctx.get("args")),
                 "result": _bounded(getattr(outcome, "data", None)), "session": session["id"],
                 "call": str(call or ""), "time": _now()}
        _worker.submit(["tools", "record", "--wait", "5"], json.dumps(event, ensure_ascii=False).encode("utf-8"))
    except Exception as exc:
        _log(f"tool call not recorded: {exc}")


def _turn_lines(session, ctx):
    """This turn's messages for `memctl turn`: the request (first turn), the reply, the tool results."""
    turn, stamp, lines = ctx.get("turn", 0), _now(), []
    session["last turn"] = turn
    if not session["request sent"] and session["request"].strip():
        lines.append({"id": f"t{turn}-user", "role": "user", "content": session["request"][:TEXT_LIMIT], "time": stamp})
        session["request sent"] = True
    reply = getattr(ctx.get("response"), "content", "")
    if isinstance(reply, str) and reply.strip():
        lines.append({"id": f"t{turn}-assistant", "role": "assistant", "content": reply[:TEXT_LIMIT], "time": stamp})
    for number, result in enumerate(ctx.get("tool_results") or []):
        content = result.get("content") if isinstance(result, dict) else None
        if isinstance(content, str) and content.strip():
            lines.append({"id": f"t{turn}-tool{number}", "role": "tool", "content": content[:RESULT_LIMIT],
                          "time": stamp})
    return lines


def _send_turn(session, ctx):
    lines = _turn_lines(session, ctx)
    if lines:
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
        _worker.submit(["turn", "--session", session["id"]], data)


@hooks.register("turn_after")
def record_turn(ctx):
    """Queue `memctl turn` with this turn's messages."""
    try:
        session = _session(ctx)
        if session is not None:
            _send_turn(session, ctx)
    except Exception as exc:
        _log(f"turn not recorded: {exc}")


@hooks.register("agent_after")
def dispose_session(ctx):
    """Queue the last turn (the loop ends a task without turn_after for it), then `memctl dispose`."""
    try:
        session = _sessions.pop(id(ctx.get("handler")), None)
        if session is None:
            return
        if ctx.get("turn", 0) > session["last turn"]:
            _send_turn(session, ctx)
        _worker.submit(["dispose", "--session", session["id"]], b"")
    except Exception as exc:
        _log(f"session not closed: {exc}")
