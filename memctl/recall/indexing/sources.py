"""The files the index reads, and how to tell that one changed: each source is tracked by
size and mtime (`Source`); `scan_sources` lists every layer's files as they are now."""

from __future__ import annotations

import contextlib
import os
import re
from collections import namedtuple
from pathlib import Path

from memctl.core.config import Layout

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Iterator

    from memctl.recall.indexing.documents import IndexOptions

# every source kind but the tens of thousands of sessions (loose files, zip members): the
# few a search checks one by one when the session folder is unchanged
FEW_SOURCES_KINDS = ("l2", "l3", "hist", "zip", "l5", "l6", "raw")
RAW_PREFIX, RAW_SUFFIX = "model_responses_", ".txt"
L3_SUFFIXES = frozenset({".md", ".py", ".txt", ".sh", ".toml", ".yaml", ".yml", ".json", ".rst"})
L3_MAX_BYTES = 2_000_000


class Source(namedtuple("Source", "key location kind size mtime_ns")):
    """key: stable name in the index (a path relative to the root, or zip!member); location:
    the file, as a str (building Path objects for every session costs ~0.5 s at 1 GB); kind:
    l2 l3 hist loose zip l5 l6 member, raw (a raw log not archived yet, read where it lies)."""

    __slots__ = ()

    @property
    def path(self) -> Path:
        return Path(self.location)


def scan_sources(layout: Layout, options: IndexOptions, include_l4_sessions: bool = True) -> list[Source]:
    root = layout.root
    found: list[Source] = []

    def add(path: Path, kind: str) -> None:
        with contextlib.suppress(OSError):
            info = os.stat(path, follow_symlinks=False)
            if os.path.isfile(path) and not os.path.islink(path):
                found.append(Source(os.path.relpath(path, root), str(path), kind, info.st_size, info.st_mtime_ns))

    add(layout.global_mem, "l2")
    add(layout.long_term, "l5")
    if options.include_l6:
        add(layout.cold_archive, "l6")
    add(layout.histories, "hist")
    if options.raw_dir:
        found.extend(raw_log_sources(layout, options.raw_dir))
    if include_l4_sessions and layout.l4_dir.is_dir():
        found.extend(_l4_session_sources(layout))
    for path in l3_files(layout):
        add(path, "l3")
    return found


def linked_layer_files(layout: Layout) -> list[str]:
    """The layer files (L2, L5, L6, the history file) and the session folder that are symlinks:
    the index never reads through a link, so a search names them instead of silently finding
    nothing in them (four lstat calls)."""
    paths = (layout.global_mem, layout.long_term, layout.cold_archive, layout.histories, layout.l4_dir)
    return [os.path.relpath(path, layout.root) for path in paths if os.path.islink(path)]


def raw_log_sources(layout: Layout, raw_dir: str) -> list[Source]:
    """The raw logs of `raw_dir` (GenericAgent's temp/model_responses/), and the kept ones whose
    raw log another program deleted before memctl archived it (`memctl.l4.kept`): memory that
    is not in L4 yet. Only read; `archive` moves them into L4, and then they leave this list."""
    present = _raw_files(raw_dir)
    found = [_raw_source(layout, entry) for entry in present]
    linked = {(entry.inode(), entry.name) for entry in present}
    kept = os.path.join(layout.state_dir, "kept-raw")
    for folder in _scandir(kept):
        if folder.name.isdigit() and folder.is_dir(follow_symlinks=False):
            found += [_raw_source(layout, entry) for entry in _raw_files(folder.path)
                      if (int(folder.name), entry.name) not in linked]
    return [source for source in found if source is not None]


def _scandir(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError:  # no such folder, or not one
        return []


def _raw_files(folder: str) -> list[os.DirEntry]:
    """Regular raw-log files; not those whose name is not UTF-8 (its undecodable bytes come as
    lone surrogates, which are not printable): no index key can hold it, and `archive` says
    to rename it."""
    return [entry for entry in _scandir(folder) if entry.name.startswith(RAW_PREFIX) and entry.name.endswith(RAW_SUFFIX)
            and entry.name.isprintable() and entry.is_file(follow_symlinks=False)]


def _raw_source(layout: Layout, entry: os.DirEntry) -> Source | None:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return Source(os.path.relpath(entry.path, layout.root), entry.path, "raw", info.st_size, info.st_mtime_ns)


_MONTH_ZIP = re.compile(r"\d{4}-\d\d\.zip")


def _l4_session_sources(layout: Layout) -> list[Source]:
    """Loose compressed sessions and monthly zips; tens of thousands of files at 1 GB, so this
    loop avoids pathlib and relpath and takes size and mtime from one stat per entry."""
    folder, history_name = layout.l4_dir, layout.histories.name
    prefix = os.path.relpath(folder, layout.root)
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(".txt") and name != history_name and not name.startswith("."):
                kind = "loose"
            elif name.endswith(".zip") and _MONTH_ZIP.fullmatch(name):
                kind = "zip"
            else:
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append(Source(f"{prefix}/{name}", entry.path, kind, info.st_size, info.st_mtime_ns))
    found.sort(key=lambda s: s.key)
    return found


def l3_files(layout: Layout) -> Iterator[Path]:
    skip_dirs = {layout.l4_dir.name, layout.state_dir.name}
    skip_files = {layout.global_mem.name, layout.insight.name, layout.long_term.name, layout.cold_archive.name,
                  layout.dream_log.name, layout.config_file.name, layout.custom_dict.name, layout.aliases.name}
    for folder, dirs, files in os.walk(layout.root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (folder == str(layout.root) and d in skip_dirs))
        at_root = folder == str(layout.root)
        for name in sorted(files):
            if name.startswith(".") or (at_root and name in skip_files):
                continue
            path = Path(folder) / name
            if path.suffix in L3_SUFFIXES and (not at_root or path.suffix in (".md", ".py")) \
                    and not path.is_symlink():  # a planted link could point anywhere
                yield path


def file_signature(path: Path) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return "absent"
    return f"{info.st_size}:{info.st_mtime_ns}"
