"""The `memctl` console script.

`--version` and the top-level `--help` are answered by `memctl.cli.help_text`; a piped or
--json search, a bare `index refresh` and `index rebuild [--json]`, and the plain
forms of `remember`, `forget ID…`, `restore ID` and `archive` are answered by `memctl.cli.lean`
(the writes by `memctl.cli.writes`) without
importing typer, rich and every command module — several hundred milliseconds that would
dominate them. Everything else, and anything the lean path does not understand, goes to the
full command line in `memctl.cli.app`.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.umask(0o077)
    from memctl.cli.startup import prepare_process

    args = prepare_process(sys.argv[1:])
    if not args or args[-1] in ("--version", "--help", "-h"):  # the top level's, from stored text
        from memctl.cli.help_text import answer

        code = answer(args)
        if code is not None:
            sys.exit(code)
    head = args[:4]
    if "remember" in head:  # a resident writer, if one serves the root (memctl.cli.resident)
        from memctl.cli.resident import try_remember

        code = try_remember(args)
        if code is not None:
            sys.exit(code)
    from memctl.cli.lean import is_index_rebuild, run

    if any(word in head for word in ("search", "refresh", "rebuild", "remember", "forget", "restore", "archive")):
        code = run(args)
        if code is not None:
            if is_index_rebuild(args):
                _leave_at_once(code)
            sys.exit(code)
    from memctl.cli.app import main as full_main

    full_main(args)


def _leave_at_once(code: int) -> None:
    """End a rebuild without freeing its objects one by one (the word caches of a big build:
    20-60 ms of its wall time at exit). Everything it wrote is closed and renamed by now; only
    the buffered output is left to flush."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 2  # as the interpreter would report a failed flush at exit
    os._exit(code)
