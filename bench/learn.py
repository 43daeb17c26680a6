#!/usr/bin/env python3
"""`memctl learn` throughput over archived sessions (issue #29).

Generates SESSIONS raw logs with the project's log generator (memctl/l4/loggen.py: formats A
and B, Chinese and English, 2-6 tool turns each; a third of the requests carry something the
user says about themselves, a tenth a failing tool), archives them with the installed
`memctl archive`, then times `memctl learn --json` (a real subprocess) and a second, idempotent
run. Prints one JSON object.

    nice -n 10 .venv/bin/python bench/learn.py --sessions 1000 --out /tmp/learn-bench
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from memctl.l4 import loggen  # noqa: E402

ABOUT = ["I prefer vim over emacs.", "My sister Ana lives in Lisbon.", "I'm vegetarian.",
         "我喜欢用 PostgreSQL。", "I work at Example Corp as a data engineer.", "我住在杭州。"]


def write_corpus(raw: Path, sessions: int, seed: int) -> None:
    rng = random.Random(seed)
    start = datetime(2026, 1, 5, 9, 0)
    for number in range(sessions):
        stamp = start + timedelta(hours=7 * number)
        turns = rng.randint(2, 6)
        chinese = rng.random() < 0.4
        request = None
        if number % 3 == 0:
            request = f"{rng.choice(ABOUT)} {loggen.sentence(rng, chinese, 8)}"
        if number % 10 == 0:
            failure = json.dumps({"status": "error", "msg": f"timeout after {rng.randint(10, 90)} s"})
            text = loggen.format_b(stamp, turns, rng, 200, chinese, request=request, tool_text=failure)
        elif number % 2:
            text = loggen.format_a(stamp, turns, rng, 400, chinese, request=request)
        else:
            text = loggen.format_b(stamp, turns, rng, 400, chinese, request=request)
        (raw / f"model_responses_{100000 + number}.txt").write_text(text, encoding="utf-8")


def memctl(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    binary = str(Path(sys.executable).with_name("memctl"))
    started = time.monotonic()
    done = subprocess.run([binary, "--root", str(root), *args], capture_output=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"memctl {args[0]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return done, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--out", type=Path, default=Path("/tmp/memctl-learn-bench"))
    options = parser.parse_args()
    shutil.rmtree(options.out, ignore_errors=True)
    raw, root = options.out / "raw", options.out / "memory"
    raw.mkdir(parents=True)
    write_corpus(raw, options.sessions, options.seed)
    raw_bytes = sum(p.stat().st_size for p in raw.iterdir())
    memctl(root, "init")
    _, archive_seconds = memctl(root, "archive", str(raw), "--min-age", "0s", "--keep-newest", "0")
    first, first_seconds = memctl(root, "learn", "--json")
    second, second_seconds = memctl(root, "learn", "--json")
    report = json.loads(first.stdout)
    tools = [json.loads(line) for line in memctl(root, "tools", "--json")[0].stdout.splitlines()]
    print(json.dumps({
        "sessions": options.sessions, "raw_mb": round(raw_bytes / (1 << 20), 1),
        "archive_seconds": round(archive_seconds, 2),
        "learn_seconds": round(first_seconds, 2), "sessions_per_second": round(report["learned"] / first_seconds, 1),
        "learned": report["learned"], "messages": report["messages"], "candidates": report["candidates"],
        "routing": report["actions"], "l5_entries": len((root / "long_term.jsonl").read_text().splitlines()),
        "tool_events": report["tool_events"], "tools": {t["tool"]: [t["calls"], t["failures"]] for t in tools},
        "second_run_seconds": round(second_seconds, 2), "second_run_learned": json.loads(second.stdout)["learned"],
    }, ensure_ascii=False))


if __name__ == "__main__":
    main()
