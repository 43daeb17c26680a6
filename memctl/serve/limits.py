"""How `memctl serve --http` enforces the limits every HTTP request meets, so that one hostile
client cannot starve the others. Their values, and which apply on the residents' sockets and on
stdio, are memctl.core.limits'.

- rate: each key's calls per minute (`[serve] rate_per_minute`), a token bucket; past it, 429
  with Retry-After;
- size: a body past `[serve] max_body_bytes` is refused with 413 as soon as it is known to be
  (its Content-Length, or the bytes read so far);
- time: a connection that has not sent a whole request head within `[serve] request_timeout`
  (a slowloris dribbling its headers) is closed; a body not whole by then is answered 408 (the
  JSON API, and MCP's: memctl.serve.mcp_app.CheckedBodies), a call still running then 504;
- connections: at `[serve] max_connections` (fewer under a low descriptor limit:
  limits.connection_limit), the one that has waited longest for a request head is closed;
  past it with none waiting, uvicorn answers 503;
- replies: a client that leaves its reply unread (the connection's send buffer full) for
  REPLY_SECONDS is closed, as on a resident's socket; an MCP stream it reads is not.
"""

from __future__ import annotations

import threading
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

from memctl.core.errors import MemctlError
from memctl.core.limits import REPLY_SECONDS, SEND_SECONDS, connection_limit  # noqa: F401 (for http_app)


class RateLimited(MemctlError):
    http_status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BodyTooLarge(MemctlError):
    http_status = 413


class BodyTooSlow(MemctlError):
    http_status = 408


class ClientGone(MemctlError):
    http_status = 400


class RateLimiter:
    """A bucket per key of `per_minute` calls, refilled continuously."""

    def __init__(self, per_minute: int, clock=time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.per_second = per_minute / 60.0
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str) -> None:
        now = self.clock()
        with self._lock:
            tokens, then = self._buckets.get(name, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - then) * self.per_second)
            if tokens < 1.0:
                self._buckets[name] = (tokens, now)
                wait = (1.0 - tokens) / self.per_second
                raise RateLimited(f"key {name!r} is over [serve] rate_per_minute ({self.capacity:g}); "
                                  f"retry in {wait:.1f} s", wait)
            self._buckets[name] = (tokens - 1.0, now)


def check_declared_size(headers, limit: int) -> None:
    length = headers.get("content-length")
    if length is not None and (not length.strip().isdigit() or int(length) > limit):
        raise BodyTooLarge(f"the body is over [serve] max_body_bytes ({limit} bytes)")


async def read_body(request, limit: int) -> bytes:
    from starlette.requests import ClientDisconnect

    check_declared_size(request.headers, limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"the body is over [serve] max_body_bytes ({limit} bytes)")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or its body broke HTTP's framing (uvicorn answered 400)
        raise ClientGone("the connection closed before the body was whole") from None
    return b"".join(chunks)


async def body_in_time(request, limit: int, timeout: float) -> bytes:
    """The body, or BodyTooSlow (408) when it has not all arrived within [serve] request_timeout
    (a client that sends its head and then trickles or stalls its body)."""
    import anyio

    try:
        with anyio.fail_after(timeout):
            return await read_body(request, limit)
    except TimeoutError:
        raise BodyTooSlow(f"the body did not arrive within [serve] request_timeout ({timeout:g} s)") from None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 connection, closed when a request head takes longer than `head_timeout`
    (uvicorn itself waits for a head forever, and any byte resets its keep-alive timer), or when
    its reply stays unread for REPLY_SECONDS (uvicorn waits for the client to drain it forever).
    A body is the app's to bound: `body_in_time`, on /v1 and (CheckedBodies) on /mcp."""

    head_timeout = float(SEND_SECONDS)
    _unread = None  # the timer of a reply the client is not reading

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()
        if self.limit_concurrency is not None and len(self.connections) >= self.limit_concurrency:
            self._make_room()

    def _make_room(self) -> None:
        """At the limit, the connection that has waited longest for a request head gives way (as
        on a resident's socket): else a flood of idle ones leaves every real client a 503 until
        their heads time out."""
        waiting = [other for other in self.connections if other is not self
                   and getattr(other, "_deadline", None) is not None and not other.transport.is_closing()]
        if waiting:
            min(waiting, key=lambda other: other._deadline.when()).transport.close()

    def _arm(self) -> None:
        self._cycle_before = self.cycle
        self._deadline = self.loop.call_later(self.head_timeout, self._too_slow)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._cycle_before:
            self._deadline.cancel()  # a whole head arrived: the request is the app's now
            self._deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self._deadline is None:
            self._arm()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(REPLY_SECONDS, self.transport.abort)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def connection_lost(self, exc) -> None:
        for timer in (self._deadline, self._unread):
            if timer is not None:
                timer.cancel()
        self._deadline = self._unread = None
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._deadline = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(head_timeout: float) -> type[GuardedH11Protocol]:
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"head_timeout": head_timeout})
