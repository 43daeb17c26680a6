"""The L4 manifest: `L4_raw_sessions/manifest.jsonl`, one line per archived session.

It is part of L4, not derived: `show`, `verify` and the archive cycle rely on it. Each
record is also stored as the comment of its zip member, so a lost or damaged manifest can be
rebuilt from the zips (`rebuild_from_zips`).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Iterator

from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes
from memctl.core.jsonl import append_lines, torn_dir


@dataclass
class ManifestRecord:
    name: str
    sha256: str
    source: str
    zip: str
    member: str
    bytes_raw: int
    bytes_compressed: int
    start: str
    end: str
    format: str
    archived_at: str
    entries: int = 0
    continues: str = ""
    purged: str = ""  # when `forget --purge` rewrote the session (its sha256 is then the new bytes')
    origin: str = ""  # "genericagent": adopted from GenericAgent's own archive (adopt.py), no raw bytes

    def to_json(self) -> str:
        optional = {f.name for f in fields(self) if f.default is not MISSING}
        data = {k: v for k, v in asdict(self).items() if v != "" or k not in optional}
        return json.dumps(data, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict) -> "ManifestRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def iter_manifest(layout: Layout) -> Iterator[ManifestRecord]:
    """Records in the order written; a torn or foreign line is skipped, never fatal."""
    path = layout.manifest
    if not path.exists():
        return
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                yield ManifestRecord.from_dict(json.loads(raw))
            except (ValueError, TypeError):
                continue


def append_records(layout: Layout, records: Iterable[ManifestRecord]) -> None:
    payload = "".join(r.to_json() + "\n" for r in records).encode("utf-8")
    if payload:
        append_whole_lines(layout, layout.manifest, payload)


def append_whole_lines(layout: Layout, path: Path, payload: bytes) -> None:
    """Append to an L4 file line by line: a torn last line a killed run left (no newline) goes
    to `.memctl/torn/` first, so the new lines never glue onto it (core.jsonl's primitive)."""
    append_lines(path, payload if payload.endswith(b"\n") else payload + b"\n", torn_dir(layout.state_dir))


def records_in_zip(zip_path: Path) -> list[ManifestRecord]:
    records = []
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            try:
                records.append(ManifestRecord.from_dict(json.loads(info.comment.decode("utf-8"))))
            except (ValueError, TypeError, UnicodeDecodeError):
                continue
    return records


def monthly_zips(layout: Layout) -> list[Path]:
    if not layout.l4_dir.is_dir():
        return []
    return sorted(p for p in layout.l4_dir.glob("[0-9][0-9][0-9][0-9]-[0-9][0-9].zip") if p.is_file())


def rebuild_from_zips(layout: Layout) -> list[ManifestRecord]:
    """Rewrite manifest.jsonl from the records stored in the zips' member comments."""
    records = [r for zip_path in monthly_zips(layout) for r in records_in_zip(zip_path)]
    records.sort(key=lambda r: (r.archived_at, r.start, r.name))
    atomic_write_bytes(layout.manifest, "".join(r.to_json() + "\n" for r in records).encode("utf-8"))
    return records
