"""A search typed at a terminal (issue #13: p50 < 0.25 s at 1 GB), timed under a real
pseudo-terminal beside the same search piped, and beside the full command line (typer + rich,
what a terminal search ran before the lean table), in one run.

    .venv/bin/python bench/search_scale.py --sizes 1G --keep --no-rates   # once: builds /tmp/memctl-scale/memory-1G
    .venv/bin/python bench/terminal_search.py --root /tmp/memctl-scale/memory-1G

Each search is a whole process (`memctl --root R search QUERY`), queries from search_scale's
generator (English and Chinese); the table's width is 120 columns.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from search_scale import child_env, make_queries, memctl_exe, pct  # noqa: E402
from terminal import in_terminal  # noqa: E402

FULL = "import sys\nfrom memctl.cli.app import main\nmain(sys.argv[1:])\n"


def under_pty(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, exit status and output of `cmd` with a terminal of 120 columns as
    stdin/stdout/stderr (the tests' helper, tests/terminal.py)."""
    started = time.perf_counter()
    status, output = in_terminal(cmd, env, columns=120, timeout=600, raw=True)
    return time.perf_counter() - started, status, output


def piped(cmd: list[str], env: dict) -> tuple[float, int, bytes]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env)
    return time.perf_counter() - started, done.returncode, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="a memory folder with its index built")
    parser.add_argument("--rounds", type=int, default=1, help="times each query is run in each mode")
    args = parser.parse_args()
    exe = memctl_exe()
    python = str(Path(exe).with_name("python"))
    env = child_env()
    env.pop("NO_COLOR", None)  # a terminal gets its colours
    ready = subprocess.run([exe, "--root", str(args.root), "index", "refresh"], capture_output=True, env=env)
    if ready.returncode != 0:
        raise SystemExit(f"{args.root}: {ready.stderr.decode(errors='replace').strip()}")
    print(f"root {args.root} (load {os.getloadavg()[0]:.1f})")
    print(f"{'queries':<9}{'terminal p50':>14}{'p95':>8}{'piped p50':>11}{'p95':>8}{'full CLI on a terminal p50':>28}{'p95':>8}")
    for lang, queries in zip(("en", "zh"), make_queries(7)):
        times: dict[str, list[float]] = {"tty": [], "pipe": [], "full": []}
        failed = 0
        for _ in range(args.rounds):
            for query in queries:
                command = ["--root", str(args.root), "search", query]
                for mode, runner, cmd in (("tty", under_pty, [exe, *command]), ("pipe", piped, [exe, *command]),
                                          ("full", under_pty, [python, "-c", FULL, *command])):
                    seconds, status, _ = runner(cmd, env)
                    times[mode].append(seconds)
                    failed += status not in (0, 1)
        if failed:
            raise SystemExit(f"{failed} searches failed")
        cells = "".join(f"{pct(times[m], 0.5) * 1000:>{w}.0f}ms{pct(times[m], 0.95) * 1000:>6.0f}ms"
                        for m, w in (("tty", 12), ("pipe", 9), ("full", 26)))
        print(f"{lang:<9}{cells}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
