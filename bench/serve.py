#!/usr/bin/env python3
"""Concurrent agents against one memory: through `memctl serve --http`, through `memctl`
processes and (on PostgreSQL) as raw inserts, in the same run.

Each agent loops for --seconds. With --load mixed (the default) a loop is a `remember` of a new
fact, then a `search` for a word of an earlier one; with --load writes it is a `remember` alone
(the writes/s the service sustains); with --load searches a `search` alone. Over HTTP an agent is
a thread with its own connection per request (curl-shaped, http.client) against one `memctl
serve --http 0` ([serve] rate_per_minute raised: the load is measured, not the limit); as
processes, a thread running `memctl remember --wait 10 …` and `memctl search …` one after another
(the resident writer as a user gets it); `raw` (PostgreSQL only) is a thread per agent with its
own connection inserting one row per transaction into a plain table: what the server itself
does, the ceiling. Reported per mode and agent count: acknowledged writes/s, p50/p99 of remember
and of search in ms, refused (a non-200 answer or a non-zero exit other than search's 1), lost
(acknowledged ids missing from L5 afterwards), and on PostgreSQL the most connections the server
held at once (`pg_stat_activity`, sampled every 0.2 s). Beside them, the CPU each side used while
the load ran, in cores (CPU seconds per second): this bench's own process (the agents' threads:
on a small machine the client competes with the service for the same cores), the `memctl serve`
process, and the PostgreSQL server (the postmaster and its backends).

The PostgreSQL cluster is a throwaway one (tests/pgcluster.py) with PostgreSQL's default
`max_connections = 100` and `fsync = on` (acknowledged = committed to disk, as on files).

    nice -n 5 .venv/bin/python bench/serve.py                       # 8 and 32 agents, 10 s each, files
    nice -n 5 .venv/bin/python bench/serve.py --stores files postgres --modes http processes raw
    nice -n 5 .venv/bin/python bench/serve.py --stores postgres --modes http --load writes --agents 8 32 100
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


DSN = {"value": ""}  # the throwaway PostgreSQL of --stores postgres


def env() -> dict:
    extra = {"MEMCTL_PG_DSN": DSN["value"]} if DSN["value"] else {}
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")},
            "LANG": "C.UTF-8", "PYTHONUTF8": "1", "NO_COLOR": "1", **extra}


def fact(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)} {rng.choice(WORDS)} note {rng.getrandbits(64):016x}"


def make_memory(folder: Path, seed_entries: int) -> Path:
    root = folder / "memory"
    subprocess.run([MEMCTL, "--root", str(root), "init"], check=True, capture_output=True, env=env())
    if DSN["value"]:  # a team memory: its own schema on the server, reached only through memctl
        with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
            handle.write(f'\n[store]\nbackend = "postgres"\nmemory = "b{random.getrandbits(40):010x}"\n')
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


def http_agent(port: int, key: str, until: float, seed: int, tally: Tally, load: str) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        if load != "searches":
            started = time.perf_counter()
            status, body = post(port, key, "remember", {"text": fact(rng)})
            tally.note("remember", time.perf_counter() - started, status == 200, body.get("id", ""))
        if load != "writes":
            started = time.perf_counter()
            status, _ = post(port, key, "search", {"query": rng.choice(WORDS)})
            tally.note("search", time.perf_counter() - started, status == 200)


# --- as memctl processes


def process_agent(root: Path, until: float, seed: int, tally: Tally, load: str) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        if load != "searches":
            started = time.perf_counter()
            done = subprocess.run([MEMCTL, "--root", str(root), "remember", "--type", "event", "--wait", "10",
                                   "--json", fact(rng)], capture_output=True, env=env())
            entry_id = json.loads(done.stdout).get("id", "") if done.returncode == 0 and done.stdout else ""
            tally.note("remember", time.perf_counter() - started, done.returncode == 0, entry_id)
        if load == "writes":
            continue
        started = time.perf_counter()
        done = subprocess.run([MEMCTL, "--root", str(root), "search", rng.choice(WORDS)], capture_output=True,
                              env=env())
        tally.note("search", time.perf_counter() - started, done.returncode in (0, 1))


# --- raw PostgreSQL inserts: the server's own ceiling


def raw_agent(until: float, seed: int, tally: Tally, load: str) -> None:
    import psycopg

    rng = random.Random(seed)
    try:
        connection = psycopg.connect(DSN["value"], autocommit=True)
    except psycopg.OperationalError:  # past max_connections: this agent is refused outright
        tally.note("remember", 0.0, False)
        return
    with connection:
        while time.monotonic() < until:
            started = time.perf_counter()
            text = fact(rng)
            try:
                connection.execute("INSERT INTO bench_raw (text) VALUES (%s)", (text,))
                tally.note("remember", time.perf_counter() - started, True, text)
            except psycopg.Error:
                tally.note("remember", time.perf_counter() - started, False)


def raw_table() -> None:
    import psycopg

    with psycopg.connect(DSN["value"], autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS bench_raw")
        connection.execute("CREATE TABLE bench_raw (id bigserial PRIMARY KEY, text text NOT NULL)")


def raw_texts() -> set[str]:
    import psycopg

    with psycopg.connect(DSN["value"], autocommit=True) as connection:
        return {text for (text,) in connection.execute("SELECT text FROM bench_raw")}


class ConnectionPeak:
    """The most connections the server held at once while the load ran (0 on files)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ConnectionPeak:
        if DSN["value"]:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(DSN["value"], autocommit=True) as connection:
            while not self._stop.wait(0.2):
                count = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                           "'client backend'").fetchone()[0]
                self.peak = max(self.peak, int(count) - 1)  # not this sampler's own


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a process (Linux /proc; 0 elsewhere), with its reaped children's when asked."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / TICKS


def server_cpu(postmaster: int) -> float:
    """The PostgreSQL server's CPU seconds: the postmaster, its exited backends and the live ones."""
    if not postmaster:
        return 0.0
    total = process_cpu(postmaster, children=True)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == postmaster:
            total += process_cpu(int(stat.parent.name))
    return total


def postmaster_pid() -> int:
    if not DSN["value"] or not os.path.exists("/proc/self/stat"):
        return 0
    import psycopg

    with psycopg.connect(DSN["value"], autocommit=True) as connection:
        backend = connection.execute("SELECT pg_backend_pid()").fetchone()[0]
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])


class CpuUse:
    """The CPU seconds the bench itself, the service and the PostgreSQL server used between
    `start()` and `stop()`, in cores (seconds per second of the load)."""

    def __init__(self, service_pid: int) -> None:
        self.service_pid, self.postmaster = service_pid, postmaster_pid()

    def _now(self) -> tuple[float, ...]:
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF)
        service = process_cpu(self.service_pid) if self.service_pid else 0.0
        return time.monotonic(), own.ru_utime + own.ru_stime, service, server_cpu(self.postmaster)

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> dict:
        end = self._now()
        wall = max(end[0] - self._start[0], 1e-9)
        return {f"cpu_{name}_cores": round((end[n] - self._start[n]) / wall, 2)
                for n, name in enumerate(("bench", "service", "postgres"), start=1)}


def l5_ids(root: Path) -> set[str]:
    path = root / "long_term.jsonl"
    if DSN["value"]:  # the server's L5, as `memctl export` writes it
        subprocess.run([MEMCTL, "--root", str(root), "export", "--to", str(root.parent)], check=True,
                       capture_output=True, env=env())
        path = root.parent / "long_term.jsonl"
    ids = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            pass
    return ids


def run_load(mode: str, agents: int, seconds: float, seed_entries: int, load: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="memctl-serve-bench-") as folder:
        root = make_memory(Path(folder), seed_entries) if mode != "raw" else None
        tally = Tally()
        server = None
        if mode == "http":
            with open(root / "memctl.toml", "a", encoding="utf-8") as handle:  # the load, not the limit, measured
                handle.write("\n[serve]\nrate_per_minute = 1000000\n")
            keys = [subprocess.run([MEMCTL, "--root", str(root), "keys", "add", f"agent{n}", "--scope", "write"],
                                   capture_output=True, check=True, env=env()).stdout.decode().strip()
                    for n in range(agents)]
            server, port = start_server(root)
        if mode == "raw":
            raw_table()
        until = time.monotonic() + seconds
        started = time.monotonic()
        threads = []
        for n in range(agents):
            where = (port, keys[n]) if mode == "http" else (root,) if mode == "processes" else ()
            threads.append(threading.Thread(target=AGENTS[mode], args=(*where, until, n, tally, load)))
        cpu = CpuUse(server.pid if server is not None else 0)
        with ConnectionPeak() as connections:
            cpu.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            used = cpu.stop()
        elapsed = time.monotonic() - started
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        lost = len(set(tally.acked) - (raw_texts() if mode == "raw" else l5_ids(root)))
        return {"mode": mode, "store": "postgres" if DSN["value"] else "files", "load": load, "agents": agents,
                "seconds": round(elapsed, 1), "writes": len(tally.acked),
                "writes_per_s": round(len(tally.acked) / elapsed, 1),
                "remember_p50_ms": percentile(tally.remember, 50), "remember_p99_ms": percentile(tally.remember, 99),
                "search_p50_ms": percentile(tally.search, 50), "search_p99_ms": percentile(tally.search, 99),
                "searches": len(tally.search), "refused": tally.refused, "lost": lost,
                "server_connections_peak": connections.peak, **used}


AGENTS = {"http": http_agent, "processes": process_agent, "raw": raw_agent}


def percentile(values: list[float], pct: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))], 1)


def run_store(store: str, args) -> list[dict]:
    if store == "files":
        return run_all(args, store)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pgcluster import running_cluster

    with running_cluster(settings="-c fsync=on -c max_connections=100") as dsn:  # PostgreSQL's defaults
        DSN["value"] = dsn
        try:
            return run_all(args, store)
        finally:
            DSN["value"] = ""


def run_all(args, store: str) -> list[dict]:
    rows = []
    for agents in args.agents:
        for mode in args.modes:
            if mode == "raw" and store != "postgres":
                continue
            rows.append(run_load(mode, agents, args.seconds, args.seed_entries, args.load))
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed-entries", type=int, default=2000)
    parser.add_argument("--modes", nargs="+", default=["http", "processes"], choices=["http", "processes", "raw"],
                        help="raw: inserts straight into a plain table of the PostgreSQL store (skipped on files)")
    parser.add_argument("--load", default="mixed", choices=["mixed", "writes", "searches"],
                        help="an agent's loop: remember then search (mixed), remember alone, or search alone")
    parser.add_argument("--stores", nargs="+", default=["files"], choices=["files", "postgres"],
                        help="postgres: a throwaway cluster (tests/pgcluster.py), the memory a team memory on it")
    args = parser.parse_args()
    rows = []
    for store in args.stores:
        rows += run_store(store, args)
    print("| store | mode | load | agents | writes/s | remember p50 / p99 ms | search p50 / p99 ms | searches | "
          "refused | lost | server connections | CPU cores: bench / service / PostgreSQL |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['store']} | {row['mode']} | {row['load']} | {row['agents']} | {row['writes_per_s']} | "
              f"{row['remember_p50_ms']} / {row['remember_p99_ms']} | {row['search_p50_ms']} / {row['search_p99_ms']} | "
              f"{row['searches']} | {row['refused']} | {row['lost']} | {row['server_connections_peak']} | "
              f"{row['cpu_bench_cores']} / {row['cpu_service_cores']} / {row['cpu_postgres_cores']} |")


if __name__ == "__main__":
    main()
