"""SQLite for the write path, without the `sqlite3` package's Python half.

`sqlite3` is `_sqlite3` plus `sqlite3.dbapi2`, which registers the date and datetime adapters
and so imports `datetime` and `collections.abc` (~7M instructions of a ~100M `remember`
process). The write lookups bind only ints, strings and bytes, which need no adapter, so they
use the C module's own `connect` and error classes (the same objects `sqlite3` re-exports).
"""

from __future__ import annotations

try:
    from _sqlite3 import Connection, DatabaseError, Error, connect
except ImportError:  # a build whose C module is reached only through the package
    from sqlite3 import Connection, DatabaseError, Error, connect

__all__ = ["Connection", "DatabaseError", "Error", "connect"]
