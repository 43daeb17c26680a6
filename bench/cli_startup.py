#!/usr/bin/env python3
"""Command-line start-up: `memctl --version`, `--help`, `status`, `recent` and a lexical `compose`
as processes on a built memory, p50 of N runs each (wall time, and the CPU time, user + system,
the process used), for one or more installed `memctl`s side by side (e.g. the same source under
two typer versions), each command run by every executable in turn.

    .venv/bin/python bench/cli_startup.py ROOT --exe "typer 0.29=/tmp/a/bin/memctl" --exe "typer 0.28=.venv/bin/memctl"
    .venv/bin/python bench/cli_startup.py ROOT --only=--version --only=--help --exe ...   # just those

ROOT's memctl.toml is set to `[ranking] fusion = "none"` for the run and removed after it
(restored if it existed).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--exe", action="append", required=True, help="LABEL=PATH of a memctl executable")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", action="append", default=[], metavar="COMMAND",
                        help="run only these commands (--version, --help, status, recent, compose (lexical))")
    args = parser.parse_args()
    executables = dict(pair.split("=", 1) for pair in args.exe)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(LANG="C.UTF-8", NO_COLOR="1", MEMCTL_RESIDENT="0")
    root = str(args.root)
    commands = {"--version": ["--version"], "--help": ["--help"], "status": ["--root", root, "status"], "recent": ["--root", root, "recent"],
                "compose (lexical)": ["--root", root, "compose", "--", "what does Melanie paint"]}
    commands = {name: argv for name, argv in commands.items() if not args.only or name in args.only}
    config = args.root / "memctl.toml"
    saved = config.read_bytes() if config.exists() else None
    config.write_text('[ranking]\nfusion = "none"\n', encoding="utf-8")
    walls: dict[tuple[str, str], list[float]] = {(c, e): [] for c in commands for e in executables}
    cpus: dict[tuple[str, str], list[float]] = {(c, e): [] for c in commands for e in executables}
    try:
        for _ in range(args.runs):
            for command, argv in commands.items():
                for label, exe in executables.items():
                    before = _children_cpu()
                    started = time.perf_counter()
                    done = subprocess.run([exe, *argv], env=env, capture_output=True)
                    walls[(command, label)].append(time.perf_counter() - started)
                    cpus[(command, label)].append(_children_cpu() - before)
                    assert done.returncode in (0, 3), (command, label, done.stderr[-300:])  # status: 3 = warnings
    finally:
        if saved is None:
            config.unlink()
        else:
            config.write_bytes(saved)
    print(f"load {os.getloadavg()[0]:.2f}; {root}; p50 of {args.runs} processes each")
    for command in commands:
        print(f"memctl {command:<20}" + "".join(
            f"{label:>16}: {statistics.median(walls[(command, label)]) * 1000:5.0f} ms wall "
            f"{statistics.median(cpus[(command, label)]) * 1000:5.0f} ms CPU" for label in executables))


def _children_cpu() -> float:
    """User + system seconds of every finished child so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
