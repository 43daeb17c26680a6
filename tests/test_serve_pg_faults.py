"""`memctl serve` on a team memory under faults (issue #30, must-show 4): the service SIGKILLed
mid-batch, PostgreSQL restarted, and PostgreSQL frozen (SIGSTOP) while agents write. Every
acknowledged write is in L5 once; an unacknowledged one once or not at all; every client's
wait ends within its bound; the service serves again once the server is back."""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
import uuid
from collections import Counter

import pytest

pytest.importorskip("mcp")
pytest.importorskip("psycopg")

from serve_helpers import Server, add_key  # noqa: E402
from test_pg_bounded import frozen, own_cluster  # noqa: E402,F401 — the fixture, used by name

CLIENTS = 8
PER_CLIENT = 40
BOUND = 3  # $MEMCTL_PG_TIMEOUT of the service
CEILING = 120  # the test's bound on every client


def team_memory(run, root, dsn: str) -> dict:
    env = {"MEMCTL_PG_DSN": dsn, "MEMCTL_PG_TIMEOUT": str(BOUND)}
    assert run("init", root=root).returncode == 0
    with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
        handle.write(f'\n[store]\nbackend = "postgres"\nmemory = "t{uuid.uuid4().hex[:12]}"\n'
                     "[serve]\nrate_per_minute = 1000000\nrequest_timeout = 20\n")
    done = run("init", root=root, env=env)
    assert done.returncode == 0, done.stderr
    return env


def server_l5(run, root, env, tmp_path) -> Counter:
    """The texts of the server's L5, as `memctl export` writes them."""
    import json

    out = tmp_path / f"export-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    done = run("export", "--to", str(out), root=root, env=env)
    assert done.returncode == 0, done.stderr
    return Counter(json.loads(line)["text"] for line in (out / "long_term.jsonl").read_text().splitlines()
                   if line.strip())


class Clients:
    """CLIENTS threads each remembering PER_CLIENT new facts (or until `stop`), every request
    bounded; what was acknowledged, attempted, refused, and how long the slowest answer took."""

    def __init__(self, server: Server, key: str, stop: threading.Event | None = None) -> None:
        self.server, self.key, self.stop = server, key, stop or threading.Event()
        self.acknowledged: list[str] = []
        self.attempted: list[str] = []
        self.failed: list[int] = []
        self.slowest = 0.0
        self.threads = [threading.Thread(target=self._hammer) for _ in range(CLIENTS)]

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for thread in self.threads:
            thread.join(timeout=CEILING)
        assert not any(thread.is_alive() for thread in self.threads), "a client hung"

    def _hammer(self) -> None:
        for _ in range(PER_CLIENT):
            if self.stop.is_set():
                return
            text = f"note {uuid.uuid4().hex}"
            self.attempted.append(text)
            started = time.monotonic()
            try:
                status, _ = self.server.post("remember", {"text": text}, self.key)
            except (OSError, http.client.HTTPException, ValueError):
                return  # the service died under this request: not acknowledged
            finally:
                self.slowest = max(self.slowest, time.monotonic() - started)
            if status == 200:
                self.acknowledged.append(text)
            else:
                self.failed.append(status)


def assert_kept(texts: Counter, clients: Clients) -> None:
    for text in clients.acknowledged:
        assert texts[text] == 1, f"acknowledged write lost or doubled: {text}"
    assert all(texts[text] <= 1 for text in clients.attempted)


@pytest.mark.parametrize("fault", [
    {"MEMCTL_FAULT_AT": "serve: request written"},  # a batch's first remember made, nothing sent
    {"MEMCTL_FAULT_PG_PAUSE": "pg-append"},  # the batch's rows sent, not committed
    {"MEMCTL_FAULT_PG_PAUSE": "pg-commit"},  # about to commit
    {"MEMCTL_FAULT_AT": "serve: batch synced, not answered"},  # committed, nobody told
    {"MEMCTL_FAULT_AFTER": "97"}, {"MEMCTL_FAULT_AFTER": "233"},  # any step of a later batch
])
def test_the_service_killed_mid_batch_on_postgres_loses_no_acknowledged_write(run, root, tmp_path, pg_server, fault):
    env = team_memory(run, root, pg_server)
    key = add_key(run, root, "w", "write")
    marker = tmp_path / "paused"
    if "MEMCTL_FAULT_PG_PAUSE" in fault:  # the writer holds its transaction open there: killed by the test
        fault = {"MEMCTL_FAULT_PG_PAUSE": f"{fault['MEMCTL_FAULT_PG_PAUSE']}:{marker}"}
    with Server(root, env={**env, **fault}) as server:
        with Clients(server, key) as clients:
            if "MEMCTL_FAULT_PG_PAUSE" in fault:
                deadline = time.monotonic() + CEILING
                while not marker.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                os.kill(server.process.pid, signal.SIGKILL)
        assert server.process.wait(timeout=60) == -9  # killed, not stopped
    with Server(root, env=env) as restarted:
        assert restarted.post("remember", {"text": "after the restart"}, key)[0] == 200
    texts = server_l5(run, root, env, tmp_path)
    assert_kept(texts, clients)
    assert len(clients.acknowledged) < len(clients.attempted)  # the kill came mid-run
    assert texts["after the restart"] == 1


def test_postgres_restarted_under_load_costs_bounded_errors_and_loses_nothing(run, root, tmp_path, own_cluster):
    env = team_memory(run, root, own_cluster.dsn)
    key = add_key(run, root, "w", "write")
    with Server(root, env=env) as server:
        with Clients(server, key) as clients:
            while len(clients.acknowledged) < 20:
                time.sleep(0.05)
            own_cluster.restart()  # an immediate stop (a crash), then the same server again
        assert clients.slowest < 20 + BOUND  # no answer waited past the request timeout
        status, _ = server.post("remember", {"text": "after the server came back"}, key)
        assert status == 200  # the service connects again by itself
        status, found = server.post("search", {"query": "server came back"}, key)
        assert status == 200 and found["hits"], found
    texts = server_l5(run, root, env, tmp_path)
    assert_kept(texts, clients)
    assert texts["after the server came back"] == 1


def test_the_first_calls_after_a_postgres_restart_are_answered(run, root, tmp_path, own_cluster):
    """The service's connections all died with the server; the first remember finds its own
    lost at the start of the batch, opens another and writes the batch then (it had not been
    acknowledged, nothing of it was sent): 200, not 503. The same for a search and a forget."""
    env = team_memory(run, root, own_cluster.dsn)
    key = add_key(run, root, "w", "write")
    with Server(root, env=env) as server:
        status, before = server.post("remember", {"text": "written before the restart"}, key)
        assert status == 200, before
        assert server.post("search", {"query": "written before"}, key)[0] == 200
        own_cluster.restart()  # an immediate stop (a crash), then the same server again, idle
        status, body = server.post("remember", {"text": "the first remember after the restart"}, key)
        assert status == 200, body
        status, found = server.post("search", {"query": "first remember after the restart"}, key)
        assert status == 200 and found["hits"], found
        own_cluster.restart()
        status, body = server.post("forget", {"ref": before["id"]}, key)
        assert status == 200, body
    texts = server_l5(run, root, env, tmp_path)
    assert texts["the first remember after the restart"] == 1
    assert texts["written before the restart"] == 0  # forgotten


def test_postgres_frozen_under_load_ends_each_wait_within_the_bound(run, root, tmp_path, own_cluster):
    env = team_memory(run, root, own_cluster.dsn)
    key = add_key(run, root, "w", "write")
    with Server(root, env=env) as server:
        stop = threading.Event()
        with Clients(server, key, stop) as clients:
            while len(clients.acknowledged) < 20:
                time.sleep(0.05)
            with frozen(own_cluster):  # a hung host: nothing answers, nothing refuses
                frozen_at = time.monotonic()
                while not clients.failed and time.monotonic() - frozen_at < 4 * BOUND:
                    time.sleep(0.1)
                time.sleep(BOUND)
            stop.set()
        assert clients.failed and set(clients.failed) <= {500, 503, 504}, clients.failed
        assert clients.slowest < 20 + BOUND
        status, _ = server.post("remember", {"text": "after the thaw"}, key)
        assert status == 200
    texts = server_l5(run, root, env, tmp_path)
    assert_kept(texts, clients)
    assert texts["after the thaw"] == 1
