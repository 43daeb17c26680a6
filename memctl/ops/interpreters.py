"""Files memctl wrote with the path of a Python in them, and whether that Python is still there.

`memctl init` writes the interpreter that ran it into GenericAgent's archiver shim and recall
plugin (`MEMCTL = [python, "-m", "memctl"]`), and `memctl schedule install --systemd` into
the timers' ExecStart. When that venv is removed, archiving stops with nothing in any log;
`verify` warns with `stale_commands`, and running `init` (or `schedule install`) again writes
the files anew. `embedded_command` and `command_problem` are the helpers for any other file
that runs memctl this way.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from pathlib import Path

_MEMCTL_LINE = re.compile(r"^MEMCTL = (\[.*?\])", re.M)
_EXEC_START = re.compile(r"^ExecStart=(.+)$", re.M)


def embedded_command(path: Path) -> list[str] | None:
    """The command a file rendered from memctl's templates runs (its `MEMCTL = [...]` line)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        command = ast.literal_eval(_MEMCTL_LINE.search(text).group(1))
    except (OSError, AttributeError, ValueError, SyntaxError):
        return None
    return command if isinstance(command, list) and command and all(isinstance(w, str) for w in command) else None


def command_problem(command: list[str]) -> str:
    """'' when the command's program can be run, else why not."""
    program = command[0]
    if not os.path.isabs(program):
        return ""  # found on PATH at run time
    if not os.path.exists(program):
        return f"runs {program}, which is gone (a removed or moved venv?)"
    if not os.access(program, os.X_OK):
        return f"runs {program}, which cannot be executed"
    return ""


def unit_command(text: str) -> list[str] | None:
    """The ExecStart words of a systemd unit (quoting and %% undone)."""
    match = _EXEC_START.search(text)
    if not match:
        return None
    try:
        words = shlex.split(match.group(1))
    except ValueError:
        return None
    return [w.replace("%%", "%").replace("$$", "$") for w in words] or None


def stale_commands(root: Path, files: list[Path], unit_dir: Path | None) -> list[tuple[Path, str]]:
    """(file, problem) for each of `files` (rendered templates) and each memctl timer unit in
    `unit_dir` for this root whose interpreter can no longer be run."""
    found = []
    for path in files:
        command = embedded_command(path)
        problem = command_problem(command) if command else ""
        if problem:
            found.append((path, f"{problem}; `memctl init` writes it again with this memctl"))
    for path in _units_for(root, unit_dir):
        command = unit_command(path.read_text(encoding="utf-8", errors="replace"))
        problem = command_problem(command) if command else ""
        if problem:
            found.append((path, f"{problem}; `memctl schedule install --systemd` writes it again"))
    return found


def _units_for(root: Path, unit_dir: Path | None) -> list[Path]:
    from memctl.ops.schedule import MANAGED_MARK, systemd_escape_env

    if unit_dir is None or not unit_dir.is_dir():
        return []
    wanted = f'MEMCTL_HOME={systemd_escape_env(str(root))}"'
    units = []
    for path in sorted(unit_dir.glob("memctl-*.service")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if MANAGED_MARK in text and wanted in text:
            units.append(path)
    return units
