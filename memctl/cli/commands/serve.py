"""`memctl serve` (MCP over stdio or HTTP, and the HTTP JSON API) and `memctl keys` (design.md §9b).

Both are thin: the server is memctl.serve (its dependencies in the `serve` extra), the key
file memctl.serve.keys.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Optional

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.errors import UsageError

keys_app = typer.Typer(help="Per-agent keys for `memctl serve --http`: scope read|write|admin, optional namespace.",
                       no_args_is_help=True, add_completion=False, rich_markup_mode=None)

LOOPBACK = "127.0.0.1"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
    app.add_typer(keys_app, name="keys")


def serve_cmd(
    ctx: typer.Context,
    http: Optional[str] = typer.Option(None, "--http", metavar="[HOST:]PORT",
                                       help="Serve over HTTP instead of stdio: MCP at /mcp, the JSON API at /v1/<op>, "
                                            "GET /health, GET /openapi.json. HOST is 127.0.0.1 unless --listen says "
                                            "why it must be another; PORT 0 picks a free one."),
    listen: Optional[str] = typer.Option(None, "--listen", metavar="REASON",
                                         help="Allow a HOST other than loopback, saying why (e.g. 'behind the TLS "
                                              "reverse proxy on this host'); printed at start. Keys travel in "
                                              "clear over plain HTTP: put TLS in front (README)."),
) -> None:
    """One long-lived process serving this memory to agents: MCP over stdio (the default; the
    caller is the local user), or with --http, MCP over streamable HTTP and a JSON API where
    every request carries a key (`memctl keys add`). Writes from all clients are batched under
    one lock hold and one fsync; the limits are [serve] max_body_bytes, rate_per_minute,
    request_timeout and max_connections."""
    settings = state(ctx).settings
    host, port = _address(http, listen) if http is not None else (None, None)
    try:
        from memctl.serve.service import Service
    except ImportError as exc:
        raise UsageError(f"memctl serve needs its extra: pip install 'memctl[serve]' ({exc.name} is missing)") from None
    service = Service(settings).start()
    try:
        if host is None:
            from memctl.serve.mcp_app import serve_stdio

            serve_stdio(service)
            return
        from memctl.serve.http_app import serve_http

        if listen:
            render.message(f"memctl serve: listening on {host} beyond this machine: {listen}")
        serve_http(service, host, port, on_ready=lambda bound: _announce(host, bound))
    finally:
        service.stop()


def _announce(host: str, port: int) -> None:
    shown = f"[{host}]" if ":" in host else host
    render.message(f"memctl serve: http://{shown}:{port} (MCP at /mcp, JSON API at /v1/<operation>)")
    sys.stderr.flush()


def _address(text: str, listen: Optional[str]) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else LOOPBACK
    port_text = port_text if sep else text
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--http takes [HOST:]PORT with PORT 0-65535, got {text!r}")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not (listen or "").strip():
        raise UsageError(f"{host} is not this machine alone: pass --listen REASON to serve beyond it "
                         "(and put TLS in front: README, 'memctl serve behind a reverse proxy')")
    return host, int(port_text)


@keys_app.command("add")
def keys_add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Who the key is for (an agent's name): letters, digits, '.', '_', '-'."),
    scope: str = typer.Option(..., "--scope", help="read (search, get, compose, recent), write (also remember, "
                                                   "forget, restore) or admin (all of it)."),
    namespace: str = typer.Option("", "--namespace", help="Bind the key to one namespace: its writes go there and "
                                                          "it sees only the entries there."),
) -> None:
    """Make a key and print it on stdout, once: only its sha256 is kept (.serve/keys.json)."""
    from memctl.serve.keys import add_key

    root = state(ctx).root
    token = add_key(root, name, scope, namespace)
    render.raw_bytes((token + "\n").encode("ascii"), exact=True)  # the key itself: redaction would mask it
    render.message(f"key {name!r} added (scope {scope}{', namespace ' + namespace if namespace else ''}); "
                   "it is shown only now")


@keys_app.command("list")
def keys_list(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: name, scope, namespace, created, revoked."),
) -> None:
    """The keys: name, scope, namespace, when made, when revoked (never the key)."""
    from memctl.serve.keys import read_keys

    for key in read_keys(state(ctx).root):
        if json_out:
            render.json_line(key.to_dict())
        else:
            render.line("\t".join((key.name, key.scope, key.namespace or "-", key.created,
                                   f"revoked {key.revoked}" if key.revoked else "active")))


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The key's name."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Revoke a key: a running server refuses it from its next request."""
    from memctl.serve.keys import revoke_key

    key = revoke_key(state(ctx).root, name)
    if json_out:
        render.json_line(key.to_dict())
    else:
        render.message(f"key {key.name!r} revoked at {key.revoked}")
