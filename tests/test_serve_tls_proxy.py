"""The README's TLS example, run: nginx with the README's own `server` block (its ports, paths and
certificate swapped for the test's, nothing else) in front of the installed `memctl serve --http`
on loopback. Over HTTPS the JSON API answers, a request without a key is refused, and the
official MCP client runs a tool through the proxy (the MCP endpoint checks the Host header the
block sets). Needs nginx and openssl: `.ci/run` installs nginx where apt-get can; skipped with
the reason otherwise."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402  (the MCP SDK's HTTP client)
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from serve_helpers import Server, add_key, l5_lines  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"
WAIT_SECONDS = 30.0


def readme_nginx_block() -> str:
    found = re.search(r"```nginx\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert found, "README.md has no ```nginx block"
    return found.group(1)


def swapped(block: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in block, f"README's nginx block no longer says {old!r}"
        block = block.replace(old, new)
    return block


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "memory.crt", folder / "memory.key"
    done = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                           "-subj", "/CN=memory.test", "-addext", "subjectAltName=IP:127.0.0.1",
                           "-keyout", str(key), "-out", str(cert)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return cert, key


def nginx_config(folder: Path, server_block: str) -> Path:
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (folder / name).mkdir()
    user = "user root;\n" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
    config = folder / "nginx.conf"
    config.write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        "events { worker_connections 64; }\n"
        f"http {{\naccess_log off;\nclient_body_temp_path {folder}/body;\nproxy_temp_path {folder}/proxy;\n"
        f"fastcgi_temp_path {folder}/fastcgi;\nuwsgi_temp_path {folder}/uwsgi;\nscgi_temp_path {folder}/scgi;\n"
        f"{server_block}}}\n", encoding="utf-8")
    return config


def wait_for_tls(port: int, context: ssl.SSLContext, nginx: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        assert nginx.poll() is None, (folder / "error.log").read_text(errors="replace")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
                    context.wrap_socket(raw, server_hostname="127.0.0.1"):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("nginx did not answer TLS in time")


def https(port: int, context: ssl.SSLContext, path: str, body: bytes, headers: dict) -> tuple[int, bytes]:
    import http.client

    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=WAIT_SECONDS)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture
def tools():
    missing = [name for name in ("nginx", "openssl") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (.ci/run installs nginx with apt-get)")


def test_the_readmes_nginx_example_serves_memctl_over_tls(run, root, tmp_path, tools):
    import json

    run("init", root=root)
    key = add_key(run, root, "behind-proxy", "write")
    folder = tmp_path / "nginx"
    folder.mkdir()
    cert, private = self_signed(folder)
    tls_port = free_port()
    context = ssl.create_default_context(cafile=str(cert))
    with Server(root) as server:
        block = swapped(readme_nginx_block(), {
            "listen 443 ssl;": f"listen 127.0.0.1:{tls_port} ssl;",
            "/etc/ssl/memory.crt": str(cert),
            "/etc/ssl/memory.key": str(private),
            "127.0.0.1:8765": f"127.0.0.1:{server.port}",
        })
        nginx = subprocess.Popen(["nginx", "-p", str(folder), "-e", str(folder / "error.log"),
                                  "-c", str(nginx_config(folder, block))],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for_tls(tls_port, context, nginx, folder)
            auth = {"Authorization": f"Bearer {key}"}
            status, answer = https(tls_port, context, "/v1/remember",
                                   json.dumps({"text": "The proxy terminates TLS for 记忆服务"}).encode(), auth)
            assert status == 200, answer
            remembered = json.loads(answer)["id"]
            status, answer = https(tls_port, context, "/v1/search", b'{"query": "proxy TLS"}', auth)
            assert status == 200 and json.loads(answer)["hits"][0]["id"] == remembered
            status, _ = https(tls_port, context, "/v1/search", b'{"query": "proxy"}', {})
            assert status == 401

            async def through_mcp() -> str:
                with anyio.fail_after(WAIT_SECONDS * 2):
                    async with httpx2.AsyncClient(headers=auth, verify=context,
                                                  timeout=httpx2.Timeout(WAIT_SECONDS)) as http, \
                            streamable_http_client(f"https://127.0.0.1:{tls_port}/mcp", http_client=http) as (read, write), \
                            ClientSession(read, write) as session:
                        await session.initialize()
                        result = await session.call_tool("search", {"query": "记忆服务"})
                        return result.content[0].text

            assert remembered in anyio.run(through_mcp)
        finally:
            nginx.terminate()
            try:
                nginx.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait(timeout=WAIT_SECONDS)
    assert [entry["key"] for entry in l5_lines(root)] == ["behind-proxy"]
