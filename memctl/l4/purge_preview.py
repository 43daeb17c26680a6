"""What `forget --purge` would rewrite, found without changing anything (its --dry-run).

The same places `memctl.l4.purge`, `memctl.l4.purge_raw` and the entry store's purge scrub:
the history file, every session inside the monthly zips (decoded, so a string the codec split
across a back-reference is still found), loose sessions, the raw logs not archived yet and
their kept copies, and any other file under the root.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Iterable

from memctl.core.config import Layout
from memctl.l4.codec import HEADER, decode_stream
from memctl.l4.kept import kept_dir, kept_logs, open_log, raw_logs
from memctl.l4.manifest import monthly_zips
from memctl.l4.purge import _StreamingReplacer

_NOT_SCANNED = (".zip", ".sqlite", ".sqlite-wal", ".sqlite-shm", ".tmp")


def files_holding(layout: Layout, needles: Iterable[bytes], raw_dir: Path | None = None) -> list[str]:
    """One line per file (and, for zips, the sessions inside) that holds a needle; with
    `raw_dir`, the raw logs not archived yet there and their kept copies too."""
    needles = sorted({n for n in needles if n}, key=len, reverse=True)
    if not needles:
        return []
    found = [f"{zip_path}: sessions {', '.join(names)}"
             for zip_path in monthly_zips(layout) if (names := _sessions_holding(zip_path, needles))]
    for loose in sorted(layout.l4_dir.glob("*.txt")) if layout.l4_dir.is_dir() else ():
        if loose != layout.histories and not loose.is_symlink() and _loose_session_holds(loose, needles):
            found.append(f"{loose}: session")
    raw = _raw_logs_holding(layout, raw_dir, needles) if raw_dir is not None else []
    skip = {kept_dir(layout)} | ({raw_dir} if raw_dir is not None else set())
    return found + raw + [str(path) for path in _plain_files_holding(layout, needles, skip)]


def _raw_logs_holding(layout: Layout, raw_dir: Path, needles: list[bytes]) -> list[str]:
    """What `memctl.l4.purge_raw` would rewrite: raw logs, then kept copies."""
    found = [f"{path}: raw log not archived yet" for path, _ in raw_logs(raw_dir) if _file_holds(path, needles)]
    return found + [f"{kept.path}: kept copy of a raw log" for kept in kept_logs(layout) if _file_holds(kept.path, needles)]


def _file_holds(path: Path, needles: list[bytes]) -> bool:
    try:
        with open_log(path) as handle:
            return _holds(handle, needles, encoded=False)
    except OSError:  # gone meanwhile, or no longer a regular file: the purge will not rewrite it
        return False


def _holds(stream, needles: list[bytes], encoded: bool = True) -> bool:
    """Whether a session holds a needle: memctl's encoding decoded first, so a string the codec
    split across a back-reference is still found; a GenericAgent member read as the text it is."""
    detector = _StreamingReplacer(needles, b"", lambda _chunk: None)
    if encoded:
        decode_stream(stream, detector.feed)
    else:
        while chunk := stream.read(1 << 20):
            detector.feed(chunk)
    detector.close()
    return bool(detector.replaced)


def _sessions_holding(zip_path: Path, needles: list[bytes]) -> list[str]:
    names = []
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                # as the purge tells them apart: a member without a record in its comment is
                # GenericAgent's own text (memctl.l4.purge._purge_zip)
                if _holds(member, needles, encoded=bool(info.comment)):
                    names.append(Path(info.filename).stem)
    return names


def _loose_session_holds(path: Path, needles: list[bytes]) -> bool:
    with open(path, "rb") as handle:
        if handle.read(len(HEADER)) != HEADER:
            return False
        handle.seek(0)
        return _holds(handle, needles)


def _plain_files_holding(layout: Layout, needles: list[bytes], skip: set[Path]) -> list[Path]:
    """all_histories.txt, L1-L3, task state, L5/L6, logs in .memctl/ (not zips, not the index;
    not the folders in `skip`, listed above)."""
    found = []
    for folder, dirs, names in os.walk(layout.root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)) and Path(folder, d) not in skip)
        for name in sorted(names):
            path = Path(folder) / name
            if name.endswith(_NOT_SCANNED) or path.is_symlink() or not path.is_file():
                continue
            if path.parent == layout.l4_dir and path != layout.histories and name.endswith(".txt"):
                continue  # loose sessions: compressed, decoded above
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(path)
    return found
