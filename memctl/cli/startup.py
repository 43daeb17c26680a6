"""Start-up shared by the lean search path and the full command line: UTF-8 streams whatever
the locale, arguments re-decoded as UTF-8, global options accepted after the subcommand, and
the one-line text of a file-system error. Imports nothing of typer or rich."""

from __future__ import annotations

import sys

GLOBAL_FLAGS = ("--debug",)
GLOBAL_VALUES = ("--root",)


def prepare_process(argv: list[str]) -> list[str]:
    """Start-up shared by the lean path and the full command line: UTF-8 streams, argv as
    UTF-8, and the global options moved in front of the subcommand."""
    utf8_streams()
    return hoist_global_options([utf8_arg(arg) for arg in argv])


def utf8_streams() -> None:
    """stdin, stdout and stderr in UTF-8 whatever the locale (a Latin-1 or C locale would fail
    on the first Chinese character). A terminal gets `replace` for what it cannot take; a pipe gets
    the surrogate-escaped bytes back as they were read."""
    stdin = getattr(sys.stdin, "reconfigure", None)
    if stdin is not None:  # `remember -` and `import -` read UTF-8, whatever the locale
        stdin(encoding="utf-8", errors="surrogateescape")
    for stream, errors in ((sys.stdout, "surrogateescape"), (sys.stderr, "backslashreplace")):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            tty = stream.isatty()
        except ValueError:  # closed
            continue
        reconfigure(encoding="utf-8", errors="replace" if tty else errors)


def utf8_arg(arg: str) -> str:
    """An argument as UTF-8 text: under LANG=C or a Latin-1 locale Python decodes argv with
    the locale's codec (surrogate escapes or mojibake); the original bytes are re-decoded as
    UTF-8 when they are valid UTF-8, and left alone otherwise."""
    if arg.isascii():
        return arg
    import os

    try:
        return os.fsencode(arg).decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return arg


def hoist_global_options(args: list[str]) -> list[str]:
    """`--root DIR` and `--debug` are accepted anywhere before `--`: moved to the front."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        if arg in GLOBAL_FLAGS:
            front.append(arg)
        elif arg in GLOBAL_VALUES and index + 1 < len(args):
            front += [arg, args[index + 1]]
            index += 1
        elif arg.split("=", 1)[0] in GLOBAL_VALUES and "=" in arg:
            front += arg.split("=", 1)
        else:
            rest.append(arg)
        index += 1
    return front + rest


# Native/JSON GenericAgent sessions are stored as logged: JSON prompts and Python repr() of
# response blocks. A snippet cut from them shows the words, not that scaffolding.


def os_error_text(exc: OSError) -> str:
    """One line for a file-system failure, naming the path (no exception class names)."""
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    reason = exc.strerror or str(exc)
    hint = " (a read-only memory can be searched, not changed)" if isinstance(exc, PermissionError) else ""
    return f"{where}{reason}{hint}"


def internal_error_text(exc: BaseException) -> str:
    """A crash in one line for people: what went wrong, never the exception's class name."""
    detail = " ".join(str(exc).split())[:200] or "unexpected failure"
    return f"internal error: {detail} (rerun with --debug for a traceback)"


def flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def silence_stdout() -> None:
    # Python's "Note on SIGPIPE": point stdout at devnull so the interpreter's final flush is quiet.
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
