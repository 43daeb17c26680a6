"""Shared foundations every layer stands on: settings and root resolution (`config`), safe file
operations and the writer lock (`fsutil`), the clock (`clock`), errors and exit codes
(`errors`), fault injection for tests (`faults`) and secret redaction (`redact`). Imports nothing
else from memctl."""
