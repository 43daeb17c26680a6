"""The working layer: an agent's active task state in `working/<id>.json` (design.md §9).

SharpAgent's working memory: an agent saves its task state as JSON (at most 10 KB) so a
later process can resume it; `done` turns the final state into an L5 `case` entry and
removes the working file. A task that is never finished (the agent was interrupted) stays
in working/ until it is resumed. Callers hold the writer lock for `save` and `done`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from memctl.core.config import Layout
from memctl.longterm import pg_shared
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
    path: Path | str  # the working file, or where the row is on a server memory

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


class _TaskFiles:
    """Task records as `working/<id>.json`, one machine's own."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.where = layout.working_dir

    def location(self, task_id: str) -> Path:
        return task_path(self.layout, task_id)

    def read(self, task_id: str) -> bytes | None:
        try:
            return read_bytes_nofollow(self.location(task_id))
        except FileNotFoundError:
            return None

    def all(self) -> list[tuple[str, bytes]]:
        if not self.layout.working_dir.is_dir():
            return []
        found = []
        for path in self.layout.working_dir.glob("*.json"):
            if path.is_symlink() or not _ID.match(path.stem):
                continue
            data = self.read(path.stem)
            if data is not None:
                found.append((path.stem, data))
        return found

    def write(self, task_id: str, record: str) -> None:
        ensure_private_dir(self.layout.working_dir)
        atomic_write_text(self.location(task_id), record)

    def drop(self, task_id: str) -> None:
        os.unlink(self.location(task_id))


class _TaskRows:
    """Task records as rows of a server memory's `tasks` table, shared by every machine."""

    def __init__(self, server) -> None:
        self.server = server
        self.where = server.schema

    def location(self, task_id: str) -> str:
        return f"task {task_id} of {self.server.schema} at {self.server.where}"

    def read(self, task_id: str) -> bytes | None:
        record = pg_shared.task_record(self.server, self.server.schema, task_id)
        return None if record is None else record.encode("utf-8")

    def all(self) -> list[tuple[str, bytes]]:
        return [(i, r.encode("utf-8")) for i, r in pg_shared.task_records(self.server, self.server.schema)]

    def write(self, task_id: str, record: str) -> None:
        pg_shared.save_task(self.server, self.server.schema, task_id, record)

    def drop(self, task_id: str) -> None:
        pg_shared.drop_task(self.server, self.server.schema, task_id)


def _records(layout: Layout):
    server = pg_shared.server_of(layout)
    return _TaskFiles(layout) if server is None else _TaskRows(server)


def save(layout: Layout, task_id: str, state: Any, now: str, scrub: Callable[[str], str] = redact) -> Task:
    """Create or replace a task's state (≤ 10 KB once redacted)."""
    check_id(task_id)
    records = _records(layout)
    state = _scrub(state, scrub)
    size = len(_state_json(state).encode("utf-8"))
    if size > MAX_STATE_BYTES:
        raise UsageError(
            f"task state is {size} bytes; the working layer keeps at most {MAX_STATE_BYTES} "
            "(keep pointers to files rather than their contents)"
        )
    data = records.read(task_id)
    previous = _parse(data, records.location(task_id), task_id) if data is not None else None
    task = Task(
        id=task_id,
        state=state,
        created=previous.created if previous else now,
        updated=now,
        saves=(previous.saves if previous else 0) + 1,
        path=records.location(task_id),
    )
    records.write(task_id, json.dumps(task.to_dict(), ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    return task


def _parse(data: bytes, where, task_id: str) -> Task:
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{where} is not a task file ({exc}); fix or remove it") from None
    except RecursionError:
        raise UsageError(f"{where} is not a task file (JSON nested too deeply); fix or remove it") from None
    if not isinstance(record, dict) or "state" not in record:
        raise UsageError(f"{where} is not a task file (no 'state'); fix or remove it")
    return Task(
        id=str(record.get("id") or task_id),
        state=record["state"],
        created=str(record.get("created", "")),
        updated=str(record.get("updated", "")),
        saves=int(record.get("saves", 1) or 1),
        path=where,
    )


def show(layout: Layout, task_id: str) -> Task:
    return _show(_records(layout), check_id(task_id))


def _show(records, task_id: str) -> Task:
    data = records.read(task_id)
    if data is None:
        raise NotFound(f"no task {task_id!r} in {records.where} (see `memctl task list`)")
    return _parse(data, records.location(task_id), task_id)


def list_tasks(layout: Layout) -> list[Task]:
    """Open tasks, most recently saved first."""
    records = _records(layout)
    tasks = []
    for task_id, data in records.all():
        try:
            tasks.append(_parse(data, records.location(task_id), task_id))
        except UsageError:
            continue  # a broken file is reported by `task show`, not hidden from it
    return sorted(tasks, key=lambda t: (t.updated, t.id), reverse=True)


def active(layout: Layout) -> Task | None:
    """The task an agent is most likely resuming: the most recently saved one."""
    tasks = list_tasks(layout)
    return tasks[0] if tasks else None


def export_tasks(layout: Layout, folder: Path) -> list[str]:
    """Each open task as `working/<id>.json` under `folder` (the way back from a server memory
    to files keeps them); the files written."""
    records, target = _records(layout), _TaskFiles(Layout(folder))
    written = []
    for task_id, data in records.all():
        target.write(task_id, data.decode("utf-8"))
        written.append(str(target.location(task_id)))
    return written


def import_tasks(layout: Layout, folder: Path) -> int:
    """The open tasks of a file memory in `folder` into this memory, those it lacks; how many."""
    records, source = _records(layout), _TaskFiles(Layout(folder))
    added = 0
    for task_id, data in source.all():
        if records.read(task_id) is None:
            _parse(data, source.location(task_id), task_id)  # a broken file stops here, nothing half-read
            records.write(task_id, data.decode("utf-8"))
            added += 1
    return added


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
    records = _records(layout)
    task = _show(records, check_id(task_id))
    entry = case_entry(task, now, topic)
    settle(layout)  # torn lines and cut-off operations first: the check below must see L5 whole
    store = open_store(layout)
    with store.server.transaction() if store.on_server else contextlib.nullcontext():  # on a server: both or neither
        if not store.active.holds(entry.id):
            store.active.append([entry])
        records.drop(task_id)
    return entry
