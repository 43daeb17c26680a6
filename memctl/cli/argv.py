"""The lean paths' reading of the command line: the global options, and the plain forms of the
write commands that `cli.writes` answers (and `cli.resident`'s client sends to a resident
writer). Imports nothing of memctl's but its error constants: the resident writer's client
loads this and little else."""

from __future__ import annotations

import os

from memctl.core.errors import MAX_WAIT

COMMANDS = ("remember", "forget", "restore", "archive")
_REMEMBER = {"--type": "type", "-t": "type", "--topic": "topic", "--confidence": "confidence",
             "--source": "source", "--contradicts": "contradicts", "--wait": "wait"}
_FORGET = {"--reason": "reason", "--wait": "wait"}
_RESTORE = {"--wait": "wait"}
_ARCHIVE = {"--min-age": "min_age", "--keep-newest": "keep_newest", "--wait": "wait"}
_VALUES = {"remember": _REMEMBER, "forget": _FORGET, "restore": _RESTORE, "archive": _ARCHIVE}
_FLAGS = {"remember": {"--force": "force", "--json": "json"}, "forget": {"--json": "json"}, "restore": {"--json": "json"},
          "archive": {"--json": "json", "--quiet": "quiet", "-q": "quiet", "--dry-run": "dry_run", "-n": "dry_run"}}
_NUMBERS = ("confidence", "wait")


def global_options(argv: list[str]) -> tuple[str | None, bool, list[str]] | None:
    """(--root's value, --debug, the command's words), or None for a --root without a value."""
    args = list(argv)
    root = None
    debug = False
    while args and args[0] in ("--root", "--debug"):
        if args.pop(0) == "--root":
            if not args:
                return None
            root = args.pop(0)
        else:
            debug = True
    return root, debug, args


def wanted(args: list[str]) -> bool:
    """Whether the lean write path may answer these arguments (after the global options)."""
    return bool(args) and args[0] in COMMANDS and os.environ.get("MEMCTL_FULL_CLI", "") in ("", "0") \
        and not os.environ.get("MEMCTL_DEBUG")


def write_form(args: list[str]) -> tuple[dict, list[str]] | None:
    """(options, positional words) of a plain write command (`args[0]`), or None when the full
    command line must judge it. `archive`'s terminal check is the caller's."""
    if not wanted(args):
        return None
    command = args[0]
    parsed = parse(args[1:], _VALUES[command], _FLAGS[command], repeatable=("contradicts",))
    if parsed is None:
        return None
    options, words = parsed
    if command == "remember" and ("type" not in options or len(words) > 1):
        return None
    if command == "forget" and not words:
        return None
    if command == "restore" and len(words) != 1:
        return None
    return parsed


def parse(args: list[str], values: dict, flags: dict, repeatable=()) -> tuple[dict, list[str]] | None:
    """(options, positional words), or None for anything the full command line should judge."""
    options: dict = {}
    words: list[str] = []
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg == "--":
            words.extend(args)
            break
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in flags and not eq:
            if flags[name] in options:
                return None
            options[flags[name]] = True
        elif name in values:
            if eq:
                value = inline
            elif args and not args[0].startswith("-"):
                value = args.pop(0)
            else:
                return None
            key = values[name]
            if key in _NUMBERS:
                value = _number(key, value)
                if value is None:
                    return None
            if key in repeatable:
                options.setdefault(key, []).append(value)
            elif key in options:
                return None
            else:
                options[key] = value
        elif arg.startswith("-") and arg != "-":
            return None
        else:
            words.append(arg)
    return options, words


def _number(key: str, text: str) -> float | None:
    """A number option's value; None for one the full command line must refuse (not a number,
    inf, nan, a --wait past MAX_WAIT), which it does with one line (core.fsutil.lock_wait)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")) or (key == "wait" and abs(value) > MAX_WAIT):
        return None
    return value
