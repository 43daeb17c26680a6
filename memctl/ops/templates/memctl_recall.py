"""memctl recall: GenericAgent's agent sees what memctl remembers without having to ask.

Installed by `memctl init`, removed by `memctl init --undo-genericagent` (or delete this
file). On `agent_before` (once per user task, see plugins/hooks.py) it runs
`memctl compose <the user's request>` and appends the block - labelled as recalled memory,
within a token budget (see _budget; default 1500) - to the last
user message, as plugins/project_mode.py appends its context. It never blocks or breaks a
turn: memctl gets TIME_LIMIT seconds (env MEMCTL_RECALL_TIMEOUT, default 1.5); on any failure
nothing is appended and one line goes to stderr.
"""
# memctl-genericagent-plugin v1
import os
import signal
import subprocess
import sys

import plugins.hooks as hooks

_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMORY_ROOT = os.path.join(_PROJECT_ROOT, "memory")
MEMCTL = __MEMCTL_COMMAND__  # the memctl that ran `memctl init`
DEFAULT_BUDGET = 1500
DEFAULT_TIME_LIMIT = 1.5


def _time_limit():
    try:
        return float(os.environ.get("MEMCTL_RECALL_TIMEOUT", DEFAULT_TIME_LIMIT))
    except ValueError:
        return DEFAULT_TIME_LIMIT


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


def _compose(request, limit):
    command = MEMCTL + ["--root", MEMORY_ROOT, "compose", "--budget", str(_budget()), "--", request]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _stop(process)
        raise RuntimeError(f"memctl compose took longer than {limit}s") from None
    if process.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines() or ["no output"]
        raise RuntimeError(f"memctl compose exited {process.returncode}: {lines[-1]}")
    return out.decode("utf-8", "replace").strip()


@hooks.register("agent_before")
def inject_recalled_memory(ctx):
    """Append memctl's recalled-memory block for the user's request to the last user message."""
    try:
        message = _last_user_message(ctx.get("messages"))
        if message is None:
            return
        request = ctx.get("user_input") if isinstance(ctx.get("user_input"), str) else _text_of(message.get("content"))
        if not request.strip():
            return
        block = _compose(request, _time_limit())
        if not block:
            return
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = content + "\n\n" + block
        elif isinstance(content, list):
            content.append({"type": "text", "text": "\n\n" + block})
    except Exception as exc:  # a recall must never break a turn
        sys.stderr.write(f"[memctl_recall] no recalled memory this turn: {exc}\n")
