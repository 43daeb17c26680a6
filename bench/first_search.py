#!/usr/bin/env python3
"""The first search after `archive` and after `import` against the second search of the same
query, as whole processes, on a memory that already has its index.

It writes a memory of --base-mb of history (bench/search_scale.py's generator) and builds its
index, then:

1. writes --sessions raw GenericAgent logs (memctl.l4.loggen, 3 days old) and runs `memctl
   archive` on them (timed: it now also indexes what it wrote), then `memctl search` for a
   word of those sessions twice;
2. runs `memctl import` of --lines JSON Lines (timed), then `memctl search` for a word of
   them twice.

Target (issue #13): each first search <= 1.5x the second. The load average is printed
beside each number (the machine is shared).

    .venv/bin/python bench/first_search.py [--sessions 140] [--lines 10000] [--base-mb 30] [--memctl EXE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from search_scale import TextMaker, build_memory, child_env, memctl_exe, timed_process  # noqa: E402

from memctl.l4 import loggen  # noqa: E402

ARCHIVE_WORD = "zanzibarquux"  # in every archived session, nowhere else
IMPORT_WORD = "quetzalfrob"  # in every imported line, nowhere else


def load() -> str:
    return "load {:.1f}".format(os.getloadavg()[0])


def write_raw_logs(raw_dir: Path, count: int, seed: int = 3) -> int:
    raw_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    stamp = datetime(2026, 3, 1, 9, 0)
    written = 0
    old = time.time() - 72 * 3600
    for number in range(count):
        maker = loggen.format_a if number % 2 else loggen.format_b
        text = maker(stamp, rng.randint(6, 20), rng, chinese=number % 3 == 0)
        text = text.replace("\n", f" {ARCHIVE_WORD}\n", 3)
        path = raw_dir / f"model_responses_{100000 + number}.txt"
        path.write_text(text, encoding="utf-8")
        os.utime(path, (old, old))
        written += len(text.encode())
        stamp += timedelta(hours=rng.randint(2, 9))
    return written


def write_import_file(path: Path, lines: int) -> None:
    maker = TextMaker(21)
    with open(path, "w", encoding="utf-8") as handle:
        for number in range(lines):
            text = f"{maker.paragraph(0.25, 1)} {IMPORT_WORD}"
            handle.write(json.dumps({"id": f"imp{number}", "text": text, "type": "event",
                                     "date": "2026-05-01T10:00:00"}, ensure_ascii=False) + "\n")


def first_and_second(exe: str, root: Path, query: str, env: dict) -> tuple[float, float, str, str]:
    first, code, _, _ = timed_process([exe, "--root", str(root), "search", query], env)
    first_load = load()
    assert code == 0, f"the first search for {query!r} found nothing"
    second, code, _, _ = timed_process([exe, "--root", str(root), "search", query], env)
    return first, second, first_load, load()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=140)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--base-mb", type=float, default=30)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-first-search"))
    parser.add_argument("--memctl", metavar="EXE", help="the memctl to time (default: the one beside this Python)")
    args = parser.parse_args()
    exe, env = args.memctl or memctl_exe(), child_env()
    print(f"[{exe}]")
    shutil.rmtree(args.workdir, ignore_errors=True)
    root, raw_dir = args.workdir / "memory", args.workdir / "temp" / "model_responses"
    counts = build_memory(root, int(args.base_mb * 1e6), 0.25, l5_entries=20_000)
    seconds, code, _, _ = timed_process([exe, "--root", str(root), "index", "rebuild"], env)
    assert code == 0
    print(f"base memory: {sum(v for k, v in counts.items() if k.endswith('bytes')) / 1e6:.0f} MB, "
          f"index built in {seconds:.1f} s ({load()})")

    raw_bytes = write_raw_logs(raw_dir, args.sessions)
    seconds, code, _, out = timed_process([exe, "--root", str(root), "archive", str(raw_dir), "--keep-newest", "0",
                                           "--json"], env)
    assert code == 0, "archive failed"
    report = json.loads(out)
    print(f"archive of {report['new_sessions']} sessions ({raw_bytes / 1e6:.1f} MB raw): {seconds:.2f} s, "
          f"({load()}; memctl from this commit on indexes what it wrote in that time)")
    first, second, first_load, second_load = first_and_second(exe, root, ARCHIVE_WORD, env)
    print(f"  first search after archive {first * 1000:.0f} ms ({first_load}), second {second * 1000:.0f} ms "
          f"({second_load}): {first / second:.2f}x")

    import_file = args.workdir / "import.jsonl"
    write_import_file(import_file, args.lines)
    seconds, code, _, _ = timed_process([exe, "--root", str(root), "import", str(import_file), "--layer", "L5"], env)
    assert code == 0, "import failed"
    print(f"import of {args.lines} lines ({import_file.stat().st_size / 1e6:.1f} MB): {seconds:.2f} s, "
          f"({load()}; memctl from this commit on indexes what it wrote in that time)")
    first, second, first_load, second_load = first_and_second(exe, root, IMPORT_WORD, env)
    print(f"  first search after import {first * 1000:.0f} ms ({first_load}), second {second * 1000:.0f} ms "
          f"({second_load}): {first / second:.2f}x")


if __name__ == "__main__":
    main()
