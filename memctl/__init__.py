"""memctl: a layered, long-lived memory for AI agents, kept as plain files in one folder."""

__version__ = "0.1.0"
