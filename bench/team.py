#!/usr/bin/env python3
"""A team memory under load (issue #14): 8 writer processes and 4 searcher processes for 30 s
against one PostgreSQL server, beside the same run on the file backend.

Both memories hold the LoCoMo dev conversations (../shared/bench, imported as L6) and their
index. Then, per backend:
- ranking agreement (before any write): the top 10 of every dev question, memctl in-process,
  over the SQLite index and over the server's: identical or not;
- idle in-process search latency (one `Searcher` per pass, every question once; two passes per
  backend, alternating files / postgres after both memories are built, p50 over both), and the
  CPU per search of the searcher and of its server backend (read from /proc: a local server);
- 30 s with 8 writers (`memctl remember --wait 10` of distinct facts, one process each time)
  and 4 searchers (each one in-process `Searcher` cycling through the questions): acknowledged
  writes/s, refusals (exit 75), failures, lost (acknowledged ids not in L5 afterwards), search
  p50/p95 under that load.

    .venv/bin/python bench/team.py [--seconds 30] [--writers 8] [--searchers 4]
                                   [--in-process-writers] [--search-pause SECONDS]

The server is $MEMCTL_PG_DSN, or a throwaway cluster from the machine's binaries
(bench/pgserver.py). Targets: >= 50 acknowledged writes/s with 0 refusals and 0 lost; search
p50 under load <= 2.5x the file backend's idle in-process p50 (the server's idle p50 against the
same is reported beside it); identical top 10.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pgserver import server_dsn, store_config  # noqa: E402
from retrieval import DEFAULT_BENCH, locomo_sets, memctl_command  # noqa: E402
from writes import WRITER  # noqa: E402  (the same writer loop as the file backend's bench)

WRITER_IN_PROCESS = r"""
import io, json, sys, time
from contextlib import redirect_stderr, redirect_stdout
from memctl.cli.lean import run as lean_run
from memctl.cli.startup import prepare_process
def main(args):  # what the console script (memctl.entry) runs, less the process start and exec
    code = lean_run(prepare_process(args))
    if code is None:
        from memctl.cli.app import main as full_main
        full_main(args)
    sys.exit(code)
memctl, root, seconds, worker = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
end = time.monotonic() + seconds
acked, refused, failed, i = [], 0, 0, 0
while time.monotonic() < end:
    i += 1
    out, code = io.StringIO(), 0
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        try:
            main(["--root", root, "remember", f"writer {worker} fact {i} about node n{i:05d}", "--type", "event",
                  "--wait", "10"])
        except SystemExit as exit_:
            code = exit_.code or 0
    if code == 0:
        acked.append(out.getvalue().strip())
    elif code == 75:
        refused += 1
    else:
        failed += 1
print(json.dumps([acked, refused, failed]))
"""

SEARCHER = r"""
import json, os, sys, time
from pathlib import Path
from memctl.core.config import load_settings
from memctl.recall.indexing.index import IndexOptions
from memctl.recall.search import Searcher, request_from_settings
root, seconds, queries = Path(sys.argv[1]), float(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text())
pause = float(sys.argv[4])
settings = load_settings(root)
searcher = Searcher(settings.layout, IndexOptions.from_settings(settings), refresh=False)
def server_cpu():  # the CPU seconds of this searcher's server backend (a local server), else 0
    try:
        fields = open(f"/proc/{searcher.store.db.info.backend_pid}/stat").read().rsplit(")", 1)[1].split()
    except (AttributeError, OSError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
cpu_before, server_before = time.process_time(), server_cpu()
samples, i, end = [], 0, time.monotonic() + seconds
once = seconds <= 0
while once or time.monotonic() < end:
    query = queries[i % len(queries)]
    i += 1
    started = time.perf_counter()
    hits = searcher.search(request_from_settings(settings, query, k=10, layers="L5,L6"))
    samples.append([time.perf_counter() - started, [h.ref for h in hits]])
    time.sleep(pause)
    if once and i == len(queries):
        break
cpu = [time.process_time() - cpu_before, server_cpu() - server_before]
searcher.close()
print(json.dumps({"samples": samples, "cpu": cpu}))
"""


def environment(dsn: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update({"LANG": "C.UTF-8", "NO_COLOR": "1"})
    if dsn:
        env["MEMCTL_PG_DSN"] = dsn
    return env


def build(root: Path, docs: list[dict], env: dict, config: str) -> None:
    cmd = memctl_command()
    subprocess.run([*cmd, "--root", str(root), "init"], check=True, capture_output=True, env=env)
    # the writes alone are measured: no background dream started by a growing L5
    (root / "memctl.toml").write_text("[dream]\nauto_trigger_entries = 100000000\n" + config, encoding="utf-8")
    if config:
        subprocess.run([*cmd, "--root", str(root), "init"], check=True, capture_output=True, env=env)
    items = root.parent / "items.jsonl"
    items.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    subprocess.run([*cmd, "--root", str(root), "import", str(items)], check=True, capture_output=True, env=env)
    subprocess.run([*cmd, "--root", str(root), "index", "refresh"], check=True, capture_output=True, env=env)


def searcher(root: Path, seconds: float, queries: Path, env: dict, pause: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SEARCHER, str(root), str(seconds), str(queries), str(pause)],
                            stdout=subprocess.PIPE, text=True, env=env)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1), "p95_ms": round(p95 * 1000, 1),
            "searches": len(ordered)}


def active_ids(root: Path, env: dict) -> set[str]:
    """The ids in L5 as the memory's backend has them (`memctl export` for the server's)."""
    export = root.parent / "export"
    if "MEMCTL_PG_DSN" in env:
        export.mkdir(exist_ok=True)
        done = subprocess.run([*memctl_command(), "--root", str(root), "export", "--to", str(export)],
                              capture_output=True, env=env)
        if done.returncode != 0:
            sys.exit(f"memctl export failed: {done.stderr.decode()}")
        path = export / "long_term.jsonl"
    else:
        path = root / "long_term.jsonl"
    found = set()
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                found.add(json.loads(line)["id"])
            except (ValueError, KeyError):
                pass
    return found


def under_load(root: Path, env: dict, queries: Path, args) -> dict:
    started = time.perf_counter()
    memctl = memctl_command()[0]
    loop = WRITER_IN_PROCESS if args.in_process_writers else WRITER
    write_procs = [subprocess.Popen([sys.executable, "-c", loop, memctl, str(root), str(args.seconds), str(w)],
                                    stdout=subprocess.PIPE, text=True, env=env) for w in range(args.writers)]
    search_procs = [searcher(root, args.seconds, queries, env, args.search_pause) for _ in range(args.searchers)]
    outputs = [json.loads(p.communicate()[0]) for p in write_procs]
    elapsed = time.perf_counter() - started
    samples = [s for p in search_procs for s, _ in json.loads(p.communicate()[0])["samples"]]
    acked = [entry_id for ids, _, _ in outputs for entry_id in ids]
    present = active_ids(root, env)
    return {"seconds": round(elapsed, 1), "acknowledged": len(acked), "acked_per_s": round(len(acked) / elapsed, 1),
            "refusals": sum(o[1] for o in outputs), "failures": sum(o[2] for o in outputs),
            "lost": sum(1 for i in acked if i not in present), "search_under_load": percentiles(samples)}


IDLE_PASSES = 2  # idle searcher processes per backend, one pass through the questions each


def idle_search(root: Path, env: dict, queries: Path) -> dict:
    proc = searcher(root, 0, queries, env)
    return json.loads(proc.communicate()[0])


def cpu_per_search(runs: list[dict]) -> dict[str, float]:
    """The searcher's own CPU and its server backend's (0 on files), ms per search: what the
    machine's load does not inflate the way it does wall time."""
    searches = sum(len(run["samples"]) for run in runs)
    client, server = (sum(run["cpu"][n] for run in runs) * 1000 / searches for n in (0, 1))
    return {"client_ms": round(client, 2), "server_ms": round(server, 2), "total_ms": round(client + server, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--searchers", type=int, default=4)
    parser.add_argument("--in-process-writers", action="store_true",
                        help="each writer calls the console script's entry point (the lean write path, "
                             "memctl.cli.writes) in a loop instead of one `memctl remember` process per write "
                             "(the cost of the write, not of starting Python)")
    parser.add_argument("--search-pause", type=float, default=0.0, help="seconds each searcher waits between searches")
    args = parser.parse_args()
    docs, questions = [], []
    for _, set_docs, set_questions in locomo_sets(args.bench_dir / "locomo" / "locomo_dev.json"):
        docs += set_docs
        questions += [q["query"] for q in set_questions]
    with server_dsn() as dsn, tempfile.TemporaryDirectory(prefix="memctl-team-") as tmp:
        queries = Path(tmp) / "queries.json"
        queries.write_text(json.dumps(questions, ensure_ascii=False), encoding="utf-8")
        memories = {"files": (Path(tmp) / "files" / "memory", environment(), ""),
                    "postgres": (Path(tmp) / "server" / "memory", environment(dsn),
                                 store_config(f"team{os.getpid()}"))}
        for backend, (root, env, config) in memories.items():
            root.parent.mkdir(parents=True)
            build(root, docs, env, config)
        # both backends measured the same way: after both builds (the server's background work
        # after its import must not land on one side only), alternating, IDLE_PASSES each
        idle = {backend: [] for backend in memories}
        for _ in range(IDLE_PASSES):
            for backend, (root, env, _) in memories.items():
                idle[backend].append(idle_search(root, env, queries))
        same = sum(a[1] == b[1] for a, b in zip(idle["files"][0]["samples"], idle["postgres"][0]["samples"]))
        report = {"options": {k: v for k, v in vars(args).items() if k != "bench_dir"}, "items": len(docs), "questions": len(questions),
                  "identical_top10": f"{same}/{len(questions)}",
                  "idle_in_process": {b: percentiles([s for run in v for s, _ in run["samples"]])
                                      for b, v in idle.items()},
                  "idle_cpu_per_search": {b: cpu_per_search(v) for b, v in idle.items()},
                  "idle_load_avg_1m": round(os.getloadavg()[0], 2)}
        for backend, (root, env, _) in memories.items():
            report[backend] = under_load(root, env, queries, args)
            report[backend]["load_avg_1m"] = round(os.getloadavg()[0], 2)
        files_p50 = report["idle_in_process"]["files"]["p50_ms"]
        report["postgres_p50_under_load_vs_files_idle_p50"] = round(
            report["postgres"]["search_under_load"]["p50_ms"] / files_p50, 2)
        report["postgres_idle_p50_vs_files_idle_p50"] = round(
            report["idle_in_process"]["postgres"]["p50_ms"] / files_p50, 2)
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
