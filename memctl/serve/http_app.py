"""The HTTP side of `memctl serve`: the JSON API (`POST /v1/<operation>`), `GET /health`,
`GET /openapi.json` and MCP's streamable HTTP at `/mcp`, in one Starlette app run by uvicorn.

Every request but /health and /openapi.json carries a key (`Authorization: Bearer KEY`,
memctl.serve.keys); the guard in front of the app refuses one without a valid key (401), past
its rate (429) or with a body declared too large (413) before the app reads anything.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memctl.core import jsoncodec
from memctl.core.errors import MemctlError
from memctl.serve import openapi
from memctl.serve.keys import KeyRefused
from memctl.serve.limits import BodyTooLarge, RateLimiter, RateLimited, body_in_time, check_declared_size
from memctl.serve.mcp_app import CheckedBodies, build as build_mcp, run_blocking
from memctl.serve.operations import Caller
from memctl.serve.service import Service, status_of

OPEN_PATHS = ("/health", "/openapi.json")


class JSONBody(JSONResponse):
    def render(self, content) -> bytes:
        return jsoncodec.dumps(content).encode("utf-8")


def error_response(error: BaseException) -> Response:
    status = status_of(error)
    headers = {}
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="memctl"'
    message = str(error) if isinstance(error, MemctlError) else "internal error; see the server's log"
    return JSONBody({"error": message, "status": status}, status_code=status, headers=headers)


class Guard:
    """ASGI middleware: the key, the rate and the declared size of every keyed request."""

    def __init__(self, app, service: Service, limiter: RateLimiter, max_body: int) -> None:
        self.app, self.service, self.limiter, self.max_body = app, service, limiter, max_body

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            key = self.service.keys.authenticate(request.headers.get("authorization"))
            self.limiter.take(key.name)
            check_declared_size(request.headers, self.max_body)
        except (MemctlError, ValueError) as refused:
            await error_response(refused)(scope, receive, send)
            return
        scope.setdefault("state", {})["memctl_caller"] = Caller(key.name, key.scope, key.namespace)
        await self.app(scope, receive, send)


def caller_of_mcp_request(service: Service):
    def caller_of(ctx) -> Caller:
        request = getattr(ctx, "request", None)
        if request is None:
            raise KeyRefused("MCP over HTTP needs a key")
        key = service.keys.authenticate(request.headers.get("authorization"))
        return Caller(key.name, key.scope, key.namespace)

    return caller_of


def routes(service: Service, max_body: int) -> list[Route]:
    async def health(request: Request) -> Response:
        return JSONBody({"ok": True, "writes": service.batcher.writes,
                         "batches": service.batcher.batches})

    async def describe(request: Request) -> Response:
        return JSONBody(openapi.describe(str(request.base_url).rstrip("/")))

    async def operation(request: Request) -> Response:
        try:
            body = await body_in_time(request, max_body, service.timeout)
            arguments = _json_object(body)
            caller = request.scope["state"]["memctl_caller"]
            name = request.path_params["operation"]
            if name == "remember":  # answered from the writer thread: no worker thread in between
                data = await service.remember_async(arguments, caller)
            else:
                data = await run_blocking(service, service.call, name, arguments, caller)
        except (MemctlError, BodyTooLarge) as exc:
            return error_response(exc)
        return JSONBody(data)

    return [Route("/health", health, methods=["GET"]), Route("/openapi.json", describe, methods=["GET"]),
            Route("/v1/{operation}", operation, methods=["POST"])]


def _json_object(body: bytes):
    from memctl.core.errors import UsageError

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the body is not UTF-8") from None
    if not text.strip():
        return {}
    try:
        return jsoncodec.loads(text)
    except (ValueError, RecursionError):
        raise UsageError("the body is not a JSON object") from None


def build_app(service: Service, host: str):
    settings = service.settings
    max_body = int(settings.get("serve", "max_body_bytes"))
    limiter = RateLimiter(int(settings.get("serve", "rate_per_minute")))
    server = build_mcp(service, caller_of_mcp_request(service))
    app = server.streamable_http_app(streamable_http_path="/mcp", max_request_body_size=max_body, host=host,
                                     custom_starlette_routes=routes(service, max_body))
    return Guard(CheckedBodies(app, "/mcp", max_body, service.timeout), service, limiter, max_body)


def serve_http(service: Service, host: str, port: int, on_ready=None) -> None:
    """Serve until SIGINT or SIGTERM; `on_ready(port)` once listening (the port chosen for 0)."""
    import uvicorn

    from memctl.serve.limits import connection_limit, guarded_protocol

    settings = service.settings
    listener = _listen(host, port)
    config = uvicorn.Config(build_app(service, host), log_level="warning",
                            http=guarded_protocol(float(settings.get("serve", "request_timeout"))),
                            limit_concurrency=connection_limit(int(settings.get("serve", "max_connections"))),
                            timeout_keep_alive=5, timeout_graceful_shutdown=5,  # an open MCP stream ends it
                            server_header=False, lifespan="on", access_log=False)
    if on_ready is not None:
        on_ready(listener.getsockname()[1])  # connections wait in the backlog until uvicorn accepts them
    uvicorn.Server(config).run(sockets=[listener])


def _listen(host: str, port: int):
    """The listening socket, bound here so that its port is known before uvicorn starts and a
    refusal (a port in use, an address not of this machine) is one line."""
    import socket

    from memctl.core.errors import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    return listener
