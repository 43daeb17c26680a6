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

With --no-index (issue #31) the memory has no index at all (--base-mb of history, 0 by
default, never indexed): `memctl import` of --lines lines into it (timed, its CPU too), then the
same search twice, and whether the import left the index built (its item count, before any
search) and whether the first search changed it (the index file's bytes before and after).

Target (issues #13, #31): each first search <= 1.5x the second. The load average is printed
beside each number (the machine is shared).

    .venv/bin/python bench/first_search.py [--sessions 140] [--lines 10000] [--base-mb 30] [--memctl EXE]
    nice -n 10 .venv/bin/python bench/first_search.py --no-index --lines 150000 [--base-mb 0] [--memctl EXE]
"""

from __future__ import annotations

import argparse
import json
import os
import hashlib
import random
import shutil
import sqlite3
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from search_scale import TextMaker, build_memory, child_env, memctl_exe, timed_process, timed_process_cpu  # noqa: E402

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


def first_and_second(exe: str, root: Path, query: str, env: dict) -> tuple[float, float, str]:
    """The same search twice, as processes: (first, second) wall seconds and a line saying
    both with their CPU (user + system, much less changed by other work on the machine)."""
    first, code, _, _, first_cpu = timed_process_cpu([exe, "--root", str(root), "search", query], env)
    first_load = load()
    assert code == 0, f"the first search for {query!r} found nothing"
    second, code, _, _, second_cpu = timed_process_cpu([exe, "--root", str(root), "search", query], env)
    return first, second, (f"first {first * 1000:.0f} ms, {first_cpu * 1000:.0f} ms CPU ({first_load}); second "
                           f"{second * 1000:.0f} ms, {second_cpu * 1000:.0f} ms CPU ({load()}): "
                           f"{first / second:.2f}x wall, {first_cpu / second_cpu:.2f}x CPU")


def index_state(root: Path) -> str:
    """The index's item count and a digest of its file, or "no index"."""
    path = root / ".memctl" / "index.sqlite"
    if not path.exists():
        return "no index"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        items = db.execute("SELECT count(*) FROM items").fetchone()[0]
    db.close()
    return f"{items} items, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def no_index_run(args, exe: str, env: dict) -> None:
    """A memory with no index; an import into it; the first and second search after it."""
    root = args.workdir / "memory"
    if args.base_mb:
        counts = build_memory(root, int(args.base_mb * 1e6), 0.25, l5_entries=20_000)
        print(f"base memory: {sum(v for k, v in counts.items() if k.endswith('bytes')) / 1e6:.0f} MB, no index")
    else:
        (root / ".memctl").mkdir(parents=True)
        print("base memory: empty, no index")
    import_file = args.workdir / "import.jsonl"
    write_import_file(import_file, args.lines)
    seconds, code, _, _, cpu = timed_process_cpu([exe, "--root", str(root), "import", str(import_file),
                                                  "--layer", "L5"], env)
    assert code == 0, "import failed"
    print(f"import of {args.lines} lines ({import_file.stat().st_size / 1e6:.1f} MB): {seconds:.2f} s wall, "
          f"{cpu:.2f} cpu-s ({load()})")
    before = index_state(root)
    print(f"  index after the import, before any search: {before}")
    _, _, searches = first_and_second(exe, root, IMPORT_WORD, env)
    after = index_state(root)
    print(f"  index after the first search: {after} ({'unchanged' if after == before else 'CHANGED'})")
    print(f"  searches after import: {searches}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=140)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--base-mb", type=float, default=None, help="history in the memory first (30; 0 with --no-index)")
    parser.add_argument("--no-index", action="store_true", help="the memory has no index before the import (issue #31)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memctl-first-search"))
    parser.add_argument("--memctl", metavar="EXE", help="the memctl to time (default: the one beside this Python)")
    args = parser.parse_args()
    exe, env = args.memctl or memctl_exe(), child_env()
    print(f"[{exe}]")
    shutil.rmtree(args.workdir, ignore_errors=True)
    if args.no_index:
        args.base_mb = args.base_mb or 0
        no_index_run(args, exe, env)
        return
    args.base_mb = 30 if args.base_mb is None else args.base_mb
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
    print(f"  searches after archive: {first_and_second(exe, root, ARCHIVE_WORD, env)[2]}")

    import_file = args.workdir / "import.jsonl"
    write_import_file(import_file, args.lines)
    seconds, code, _, _ = timed_process([exe, "--root", str(root), "import", str(import_file), "--layer", "L5"], env)
    assert code == 0, "import failed"
    print(f"import of {args.lines} lines ({import_file.stat().st_size / 1e6:.1f} MB): {seconds:.2f} s, "
          f"({load()}; memctl from this commit on indexes what it wrote in that time)")
    print(f"  searches after import: {first_and_second(exe, root, IMPORT_WORD, env)[2]}")


if __name__ == "__main__":
    main()
