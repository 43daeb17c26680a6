"""A memory on a PostgreSQL server (`[store] backend = "postgres"`, issue #14): setting its
schema up, and what `status` and `verify` say about it.

`memctl init` applies the steps of every server component that this memctl has, each from
its own module (`COMPONENT`, `STEPS`): the entry store's (`memctl.longterm.pg_schema`) and the
search index's (`memctl.recall.indexing.pg_schema`, when present). A component whose module is absent
is skipped, so each can land on its own.
"""

from __future__ import annotations

import importlib

from memctl.core import pg
from memctl.core.config import Settings

COMPONENT_MODULES = ("memctl.longterm.pg_schema", "memctl.recall.indexing.pg_schema")


def on_server(settings: Settings) -> bool:
    return settings.get("store", "backend") == "postgres"


def components() -> list[tuple[str, list[str]]]:
    """(component, steps) of every server component this memctl has."""
    found = []
    for name in COMPONENT_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        found.append((module.COMPONENT, list(module.STEPS)))
    return found


def initialise(settings: Settings) -> dict:
    """Create or migrate the memory's schema: {"schema", "where", "versions": {component: n}}."""
    from memctl.longterm import purge_orders
    from memctl.longterm.pg_store import translated

    dsn = pg.dsn_from_env()
    schema = pg.schema_for(str(settings.get("store", "memory")))
    conn = pg.connect(dsn, autocommit=True)
    try:
        with translated(pg.where(dsn)):
            versions = {component: pg.migrate(conn, schema, component, steps) for component, steps in components()}
            purge_orders.register(conn, schema, pg.machine_key(settings.layout.root))  # a purge anywhere waits for it
    finally:
        conn.close()
    return {"schema": schema, "where": pg.where(dsn), "versions": versions}


def describe(settings: Settings) -> tuple[str, str]:
    """(backend, where): the folder, or the schema and the server (never the password)."""
    if not on_server(settings):
        return "files", str(settings.layout.root)
    return "postgres", f"{pg.schema_for(str(settings.get('store', 'memory')))} at {pg.where(pg.dsn_from_env())}"


def index_state(settings: Settings) -> dict:
    """`status`'s index line for a team memory: the shared index lives in the schema, not in
    .memctl/index.sqlite, so it exists when its tables are at this memctl's version; its items
    are counted there. Freshness is per machine and settled by the next search's refresh."""
    from memctl.longterm.pg_store import translated
    from memctl.recall.indexing import pg_schema as index_schema

    dsn = pg.dsn_from_env()
    schema = pg.schema_for(str(settings.get("store", "memory")))
    conn = pg.connect(dsn, autocommit=True)
    try:
        with translated(pg.where(dsn)):
            version = pg.schema_version(conn, schema, index_schema.COMPONENT)
            usable = version == len(index_schema.STEPS)
            items = conn.execute(f"SELECT count(*) FROM {schema}.index_items").fetchone()[0] if usable else 0
    finally:
        conn.close()
    return {"path": f"{schema} at {pg.where(dsn)}", "on_server": True, "exists": version > 0, "usable": usable,
            "fresh": usable, "items": int(items), "built": "", "newest_layer_file": ""}
