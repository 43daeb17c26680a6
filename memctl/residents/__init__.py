"""One home for memctl's long-lived local processes, the per-root residents that a short command
hands its work to: one framing and client side of their Unix socket (`local_socket`: lengths
checked, at most 4 MiB a message; `_socket` only, so every client stays light; its limits, as
`memctl serve`'s, are `core.limits`), one serving loop
(`service`: the socket, framed messages, a connection whose message is overdue dropped, at most 256
watched, when to stop), the resident writer (`writer`: commits batches of `remember` requests
under one lock hold and one fsync) and the resident searcher (`searcher`: keeps numpy, the model
and the vectors loaded for the searches' semantic half). `memctl serve`'s HTTP and MCP service is
`memctl.serve`. This package imports nothing at import time: the lean CLI path loads only
`local_socket`."""
