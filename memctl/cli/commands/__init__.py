"""One module per group of subcommands; each has a `register(app)` that adds its commands."""
