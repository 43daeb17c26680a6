"""Which folder is the memory: --root, $MEMCTL_HOME, ./memory, a GenericAgent checkout.

Worked out on str paths (memctl.core.paths), so that the lean write path never loads pathlib;
`resolve_root` gives a `Path` unless asked for the text.
"""

from __future__ import annotations

import os

from memctl.core.paths import CONFIG_NAME, STATE_DIR, absolute, absolute_user, home, join, normal, parent

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

# Files and folders that make a folder a memory even without memctl.toml: GenericAgent
# writes global_mem*.txt and L4_raw_sessions/ itself, and reads need no `init`.
MEMORY_MARKERS = ("global_mem_insight.txt", "global_mem.txt", "L4_raw_sessions", "long_term.jsonl", STATE_DIR)


def is_memory_root(folder: str | Path) -> bool:
    """memctl.toml, a marker, or GenericAgent's place for it: a folder beside temp/model_responses/."""
    if os.path.isfile(join(folder, CONFIG_NAME)) or any(os.path.exists(join(folder, marker)) for marker in MEMORY_MARKERS):
        return True
    return os.path.isdir(folder) and os.path.isdir(join(parent(folder), "temp", "model_responses"))


def root_candidate(cli_root: str | os.PathLike | None = None, cwd: Path | None = None) -> Path:
    """--root > $MEMCTL_HOME > ./memory if it exists > $XDG_DATA_HOME/memctl (not checked)."""
    from pathlib import Path

    return Path(_candidate(cli_root, cwd))


def _candidate(cli_root, cwd) -> str:
    if cli_root:
        return absolute_user(cli_root)
    env_home = os.environ.get("MEMCTL_HOME", "").strip()
    if env_home:
        return absolute_user(env_home)
    here = normal(os.fspath(cwd)) if cwd else absolute(os.getcwd())
    if os.path.isdir(join(here, "memory")):
        return absolute(join(here, "memory"))
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = normal(xdg) if xdg and os.path.isabs(xdg) else join(home(), ".local", "share")
    return join(base, "memctl")


def resolve_root(cli_root: str | os.PathLike | None = None, cwd: Path | None = None, for_init: bool = False,
                 as_text: bool = False) -> Path | str:
    """The memory root a command works on, explained when there is none (a str with `as_text`).

    A folder with memctl.toml is the root. Else a folder holding `memory/` (a GenericAgent
    checkout) resolves to that `memory/`. Else a folder that `is_memory_root` (GenericAgent's
    files, no `init` needed to read them) is the root. Anything else is an error — except for
    `init` (`for_init`), which may create the root.
    """
    root = _resolved(_candidate(cli_root, cwd), for_init)
    if as_text:
        return root
    from pathlib import Path

    return Path(root)


def _resolved(candidate: str, for_init: bool) -> str:
    if os.path.exists(candidate) and not os.path.isdir(candidate):
        from memctl.core.errors import NotAMemory  # here: the resident writer's client resolves roots without it

        raise NotAMemory(f"not a folder: {candidate}; --root names the memory folder")
    if os.path.isfile(join(candidate, CONFIG_NAME)):
        return candidate
    if os.path.isdir(join(candidate, "memory")):  # a GenericAgent checkout, even one with a stray .memctl/
        return join(candidate, "memory")
    if is_memory_root(candidate) or for_init:
        return candidate
    from memctl.core.errors import NotAMemory

    raise NotAMemory(f"not a memctl memory folder: {candidate} (no {CONFIG_NAME}, no memory/); "
                     f"run memctl init {candidate}")
