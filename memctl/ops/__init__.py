"""What an operator runs: integrity checks (`integrity`, behind `memctl verify`), `status`,
scheduled jobs (`schedule`) and the demo (`demo`). Reads every layer; writes only unit files and
the demo's own temporary memory. May import every layer package, never `memctl.cli`."""
