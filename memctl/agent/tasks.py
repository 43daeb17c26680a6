"""The working layer: an agent's active task state in `working/<id>.json` (design.md §9).

SharpAgent's working memory: an agent saves its task state as JSON (at most 10 KB) so a
later process can resume it; `done` turns the final state into an L5 `case` entry and
removes the working file. A task that is never finished (the agent was interrupted) stays
in working/ until it is resumed. Callers hold the writer lock for `save` and `done`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from memctl.core.config import Layout
from memctl.longterm.entries import Entry
from memctl.longterm.recovery import settle
from memctl.longterm.store import open_store
from memctl.core.errors import NotFound, UsageError
from memctl.core.fsutil import atomic_write_text, ensure_private_dir, read_bytes_nofollow
from memctl.core.redact import redact

MAX_STATE_BYTES = 10 * 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# keys whose value reads as the outcome of a task, in order of preference
_SUMMARY_KEYS = ("summary", "result", "outcome", "conclusion", "answer", "status", "goal", "title")


@dataclass
class Task:
    id: str
    state: Any
    created: str
    updated: str
    saves: int
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created": self.created, "updated": self.updated, "saves": self.saves, "state": self.state}

    @property
    def state_bytes(self) -> int:
        return len(_state_json(self.state).encode("utf-8"))


def check_id(task_id: str) -> str:
    if not _ID.match(task_id or ""):
        raise UsageError(f"bad task id {task_id!r}: use 1-64 letters, digits, '.', '_' or '-', not starting with '.'")
    return task_id


def task_path(layout: Layout, task_id: str) -> Path:
    return layout.working_dir / f"{check_id(task_id)}.json"


def _state_json(state: Any) -> str:
    return json.dumps(state, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _scrub(value: Any, scrub: Callable[[str], str]) -> Any:
    """Redact every string in a JSON value (keys included), keeping it valid JSON."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(k)): _scrub_item(str(k), v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, scrub) for v in value]
    return value


def _scrub_item(key: str, value: Any, scrub: Callable[[str], str]) -> Any:
    """`{"password": "..."}`: the key is the context that makes the value a secret."""
    if isinstance(value, str) and value:
        joined = f"{key}={value}"
        redacted = scrub(joined)
        if redacted != joined and redacted.startswith(f"{key}="):
            return redacted[len(key) + 1 :]
    return _scrub(value, scrub)


def parse_state(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("task state must be UTF-8 JSON") from None
    if not text.strip():
        raise UsageError("no task state on stdin: pipe a JSON value, e.g. echo '{\"step\": 2}' | memctl task save ID")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"task state is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError("task state is nested too deeply to be a task's state") from None


def save(layout: Layout, task_id: str, state: Any, now: str, scrub: Callable[[str], str] = redact) -> Task:
    """Create or replace a task's state (≤ 10 KB once redacted)."""
    path = task_path(layout, task_id)
    state = _scrub(state, scrub)
    size = len(_state_json(state).encode("utf-8"))
    if size > MAX_STATE_BYTES:
        raise UsageError(
            f"task state is {size} bytes; the working layer keeps at most {MAX_STATE_BYTES} "
            "(keep pointers to files rather than their contents)"
        )
    previous = _read(path, task_id) if path.exists() else None
    task = Task(
        id=task_id,
        state=state,
        created=previous.created if previous else now,
        updated=now,
        saves=(previous.saves if previous else 0) + 1,
        path=path,
    )
    ensure_private_dir(layout.working_dir)
    atomic_write_text(path, json.dumps(task.to_dict(), ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    return task


def _read(path: Path, task_id: str) -> Task:
    try:
        data = json.loads(read_bytes_nofollow(path).decode("utf-8"))
    except FileNotFoundError:
        raise NotFound(f"no task {task_id!r} in {path.parent} (see `memctl task list`)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not a task file ({exc}); fix or remove it") from None
    except RecursionError:
        raise UsageError(f"{path} is not a task file (JSON nested too deeply); fix or remove it") from None
    if not isinstance(data, dict) or "state" not in data:
        raise UsageError(f"{path} is not a task file (no 'state'); fix or remove it")
    return Task(
        id=str(data.get("id") or task_id),
        state=data["state"],
        created=str(data.get("created", "")),
        updated=str(data.get("updated", "")),
        saves=int(data.get("saves", 1) or 1),
        path=path,
    )


def show(layout: Layout, task_id: str) -> Task:
    return _read(task_path(layout, task_id), task_id)


def list_tasks(layout: Layout) -> list[Task]:
    """Open tasks, most recently saved first."""
    if not layout.working_dir.is_dir():
        return []
    tasks = []
    for path in layout.working_dir.glob("*.json"):
        if path.is_symlink() or not _ID.match(path.stem):
            continue
        try:
            tasks.append(_read(path, path.stem))
        except UsageError:
            continue  # a broken file is reported by `task show`, not hidden from it
    return sorted(tasks, key=lambda t: (t.updated, t.id), reverse=True)


def active(layout: Layout) -> Task | None:
    """The task an agent is most likely resuming: the most recently saved one."""
    tasks = list_tasks(layout)
    return tasks[0] if tasks else None


def case_entry(task: Task, now: str, topic: str | None = None) -> Entry:
    """The L5 `case` entry a finished task becomes; its id is stable so `done` can be rerun."""
    digest = hashlib.sha256(f"{task.id}\0{task.created}\0{_state_json(task.state)}".encode("utf-8")).hexdigest()
    return Entry(
        id=f"t{digest[:12]}",
        type="case",
        topic=topic or _topic_of(task),
        text=f"task {task.id}: {_summary_of(task.state)}",
        created=now,
        updated=now,
        source=f"task:{task.id}",
        extra={"task": task.id, "task_started": task.created, "state": task.state},
    )


def _topic_of(task: Task) -> str:
    if isinstance(task.state, dict):
        for key in ("topic", "project", "area"):
            if isinstance(task.state.get(key), str) and task.state[key].strip():
                return task.state[key].strip()
    return task.id


def _summary_of(state: Any) -> str:
    if isinstance(state, dict):
        parts = [f"{k}: {state[k]}" for k in _SUMMARY_KEYS if isinstance(state.get(k), (str, int, float)) and str(state[k]).strip()]
        if parts:
            return " | ".join(parts)
    if isinstance(state, str):
        return state
    return _state_json(state)


def done(layout: Layout, task_id: str, now: str, topic: str | None = None) -> Entry:
    """Write the task's final state to L5 as a `case`, then remove the working file.

    The entry goes in first; if the process dies before the unlink, a rerun finds the same
    entry id in L5 and only removes the file, so the case is never lost nor doubled.
    """
    task = show(layout, task_id)
    entry = case_entry(task, now, topic)
    settle(layout)  # torn lines and cut-off operations first: the check below must see L5 whole
    store = open_store(layout)
    if not store.active.holds(entry.id):
        store.active.append([entry])
    os.unlink(task.path)
    return entry
