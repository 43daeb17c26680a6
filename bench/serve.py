#!/usr/bin/env python3
"""Concurrent agents against one files memory: through `memctl serve --http` and through
`memctl` processes, in the same run.

Each agent loops for --seconds: a `remember` of a new fact, then a `search` for a word of an
earlier one. Over HTTP an agent is a thread with its own connection per request (curl-shaped,
http.client) against one `memctl serve --http 0` ([serve] rate_per_minute raised: the load is
measured, not the limit); as processes, a thread running `memctl
remember --wait 10 …` and `memctl search …` one after another (the resident writer as a user
gets it). Reported per mode and agent count: acknowledged writes/s, p50/p99 of remember and of
search in ms, refused (a non-200 answer or a non-zero exit other than search's 1), lost
(acknowledged ids missing from L5 afterwards).

    nice -n 10 .venv/bin/python bench/serve.py                      # 8 and 32 agents, 10 s each
    nice -n 10 .venv/bin/python bench/serve.py --agents 8 --seconds 5 --seed-entries 500
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WORDS = ("deploy backup invoice meeting editor staging cluster sprint budget review 周会 部署 备份 预算 "
         "编辑器 会议 发布 日志").split()
MEMCTL = str(Path(sys.executable).with_name("memctl"))


def env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")},
            "LANG": "C.UTF-8", "PYTHONUTF8": "1", "NO_COLOR": "1"}


def fact(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)} {rng.choice(WORDS)} note {rng.getrandbits(64):016x}"


def make_memory(folder: Path, seed_entries: int) -> Path:
    root = folder / "memory"
    subprocess.run([MEMCTL, "--root", str(root), "init"], check=True, capture_output=True, env=env())
    rng = random.Random(7)
    lines = "".join(json.dumps({"text": fact(rng), "type": "event"}) + "\n" for _ in range(seed_entries))
    subprocess.run([MEMCTL, "--root", str(root), "import", "-", "--layer", "L5"], input=lines.encode(),
                   check=True, capture_output=True, env=env())
    return root


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.remember: list[float] = []
        self.search: list[float] = []
        self.refused = 0
        self.acked: list[str] = []

    def note(self, kind: str, seconds: float, ok: bool, entry_id: str = "") -> None:
        with self.lock:
            (self.remember if kind == "remember" else self.search).append(seconds * 1000)
            if not ok:
                self.refused += 1
            elif entry_id:
                self.acked.append(entry_id)


# --- over HTTP


def start_server(root: Path) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([MEMCTL, "--root", str(root), "serve", "--http", "0"], stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, env=env())
    seen, deadline = b"", time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([process.stderr], [], [], 0.5)[0]:
            seen += process.stderr.read1(4096)
            found = re.search(rb"127\.0\.0\.1:(\d+)", seen)
            if found:
                return process, int(found.group(1))
    process.kill()
    raise SystemExit(f"memctl serve did not start: {seen!r}")


def post(port: int, key: str, operation: str, body: dict) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", f"/v1/{operation}", json.dumps(body).encode(),
                           {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def http_agent(port: int, key: str, until: float, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        started = time.perf_counter()
        status, body = post(port, key, "remember", {"text": fact(rng)})
        tally.note("remember", time.perf_counter() - started, status == 200, body.get("id", ""))
        started = time.perf_counter()
        status, _ = post(port, key, "search", {"query": rng.choice(WORDS)})
        tally.note("search", time.perf_counter() - started, status == 200)


# --- as memctl processes


def process_agent(root: Path, until: float, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        started = time.perf_counter()
        done = subprocess.run([MEMCTL, "--root", str(root), "remember", "--type", "event", "--wait", "10", "--json",
                               fact(rng)], capture_output=True, env=env())
        entry_id = json.loads(done.stdout).get("id", "") if done.returncode == 0 and done.stdout else ""
        tally.note("remember", time.perf_counter() - started, done.returncode == 0, entry_id)
        started = time.perf_counter()
        done = subprocess.run([MEMCTL, "--root", str(root), "search", rng.choice(WORDS)], capture_output=True,
                              env=env())
        tally.note("search", time.perf_counter() - started, done.returncode in (0, 1))


def l5_ids(root: Path) -> set[str]:
    ids = set()
    for line in (root / "long_term.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            pass
    return ids


def run_load(mode: str, agents: int, seconds: float, seed_entries: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="memctl-serve-bench-") as folder:
        root = make_memory(Path(folder), seed_entries)
        tally = Tally()
        server = None
        if mode == "http":
            with open(root / "memctl.toml", "a", encoding="utf-8") as handle:  # the load, not the limit, measured
                handle.write("\n[serve]\nrate_per_minute = 1000000\n")
            keys = [subprocess.run([MEMCTL, "--root", str(root), "keys", "add", f"agent{n}", "--scope", "write"],
                                   capture_output=True, check=True, env=env()).stdout.decode().strip()
                    for n in range(agents)]
            server, port = start_server(root)
        until = time.monotonic() + seconds
        started = time.monotonic()
        threads = [threading.Thread(target=http_agent, args=(port, keys[n], until, n, tally)) if mode == "http"
                   else threading.Thread(target=process_agent, args=(root, until, n, tally)) for n in range(agents)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        lost = len(set(tally.acked) - l5_ids(root))
        return {"mode": mode, "agents": agents, "seconds": round(elapsed, 1), "writes": len(tally.acked),
                "writes_per_s": round(len(tally.acked) / elapsed, 1),
                "remember_p50_ms": percentile(tally.remember, 50), "remember_p99_ms": percentile(tally.remember, 99),
                "search_p50_ms": percentile(tally.search, 50), "search_p99_ms": percentile(tally.search, 99),
                "searches": len(tally.search), "refused": tally.refused, "lost": lost}


def percentile(values: list[float], pct: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed-entries", type=int, default=2000)
    parser.add_argument("--modes", nargs="+", default=["http", "processes"], choices=["http", "processes"])
    args = parser.parse_args()
    rows = []
    for agents in args.agents:
        for mode in args.modes:
            rows.append(run_load(mode, agents, args.seconds, args.seed_entries))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print("| mode | agents | writes/s | remember p50 / p99 ms | search p50 / p99 ms | searches | refused | lost |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['mode']} | {row['agents']} | {row['writes_per_s']} | {row['remember_p50_ms']} / "
              f"{row['remember_p99_ms']} | {row['search_p50_ms']} / {row['search_p99_ms']} | {row['searches']} | "
              f"{row['refused']} | {row['lost']} |")


if __name__ == "__main__":
    main()
