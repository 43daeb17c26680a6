"""The access layer (design.md §9b): `memctl serve`, one long-lived process per memory.

It owns the MCP server (stdio and streamable HTTP at /mcp), the HTTP JSON API
(`POST /v1/<operation>`), the per-agent keys and their scopes, and how HTTP enforces the limits every
request meets (size, rate, time, connections: their values, shared with the residents, are
memctl.core.limits').
"""
