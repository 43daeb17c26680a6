"""`memctl --version` and the top-level `memctl --help` without typer or rich (the console
script asks here first: the full command line's imports are ~0.4 s for a line of text).

The help is the full command line's own text, rendered at 80 columns and stored in `help.txt`
with a fingerprint of the modules that define it (`app.py` and `commands/*.py`). When those
change, the stored text no longer answers and the full command line does, so the help is
never stale, only slower until `python -m memctl.cli.help_text` stores it again
(tests/test_help_text.py fails until then). A terminal narrower than 80 columns, where click
wraps differently, also goes to the full command line.
"""

from __future__ import annotations

import os
import sys

HELP_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "help.txt")
WIDTH = 80  # click renders help at min(columns, 80) - 2: any wider terminal gets the same text
_FINGERPRINT = "# fingerprint "


def answer(args: list[str]) -> int | None:
    """The exit status of `--version`, `--help`/`-h` or a bare `memctl` (after the global
    options), or None when the full command line must answer."""
    from memctl.cli.argv import global_options

    parsed = global_options(args)
    if parsed is None:
        return None
    words = parsed[2]
    if words == ["--version"]:
        from memctl import __version__

        sys.stdout.write(f"memctl {__version__}\n")
        return 0
    if words not in ([], ["--help"], ["-h"]) or (not words and args) or _columns() < WIDTH:
        return None  # `memctl --root X` alone is click's "Missing command", not the help
    text = stored_help()
    if text is None:
        return None
    if words:
        sys.stdout.write(text)
        return 0
    sys.stderr.write(text)  # a bare `memctl`: the usage, as a usage error (click's no_args_is_help)
    return 2


def stored_help() -> str | None:
    """The stored text, if it was rendered from the modules as they are now."""
    try:
        with open(HELP_FILE, encoding="utf-8") as stream:
            head, _, text = stream.read().partition("\n")
    except OSError:
        return None
    return text if head == _FINGERPRINT + fingerprint() else None


def fingerprint() -> str:
    """CRC-32 of the modules whose text the help shows, in a fixed order (zlib is built in;
    hashlib would load OpenSSL)."""
    import zlib

    here = os.path.dirname(HELP_FILE)
    commands = os.path.join(here, "commands")
    paths = [os.path.join(here, "app.py")] + sorted(
        os.path.join(commands, name) for name in os.listdir(commands) if name.endswith(".py"))
    crc = 0
    for path in paths:
        with open(path, "rb") as stream:
            crc = zlib.crc32(stream.read(), zlib.crc32(os.path.basename(path).encode(), crc))
    return f"{crc:08x}"


def _columns() -> int:
    """The width click would read (shutil.get_terminal_size's order, without importing shutil)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return WIDTH  # not a terminal: click's fallback is 80 as well


def full_help() -> str:
    """The full command line's top-level help at 80 columns, rendered by a child process."""
    import subprocess

    code = "from memctl.cli.app import main; main(['--help'])"
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120, check=True)
    return done.stdout.decode("utf-8")


def store() -> str:
    """Render the full help and store it with the current fingerprint; the path written."""
    from memctl.core.fsutil import atomic_write_text

    atomic_write_text(HELP_FILE, f"{_FINGERPRINT}{fingerprint()}\n{full_help()}", mode=0o644)
    return HELP_FILE


if __name__ == "__main__":  # python -m memctl.cli.help_text: store the help again after a command changed
    sys.stdout.write(store() + "\n")
