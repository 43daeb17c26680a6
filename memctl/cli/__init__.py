"""The command line: typer app and global options (`app`), shared per-invocation state
(`state`), one module per group of subcommands (`commands/`), output rendering and the single
redaction point for what is printed (`render`), and the lean path that answers piped searches
without typer and rich (`lean`). Parses, calls a module, renders; decides nothing itself."""
