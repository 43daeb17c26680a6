"""Helpers for the `memctl serve` tests: the installed server as a real subprocess on
127.0.0.1, and curl-shaped requests to it (http.client, every wait bounded)."""

from __future__ import annotations

import http.client
import json
import re
import select
import subprocess
import time
from pathlib import Path

from conftest import clean_env, memctl_executable

START_TIMEOUT = 60.0


class Server:
    def __init__(self, root: Path, env: dict | None = None, args: tuple = ()) -> None:
        self.root = root
        self.process = subprocess.Popen([memctl_executable(), "--root", str(root), "serve", "--http", "0", *args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env=clean_env(**(env or {})))
        self.port = self._wait_for_port()

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stderr], [], [], 0.5)
            if ready:
                chunk = self.process.stderr.read1(4096)
                if not chunk:
                    break
                seen += chunk
                found = re.search(rb"http://127\.0\.0\.1:(\d+)", seen)
                if found:
                    return int(found.group(1))
        self.stop()
        raise AssertionError(f"memctl serve did not start: {seen.decode(errors='replace')}")

    def post(self, operation: str, body, key: str | None = None, raw: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict]:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        data = raw if raw is not None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        return self.request("POST", f"/v1/{operation}", data, sent)

    def request(self, method: str, path: str, data: bytes | None = None, headers: dict | None = None,
                timeout: float = 60) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=data, headers=headers or {})
            response = connection.getresponse()
            payload = response.read()
            return response.status, json.loads(payload) if payload else {}
        finally:
            connection.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        self.process.stderr.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def add_key(run, root: Path, name: str, scope: str, namespace: str = "") -> str:
    args = ["keys", "add", name, "--scope", scope] + (["--namespace", namespace] if namespace else [])
    done = run(*args, root=root)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def l5_lines(root: Path) -> list[dict]:
    path = root / "long_term.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
