#!/usr/bin/env python3
"""Archive benchmark: memctl's L4 cycle against the reference archiver's strategy, one run.

Generates a corpus of realistic raw logs (both formats, large tool outputs, CJK text, one
single log of at least --big-mb MB), archives it with the installed `memctl archive` (a real
subprocess), and runs the baseline in a subprocess too: the reference's strategy — read each
log whole, drop the system prompt and the empty ASSISTANT echo, extract history from the
`<history>` windows, deflate each session into a monthly zip. Prints throughput (MB/s),
peak RSS and footprint ((zip + history bytes) / raw bytes) side by side.

    .venv/bin/python bench/archive.py --total-mb 1100 --big-mb 520 --out bench/out/archive
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from memctl.l4 import loggen  # noqa: E402

MB = 1 << 20


# ---------------------------------------------------------------- corpus


_EN = ("backup deploy proxy credential rotation archive nightly worker queue latency index schema migration "
       "rollback replica snapshot token cache cluster bucket upload retry config service timer journal disk "
       "quota alert metric trace release build test error warning info debug request response status ok "
       "failed started stopped connection timeout host port path file line user group session agent").split()
_ZH = list("数据迁移脚本回滚路径延期告警规则上线误报扩容服务器备份日志凭证轮换缓存队列延迟索引部署配置磁盘清理会议纪要整理项目分组待办")


def unique_tool_output(rng: random.Random, size: int) -> str:
    """Fresh text each call (no pool to repeat): log-like lines, some Chinese, numbers, paths."""
    lines = []
    total = 0
    while total < size:
        if rng.random() < 0.25:
            body = "".join(rng.choices(_ZH, k=rng.randint(8, 40)))
        else:
            body = " ".join(rng.choices(_EN, k=rng.randint(5, 16)))
        line = f"{rng.randint(1, 99999)}|/srv/app/{rng.choice(_EN)}/{rng.randint(0, 999)}.log {body} {rng.random():.6f}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def write_log(path: Path, target_bytes: int, start: datetime, rng: random.Random, pool: list[str], fmt: str) -> int:
    """Append sessions' turns to one log until it reaches target_bytes (streamed to disk)."""
    written = 0
    stamp = start
    with open(path, "w", encoding="utf-8") as out:
        while written < target_bytes:
            turns = rng.randint(8, 40)
            if fmt == "B":
                text = loggen.format_b(stamp, turns, rng, 10, chinese=rng.random() < 0.3,
                                       tool_text=None)
            else:
                text = loggen.format_a(stamp, turns, rng, 10, chinese=rng.random() < 0.6)
            # swap the tiny generated tool outputs for large realistic ones from the pool
            text = _inflate_tool_outputs(text, rng, pool, fmt)
            out.write(text)
            written += len(text.encode("utf-8"))
            stamp += timedelta(minutes=rng.randint(20, 300))
    return written


_B_RESULT = re.compile(r"<tool_result>.*?</tool_result>", re.S)
_A_RESULT = re.compile(r'("type": "tool_result", "tool_use_id": "[^"]*", "content": )"(?:[^"\\]|\\.)*"')


def _inflate_tool_outputs(text: str, rng: random.Random, pool: list[str], fmt: str) -> str:
    def big() -> str:
        if rng.random() < 0.1:  # agents re-read the same file now and then
            return rng.choice(pool)
        output = unique_tool_output(rng, int(rng.lognormvariate(9.5, 1.2)))
        pool[rng.randrange(len(pool))] = output
        return output

    if fmt == "B":
        return _B_RESULT.sub(lambda m: "<tool_result>" + big() + "</tool_result>", text)
    return _A_RESULT.sub(lambda m: m.group(1) + json.dumps(big(), ensure_ascii=False), text)


def build_corpus(raw_dir: Path, total_mb: int, big_mb: int, seed: int = 7) -> int:
    raw_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pool = [unique_tool_output(rng, 20_000) for _ in range(8)]
    total = write_log(raw_dir / "model_responses_900000.txt", big_mb * MB, datetime(2026, 5, 1, 8, 0), rng, pool, "B")
    number = 0
    while total < total_mb * MB:
        number += 1
        fmt = "A" if number % 2 else "B"
        size = rng.randint(2, 40) * MB
        start = datetime(2026, 3, 1, 8, 0) + timedelta(hours=7 * number)
        total += write_log(raw_dir / f"model_responses_{100000 + number}.txt", size, start, rng, pool, fmt)
    old = time.time() - 3 * 86400
    for path in raw_dir.iterdir():
        os.utime(path, (old, old))
    return total


# ---------------------------------------------------------------- baseline (the reference's strategy)

_ENTRY = re.compile(r"^=== (Prompt|Response) === (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d).*$", re.M)


def baseline_archive(raw_dir: Path, out_dir: Path) -> None:
    """Reference strategy: whole-file read, drop system prompt and echo, deflate per session."""
    out_dir.mkdir(parents=True, exist_ok=True)
    history = open(out_dir / "all_histories.txt", "w", encoding="utf-8")
    for path in sorted(raw_dir.iterdir()):
        text = path.read_text(encoding="utf-8", errors="replace")
        stamps = [m.group(2) for m in _ENTRY.finditer(text)]
        if not stamps:
            continue
        first = datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S")
        last = datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S")
        name = f"{first:%m%d_%H%M}-{last:%m%d_%H%M}"
        compressed = _drop_system_prompts(text).replace("=== ASSISTANT ===\n", "")
        lines: list[str] = []
        for window in _WINDOW.findall(compressed):
            for line in window.replace("\\n", "\n").splitlines():
                if line.strip() and line not in lines[-30:]:
                    lines.append(line)
        history.write("\n" + "=" * 60 + f"\nSESSION: {name}\n" + "=" * 60 + "\n" + "\n".join(lines) + "\n")
        with zipfile.ZipFile(out_dir / f"{first:%Y-%m}.zip", "a", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(name + ".txt", compressed)
    history.close()


_WINDOW = re.compile(r"<history>(.*?)</history>", re.S)


def _drop_system_prompts(text: str) -> str:
    """Keep each prompt's marker line and its USER section; drop what precedes `=== USER ===`."""
    pieces = []
    position = 0
    for match in _ENTRY.finditer(text):
        if match.group(1) != "Prompt":
            continue
        user = text.find("=== USER ===", match.end())
        following = text.find("\n=== Response === ", match.end())
        if user < 0 or (0 <= following < user):
            continue
        pieces.append(text[position: match.end() + 1])
        position = user
    pieces.append(text[position:])
    return "".join(pieces)


# ---------------------------------------------------------------- measuring


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, int, int, float]:
    """(wall seconds, peak RSS bytes, exit code, CPU seconds) of a subprocess, from wait4's rusage."""
    started = time.perf_counter()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    return elapsed, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def footprint(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.zip")) + sum(
        p.stat().st_size for p in folder.rglob("all_histories.txt"))


# `memctl` as a user without the zlib-ng package has it: its import fails, so the standard
# library's zlib deflates (and inflates for the verify).
WITHOUT_ZLIB_NG = ("import sys; sys.modules['zlib_ng'] = None; sys.argv[0] = 'memctl'; "
                   "from memctl.entry import main; main()")


def memctl_command(memctl: str, fast: bool) -> list[str]:
    return [memctl] if fast else [sys.executable, "-c", WITHOUT_ZLIB_NG]


def measure_memctl(memctl: list[str], corpus: Path, workdir: Path, level: int, keep_corpus: bool) -> dict:
    """One `memctl archive` over a GenericAgent-style copy of the corpus at a zip level."""
    (workdir / "memory").mkdir(parents=True)
    (workdir / "memory" / "memctl.toml").write_text(f"[archive]\nzip_level = {level}\n")
    raw_dir = workdir / "temp" / "model_responses"
    if keep_corpus:
        shutil.copytree(corpus, raw_dir)
    else:
        shutil.move(str(corpus), raw_dir)
    secs, rss, rc, cpu = run_measured([*memctl, "--root", str(workdir / "memory"), "archive", "--keep-newest", "0", "--quiet"])
    result = {"secs": secs, "rss": rss, "rc": rc, "cpu": cpu, "foot": footprint(workdir / "memory"),
              "left": len(list(raw_dir.iterdir()))}
    shutil.rmtree(workdir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mb", type=int, default=1100)
    parser.add_argument("--big-mb", type=int, default=520)
    parser.add_argument("--out", type=Path, default=Path("bench/out/archive"))
    parser.add_argument("--levels", default="6", help="memctl zip levels to run, the default (6) first")
    parser.add_argument("--no-fallback", action="store_true",
                        help="skip the run with zlib-ng's import blocked (the standard zlib fallback)")
    parser.add_argument("--baseline-only", type=Path, nargs=2, metavar=("RAW", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_only:
        baseline_archive(*args.baseline_only)
        return
    memctl = shutil.which("memctl", path=str(Path(sys.executable).parent)) or "memctl"
    shutil.rmtree(args.out, ignore_errors=True)
    corpus = args.out / "corpus"
    started = time.perf_counter()
    raw_bytes = build_corpus(corpus, args.total_mb, args.big_mb)
    print(f"corpus: {raw_bytes / MB:.0f} MB in {len(list(corpus.iterdir()))} logs "
          f"(largest {max(p.stat().st_size for p in corpus.iterdir()) / MB:.0f} MB), "
          f"generated in {time.perf_counter() - started:.0f} s", flush=True)

    load_before = os.getloadavg()[0]
    base_raw = args.out / "baseline-raw"
    shutil.copytree(corpus, base_raw)
    b_secs, b_rss, b_rc, b_cpu = run_measured([sys.executable, __file__, "--baseline-only", str(base_raw), str(args.out / "baseline")])
    baseline = {"secs": b_secs, "rss": b_rss, "rc": b_rc, "cpu": b_cpu, "foot": footprint(args.out / "baseline")}
    shutil.rmtree(base_raw)

    levels = [int(level) for level in args.levels.split(",")]
    setups = [(f"memctl (level {level}, zlib-ng)", level, True) for level in levels]
    if not args.no_fallback:
        setups.append((f"memctl (level {levels[0]}, stdlib zlib)", levels[0], False))
    columns = []
    for number, (name, level, fast) in enumerate(setups):
        run = measure_memctl(memctl_command(memctl, fast), corpus, args.out / f"memctl-{number}", level,
                             keep_corpus=number < len(setups) - 1)
        columns.append((name, run))
    columns.append(("baseline (reference strategy)", baseline))
    load_after = os.getloadavg()[0]

    def row(label, fmt):
        return (label, *[fmt(run) for _, run in columns])

    rows = [
        ("", *[name for name, _ in columns]),
        row("exit code", lambda r: str(r["rc"])),
        row("throughput MB/s", lambda r: f"{raw_bytes / MB / r['secs']:.1f}"),
        row("wall time s", lambda r: f"{r['secs']:.1f}"),
        row("CPU time s (user+sys)", lambda r: f"{r['cpu']:.1f}"),
        row("MB per CPU-second", lambda r: f"{raw_bytes / MB / r['cpu']:.1f}"),
        row("cores busy (CPU / wall)", lambda r: f"{r['cpu'] / r['secs']:.2f}"),
        row("peak RSS MB", lambda r: f"{r['rss'] / MB:.0f}"),
        row("footprint (zip+history)/raw", lambda r: f"{r['foot'] / raw_bytes:.4f}"),
        row("archive bytes MB", lambda r: f"{r['foot'] / MB:.1f}"),
        row("raw logs left", lambda r: str(r.get("left", "-"))),
        row("lossless (show --raw)", lambda r: "no" if "left" not in r else "yes"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"load average (1 min): {load_before:.2f} before the runs, {load_after:.2f} after ({os.cpu_count()} cores)")
    for label, *cells in rows:
        print(f"{label:<{width}}  " + "  ".join(f"{cell:>30}" for cell in cells))
    shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
