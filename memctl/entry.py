"""The `memctl` console script.

A search piped into another tool (or asked for --json) is answered by `memctl.search.run_cli`
without importing typer, rich and every command module — several hundred milliseconds that
would dominate a query. Everything else, and any search the lean path does not understand,
goes to the full command line in `memctl.cli`.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.umask(0o077)
    args = sys.argv[1:]
    if "search" in args[:4]:
        from memctl.search import run_cli

        code = run_cli(args)
        if code is not None:
            sys.exit(code)
    from memctl.cli import main as full_main

    full_main(args)
