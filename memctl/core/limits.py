"""Every limit memctl's long-lived processes put on a client, named once, for the three surfaces:
the residents' Unix sockets (the writer's `writer.sock`, the searcher's `semantic.sock`),
`memctl serve --http` (the JSON API at /v1 and MCP at /mcp) and `memctl serve` on stdio.

- request size, REQUEST_BYTES (4 MiB), the same on every surface: a fact of the most
  `[writes] max_fact_bytes` allows (MAX_FACT_BYTES characters, read as up to 4 UTF-8 bytes
  each) fits in one, as does a JSON body escaping it (`\\uXXXX`, at most 3 times its bytes).
  A resident refuses a larger declared length before reading it (the connection is closed);
  HTTP answers 413 from the Content-Length or the bytes read so far (`[serve] max_body_bytes`
  overrides). On stdio the SDK reads whole lines: its peer is the process that started it.
- connections watched at once, CONNECTIONS (256), on both socket surfaces fewer where the
  process's descriptor limit would leave a request none to open its files with
  (`connection_limit`). At the limit both close the connection that has waited longest for a
  request (HTTP answers 503 only when none is waiting; `[serve] max_connections` overrides,
  bounded the same way).
- time to send a whole request: HTTP SEND_SECONDS (30 s: `[serve] request_timeout` overrides)
  for the head, then again for the body (408, on /v1 and /mcp), as a client across a network
  may need for 4 MiB; a resident
  LOCAL_SEND_SECONDS (10 s), since its clients are this user's processes that write a request
  in one call right after connecting, and a flood's descriptors come back sooner (the searcher
  waits for a search's second message as long as the search's own answer wait,
  semantic_helper.ANSWER_SECONDS: the search runs its lexical half in between).
- time for a reply: a call answers within `[serve] request_timeout` over HTTP and stdio (504 or
  a tool error), a resident's reply is the work its client asked to wait for (`remember
  --wait`); a client that leaves a reply unread is given up after REPLY_SECONDS (10 s) on
  both socket surfaces, and a resident's client reads at most REPLY_BYTES (64 MiB) of one.

The limits live in `core`, below both the residents and `memctl serve`, and import nothing: a
`remember` handed to the resident writer loads this module beside `local_socket` (+0.4% of that
client's instructions; loading core.defaults, which builds [serve]'s defaults from these, cost
it +1.1%: bench/RESULTS.md, "One set of limits").
"""

from __future__ import annotations

REQUEST_BYTES = 4 << 20
CONNECTIONS = 256
SEND_SECONDS = 30  # an int, as [serve] request_timeout's default: a setting keeps its default's type
LOCAL_SEND_SECONDS = 10.0
REPLY_SECONDS = 10.0
REPLY_BYTES = 64 << 20
DESCRIPTORS_KEPT = 32  # free for running a request (memctl.toml, the lock, L5, SQLite's three) and the listener


def connection_limit(wanted: int = CONNECTIONS) -> int:
    """Connections watched at once: `wanted`, fewer where this process's descriptor limit would
    otherwise leave a request none to open its files with (a flood of idle connections under a
    low `ulimit -n` made every request fail with "Too many open files")."""
    try:
        import resource  # POSIX only
    except ImportError:
        return wanted
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - DESCRIPTORS_KEPT))
