#!/usr/bin/env python3
"""Cost of the writes an agent makes after every turn, as the memory grows.

Builds memories of 10k, 100k and 300k items (15% active L5 entries, 85% L6 lines, 1% of L5
preferences with a topic), then times, as whole `memctl` processes and in-process through the
command line's own entry point: `remember` (append), `remember` (supersede a preference),
`forget ID`, `restore ID`. Then 8 concurrent writer processes, each running `memctl remember
--wait 10` in a loop for 30 s: acknowledged writes per second, refusals (exit 75), and lost
writes (acknowledged ids missing from L5 afterwards).

    .venv/bin/python bench/writes.py                          # 10k, 100k, 300k
    .venv/bin/python bench/writes.py --sizes 10000 --seconds 10 --runs 9
    .venv/bin/python bench/writes.py --instructions 3   # also instructions per process (valgrind)

Targets (issue #13): p50 of a `remember` process at 300k <= 1.3x its value at 10k and
<= 150 ms; 8 writers >= 50 acknowledged writes/s, 0 refusals, 0 lost.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOW = "2026-06-01T04:00:00"
L5_SHARE = 0.15
PREFERENCE_SHARE = 0.01


def _dream_bench():
    spec = importlib.util.spec_from_file_location("bench_dream", HERE / "dream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def memctl_bin() -> str:
    return _dream_bench().memctl_bin()


def env(resident: bool = True) -> dict[str, str]:
    """The commands' environment; `resident=False`: every write in its own process
    (MEMCTL_RESIDENT=0), as before the resident writer."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    base.update({"MEMCTL_NOW": NOW, "LANG": "C.UTF-8", "NO_COLOR": "1"})
    if not resident:
        base["MEMCTL_RESIDENT"] = "0"
    return base


MODES = {"resident": True, "in_process": False}  # the resident writer (the default), and without it


def build(root: Path, n: int) -> dict[str, list[str]]:
    """A memory of n items; returns the ids the timed commands work on."""
    entries, _ = _dream_bench().make_entries(n, seed=13)
    subprocess.run([memctl_bin(), "--root", str(root), "init"], check=True, capture_output=True, env=env())
    # the writes alone are timed: no background dream started by a large L5; the resident writer
    # waits out valgrind's slow clients (an instruction count is otherwise an in-process write's)
    (root / "memctl.toml").write_text("[dream]\nauto_trigger_entries = 100000000\n\n[writes]\nresident_idle = 600\n",
                                      encoding="utf-8")
    active = int(n * L5_SHARE)
    preferences = max(1, int(active * PREFERENCE_SHARE))
    with open(root / "long_term.jsonl", "w", encoding="utf-8") as l5:
        for index, entry in enumerate(entries[:active]):
            if index < preferences:
                entry.update(type="preference", topic=f"topic-{index}")
            l5.write(json.dumps(entry, ensure_ascii=False) + "\n")
    with open(root / "archive.jsonl", "w", encoding="utf-8") as l6:
        for entry in entries[active:]:
            entry.update(left_at=entry["updated"], reason="archived", note="bench")
            l6.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return {"forget": [e["id"] for e in entries[preferences:active]][-200:],
            "topics": [f"topic-{i}" for i in range(preferences)]}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1), "p95_ms": round(p95 * 1000, 1)}


def _commands(targets: dict[str, list[str]], runs: int, tag: str):
    """(name, argv list) for each timed operation, `runs` distinct calls each."""
    forget_ids = targets["forget"][:runs]
    topics = targets["topics"]
    # every tag's facts carry numbers of their own: a fact that differs from an earlier one only
    # in its tag letter is a near-duplicate of it (a seen bump, which rewrites L5), not an append
    base = {"p": 10000, "v": 20000, "i": 30000}.get(tag, 40000)
    return {
        "remember": [["remember", f"bench note {tag} {base + i}: rotated the cache on host w{base + i}", "--type", "event"]
                     for i in range(runs)],
        "remember-supersede": [["remember", f"prefers editor v{tag}{i}", "--type", "preference",
                                "--topic", topics[i % len(topics)]] for i in range(runs)],
        "forget": [["forget", entry_id, "--reason", "bench"] for entry_id in forget_ids],
        "restore": [["restore", entry_id] for entry_id in forget_ids],
    }


def first_write(root: Path, resident: bool = True) -> dict:
    """The first write after the files were made by another program: it builds the lookups
    (and, with `resident`, starts the writer)."""
    start = time.perf_counter()
    done = subprocess.run([memctl_bin(), "--root", str(root), "remember", "bench warm-up: the first write",
                           "--type", "event"], capture_output=True, env=env(resident))
    if done.returncode != 0:
        raise SystemExit(f"warm-up failed: {done.stderr.decode()}")
    return {"first_write_ms": round((time.perf_counter() - start) * 1000, 1)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_processes(root: Path, targets, runs: int, resident: bool = True) -> dict:
    """Wall time of each whole process (p50, p95), and its CPU time (user + system, p50): on
    a shared 2-core machine the wall time also measures the other engineers' load. The CPU
    time is the client's: a resident writer's share is in `writer_cpu`."""
    results = first_write(root, resident)
    for name, calls in _commands(targets, runs, "p" if resident else "q").items():
        samples, cpu = [], []
        for argv in calls:
            start, cpu_start = time.perf_counter(), _children_cpu()
            done = subprocess.run([memctl_bin(), "--root", str(root), *argv], capture_output=True,
                                  env=env(resident))
            samples.append(time.perf_counter() - start)
            cpu.append(_children_cpu() - cpu_start)
            if done.returncode != 0:
                raise SystemExit(f"{name} failed: {done.stderr.decode()}")
        results[name] = {**_percentiles(samples), "cpu_p50_ms": round(statistics.median(cpu) * 1000, 1)}
    return results


def instructions(root: Path, targets, runs: int, resident: bool = True) -> dict:
    """Instructions (millions, valgrind's callgrind `Ir`) of one whole process per operation,
    the median of `runs`: what the CPU time measures, without the other users' load in it.
    With `resident`, a remember's are the client's (the writer's share: `writer_cpu`)."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return {}
    results = {}
    first_write(root, resident)
    for name, calls in _commands(targets, runs, "v" if resident else "w").items():
        counts = []
        for argv in calls:
            done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", memctl_bin(),
                                   "--root", str(root), *argv], capture_output=True, env=env(resident))
            found = re.search(rb"Collected : (\d+)", done.stderr)
            if done.returncode != 0 or found is None:
                raise SystemExit(f"{name} under valgrind failed: {done.stderr.decode()[-500:]}")
            counts.append(int(found.group(1)) / 1e6)
        results[name] = round(statistics.median(counts), 1)
    return results


def time_in_process(root: Path, targets, runs: int) -> dict:
    from memctl.cli.app import main

    os.environ.update({"MEMCTL_NOW": NOW})
    results = {}
    for name, calls in _commands(targets, runs, "i").items():
        samples = []
        for argv in calls:
            start = time.perf_counter()
            code = 0
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                try:
                    main(["--root", str(root), *argv])
                except SystemExit as exit_:
                    code = exit_.code or 0
            samples.append(time.perf_counter() - start)
            if code != 0:
                raise SystemExit(f"in-process {name} exited {code}")
        results[name] = _percentiles(samples)
    return results


WRITER = r"""
import json, subprocess, sys, time
memctl, root, seconds, worker = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
end = time.monotonic() + seconds
acked, refused, failed, i = [], 0, 0, 0
while time.monotonic() < end:
    i += 1
    done = subprocess.run([memctl, "--root", root, "remember", f"writer {worker} fact {i} about node n{i:05d}",
                           "--type", "event", "--wait", "10"], capture_output=True, text=True)
    if done.returncode == 0:
        acked.append(done.stdout.strip())
    elif done.returncode == 75:
        refused += 1
    else:
        failed += 1
print(json.dumps([acked, refused, failed]))
"""


def concurrent_writers(root: Path, writers: int, seconds: float, resident: bool = True) -> dict:
    stop_writer(root)  # the run's first remember starts the writer: its CPU is all the run's
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, memctl_bin(), str(root), str(seconds),
                               f"{'r' if resident else 'p'}{w}"],
                              stdout=subprocess.PIPE, text=True, env=env(resident)) for w in range(writers)]
    outputs = [json.loads(p.communicate()[0]) for p in procs]
    elapsed = time.perf_counter() - start
    writer_cpu = writer_cpu_seconds(root)  # start-up included
    acked = [entry_id for ids, _, _ in outputs for entry_id in ids]
    present = set()
    with open(root / "long_term.jsonl", encoding="utf-8") as l5:
        for line in l5:
            try:
                present.add(json.loads(line)["id"])
            except (ValueError, KeyError):
                pass
    lost = [entry_id for entry_id in acked if entry_id not in present]
    return {"writers": writers, "seconds": round(elapsed, 1), "acknowledged": len(acked),
            "acked_per_s": round(len(acked) / elapsed, 1), "refusals": sum(o[1] for o in outputs),
            "failures": sum(o[2] for o in outputs), "lost": len(lost),
            "duplicates": len(acked) - len(set(acked)),
            "writer_cpu_ms_per_ack": round(writer_cpu * 1000 / max(1, len(acked)), 2)}


def writer_cpu_seconds(root: Path) -> float:
    """CPU seconds (user + system) the root's resident writer used so far; 0 when none runs
    (Linux /proc; the pid is the one holding .memctl/writer.lock)."""
    pid = writer_pid(root)
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writer_pid(root: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"memctl.residents.writer" in command and str(root).encode() in command:
            return int(entry.name)
    return None


def writer_instructions(root: Path, writes: int) -> float | None:
    """Instructions (millions) a resident writer spends per write: one started under callgrind
    serves `writes` sequential remembers and then one with none; the difference over `writes`."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return None
    totals = []
    for count in (writes, 0):
        stop_writer(root)
        server = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                                   "-P", "-m", "memctl.residents.writer", str(root), "-"],
                                  stderr=subprocess.PIPE, env=env())
        socket_file = root / ".memctl" / "writer.sock"
        deadline = time.monotonic() + 120
        while not socket_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for i in range(count):
            done = subprocess.run([memctl_bin(), "--root", str(root), "remember",
                                   f"writer-count fact {i} on relay r{70000 + i}", "--type", "event"],
                                  capture_output=True, env=env())
            if done.returncode != 0:
                raise SystemExit(f"remember through the writer failed: {done.stderr.decode()}")
        socket_file.unlink()  # the writer sees its socket gone and exits
        found = re.search(rb"Collected : (\d+)", server.communicate(timeout=300)[1])
        if found is None:
            return None
        totals.append(int(found.group(1)) / 1e6)
    return round((totals[0] - totals[1]) / writes, 1)


def stop_writer(root: Path) -> None:
    """End the root's resident writer (its socket file removed: it exits within seconds)."""
    pid = writer_pid(root)
    (root / ".memctl" / "writer.sock").unlink(missing_ok=True)
    deadline = time.monotonic() + 30
    while pid is not None and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def in_child(name: str, *args):
    """`name(*args)` of this module run in a fresh interpreter, its JSON result back. The bench
    process stays small: a parent that holds a built memory's entries (~1 GB of objects at 300k)
    or memctl's full command line makes every process it starts slower, and more so at the later
    sizes (measured: a remember process beside 3M small dicts 40.8 -> 53.6 ms at 10k), which
    timed the bench itself into the growth it reports."""
    done = subprocess.run([sys.executable, __file__, "--child", name, json.dumps([str(args[0]), *args[1:]])],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _child_main(name: str, arguments: str) -> None:
    root, *rest = json.loads(arguments)
    print(json.dumps({"build": build, "time_in_process": time_in_process}[name](Path(root), *rest)))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return _child_main(*sys.argv[2:4])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,300000")
    parser.add_argument("--runs", type=int, default=15, help="timed calls per operation and size")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the concurrent-writer run")
    parser.add_argument("--no-concurrency", action="store_true")
    parser.add_argument("--instructions", type=int, default=0, metavar="RUNS",
                        help="also count the instructions of RUNS processes per operation (valgrind)")
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="memctl-writes-") as tmp:
            root = Path(tmp) / "memory"
            targets = in_child("build", root, n)
            row = {"items": n, "l5": int(n * L5_SHARE), "jsonl_mb": round(sum(
                (root / f).stat().st_size for f in ("long_term.jsonl", "archive.jsonl")) / 1e6, 1)}
            for mode, resident in MODES.items():
                row[f"process_{mode}"] = time_processes(root, targets, args.runs, resident)
            row["in_process"] = in_child("time_in_process", root, targets, args.runs)
            if args.instructions:
                for mode, resident in MODES.items():
                    row[f"instructions_m_{mode}"] = instructions(root, targets, args.instructions, resident)
                row["writer_instructions_m_per_write"] = writer_instructions(root, 20)
            if not args.no_concurrency:
                for mode, resident in MODES.items():
                    row[f"concurrent_{mode}"] = concurrent_writers(root, args.writers, args.seconds, resident)
            stop_writer(root)
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if len(rows) > 1:
        first, last = (rows[0]["process_in_process"]["remember"]["p50_ms"],
                       rows[-1]["process_in_process"]["remember"]["p50_ms"])
        growth = {"remember_p50_growth": round(last / first, 2),
                  "from_items": rows[0]["items"], "to_items": rows[-1]["items"]}
        if rows[0].get("instructions_m_in_process"):
            growth["remember_instructions_growth"] = round(
                rows[-1]["instructions_m_in_process"]["remember"] / rows[0]["instructions_m_in_process"]["remember"], 2)
        print(json.dumps(growth))


if __name__ == "__main__":
    main()
