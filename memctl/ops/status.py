"""`status`: what the memory holds and how current its maintenance is (design.md §9).

Cheap by design (an agent or a prompt line may call it often): it stats files and counts
lines, and decodes L5 and L6 only when the write lookups cannot vouch that every line of
them is an entry. Per layer: files, entries and bytes; pending raw logs; the last
archive run (the newest `archived_at` in the manifest) and the last dream run (the last line
of `dream_log.jsonl`); whether the search index is older than the newest layer file.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memctl.core.config import Settings
from memctl.l4.manifest import iter_manifest

ENTRY_UNITS = {"L1": "lines", "L2": "sections", "L3": "files", "L4": "sessions", "L5": "entries", "L6": "entries"}


@dataclass
class LayerStatus:
    layer: str
    files: int = 0
    entries: int = 0
    bytes: int = 0
    unit: str = ""
    bad_lines: int = 0  # L5/L6: lines that are not entries (skipped by every reader; `verify` lists them)


@dataclass
class Status:
    root: str
    layers: list[LayerStatus]
    raw_dir: str
    pending_raw: int
    pending_raw_bytes: int
    active_tasks: int
    last_archive: str  # ISO time, '' if never
    last_dream: dict = field(default_factory=dict)  # run, at, op of the dream log's last line
    index: dict = field(default_factory=dict)  # exists, fresh, built, newest_layer_file
    l4_sessions: dict = field(default_factory=dict)  # archived by: memctl, genericagent (adopted, lossy)
    backend: str = "files"  # where L5, L6 and the dream log are: "files" or "postgres"
    where: str = ""  # the root, or the schema and the server (memctl.ops.server.describe)
    machines: list[str] = field(default_factory=list)  # a team memory's machines (`host:/root/`)
    purge_orders: list[dict] = field(default_factory=list)  # run, at, waiting_on: orders some machine has not applied

    def to_json(self) -> dict:
        data = asdict(self)
        data["layers"] = {layer.layer: {k: v for k, v in asdict(layer).items() if k != "layer"} for layer in self.layers}
        return data


def collect(settings: Settings) -> Status:
    from memctl.ops.server import describe

    layout = settings.layout
    backend, where = describe(settings)
    machines, orders = [], []
    if backend == "files":
        from memctl.longterm.store import open_store

        store = open_store(layout)  # refuses a symlinked L5, L6 or dream log with one line
        entry_layers, last_dream = [_jsonl("L5", layout.long_term, store.active),
                                    _jsonl("L6", layout.cold_archive, store.archive)], _last_dream(layout.dream_log)
    else:
        entry_layers, last_dream = _server_layers(settings)
        machines, orders = _team_purges(settings)
    layers = [_l1(layout), _l2(layout), _l3(layout), _l4(layout)] + entry_layers
    raw_dir = settings.raw_dir()
    pending, pending_bytes = _pending_raw(raw_dir)
    return Status(
        root=str(layout.root),
        layers=layers,
        raw_dir=str(raw_dir),
        pending_raw=pending,
        pending_raw_bytes=pending_bytes,
        active_tasks=_count(layout.working_dir.glob("*.json")) if layout.working_dir.is_dir() else 0,
        last_archive=max((r.archived_at for r in iter_manifest(layout)), default=""),
        last_dream=last_dream,
        index=index_freshness(settings),
        l4_sessions=_sessions_by_origin(layout),
        backend=backend,
        where=where,
        machines=machines,
        purge_orders=orders,
    )


def _server_layers(settings: Settings) -> tuple[list[LayerStatus], dict]:
    """L5 and L6 as rows of the server memory (files 0), and its last dream record."""
    from memctl.longterm.store import open_store

    store = open_store(settings.layout, settings)
    layers = []
    for layer, part in (("L5", store.active), ("L6", store.archive)):
        layers.append(LayerStatus(layer, 0, part.count(), part.size(), ENTRY_UNITS[layer]))
    records = [r for r in store.log_records() if isinstance(r, dict)]
    last = {k: records[-1][k] for k in ("run", "at", "op") if k in records[-1]} if records else {}
    return layers, last


def _team_purges(settings: Settings) -> tuple[list[str], list[dict]]:
    """The machines known to a team memory, and the purge orders some of them have not applied."""
    from memctl.longterm import purge_orders
    from memctl.longterm.store import open_store

    server = open_store(settings.layout, settings).server
    orders = [{"run": run, "at": at, "waiting_on": hosts}
              for run, at, hosts in purge_orders.waiting(server, server.schema)]
    return purge_orders.machines(server, server.schema), orders


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _count(items) -> int:
    return sum(1 for _ in items)


def _l1(layout) -> LayerStatus:
    path = layout.insight
    if not path.is_file():
        return LayerStatus("L1", unit=ENTRY_UNITS["L1"])
    data = path.read_bytes()
    return LayerStatus("L1", 1, len(data.splitlines()), len(data), ENTRY_UNITS["L1"])


def _l2(layout) -> LayerStatus:
    from memctl.agent.insight import l2_sections

    if not layout.global_mem.is_file():
        return LayerStatus("L2", unit=ENTRY_UNITS["L2"])
    return LayerStatus("L2", 1, len(l2_sections(layout)), _size(layout.global_mem), ENTRY_UNITS["L2"])


def _l3(layout) -> LayerStatus:
    from memctl.ops.integrity import layer_files

    files = layer_files(layout, ("l3",))
    return LayerStatus("L3", len(files), len(files), sum(_size(p) for p in files), ENTRY_UNITS["L3"])


def _l4(layout) -> LayerStatus:
    if not layout.l4_dir.is_dir():
        return LayerStatus("L4", unit=ENTRY_UNITS["L4"])
    files = [p for p in layout.l4_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    names = {r.name for r in iter_manifest(layout)}
    loose = [p for p in files if p.suffix == ".txt" and p.name != layout.histories.name and p.stem not in names]
    return LayerStatus("L4", len(files), len(names) + len(loose), sum(_size(p) for p in files), ENTRY_UNITS["L4"])


def _sessions_by_origin(layout) -> dict:
    origin_of = {r.name: r.origin or "memctl" for r in iter_manifest(layout)}
    counts = {"memctl": 0, "genericagent": 0}
    for origin in origin_of.values():
        counts[origin] = counts.get(origin, 0) + 1
    return counts


def _jsonl(layer: str, path: Path, part) -> LayerStatus:
    if not path.is_file():
        return LayerStatus(layer, unit=ENTRY_UNITS[layer])
    entries, bad = part.line_counts()
    return LayerStatus(layer, 1, entries, _size(path), ENTRY_UNITS[layer], bad)


def _pending_raw(raw_dir: Path) -> tuple[int, int]:
    if not raw_dir.is_dir():
        return 0, 0
    count = size = 0
    for path in raw_dir.glob("model_responses_*.txt"):
        if path.is_file() and not path.is_symlink():
            count += 1
            size += _size(path)
    return count, size


def _last_dream(path: Path) -> dict:
    """The last parseable line of the dream log: its run id, time and operation."""
    if not path.is_file():
        return {}
    with open(path, "rb") as handle:
        handle.seek(max(0, _size(path) - 65536))
        lines = handle.read().splitlines()
    for raw in reversed(lines):
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        if isinstance(data, dict):
            return {k: data[k] for k in ("run", "at", "op") if k in data}
    return {}


def index_freshness(settings: Settings) -> dict:
    """Whether .memctl/index.sqlite exists, was built with the current settings (`is_usable`)
    and is at least as new as every layer file it reads.

    A stale index is not an error: the next `search` refreshes it from the changed files."""
    from memctl.ops import server
    from memctl.recall.indexing.index import IndexOptions, SearchIndex, scan_sources

    if server.on_server(settings):
        return server.index_state(settings)
    layout = settings.layout
    options = IndexOptions.from_settings(settings)
    newest = max((s.mtime_ns for s in scan_sources(layout, options)), default=0)
    path = layout.index
    if not path.is_file():
        return {"path": str(path), "exists": False, "fresh": False, "built": "", "newest_layer_file": _iso_ns(newest)}
    built = os.stat(path).st_mtime_ns
    usable = SearchIndex(layout, options).is_usable()  # built with this schema, dictionary and redaction
    return {"path": str(path), "exists": True, "fresh": usable and built >= newest, "usable": usable,
            "built": _iso_ns(built), "newest_layer_file": _iso_ns(newest), "bytes": _size(path)}


def _iso_ns(ns: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(ns / 1e9).isoformat(timespec="seconds") if ns else ""
