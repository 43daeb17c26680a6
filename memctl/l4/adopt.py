"""Adopting what GenericAgent's own archiver left in L4 (`memctl init` in a checkout).

GenericAgent's `batch_process` writes monthly `YYYY-MM.zip` files with one `<name>.txt`
member per session and appends a block per session to `all_histories.txt`; it keeps no
manifest and no raw bytes (it drops system prompts and echoes). Each of its members, and each
history block that has no member, becomes a manifest record with `origin = "genericagent"`:
a session for `status`, `recent`, `show`, `search` and `verify`, lossy by nature (`show
--raw` says so). Its sha256 is the member's own bytes' (the block's, for a block alone), so
`verify` can tell it is still what GenericAgent wrote. GenericAgent's files are only read;
the one write besides the manifest is a history block for a member GenericAgent gave none
(it writes none for a session without tool calls), so that every session has one.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from memctl.core import clock
from memctl.core.config import Layout
from memctl.l4.archive import known_sessions
from memctl.l4.codec import is_session_header
from memctl.l4.history import HistoryBuilder, history_block, iter_history_blocks
from memctl.l4.logs import RawEntry, iter_log
from memctl.l4.manifest import ManifestRecord, append_records, append_whole_lines, iter_manifest, monthly_zips
from memctl.l4.staging import unique_name

GENERICAGENT = "genericagent"
HISTORY_ONLY_FORMAT = "genericagent-history"


@dataclass
class AdoptReport:
    members: list[str] = field(default_factory=list)  # zip:member adopted now
    history_only: list[str] = field(default_factory=list)  # session names known only from all_histories.txt
    blocks_added: list[str] = field(default_factory=list)  # names given a history block now
    unreadable: list[str] = field(default_factory=list)  # "zip: why" for zips that could not be read

    @property
    def adopted(self) -> int:
        return len(self.members) + len(self.history_only)


def adopt_genericagent_archive(layout: Layout) -> AdoptReport:
    """Record every GenericAgent session not yet in the manifest (the caller holds the lock)."""
    report = AdoptReport()
    if not layout.l4_dir.is_dir():
        return report
    records = list(iter_manifest(layout))
    recorded = {(r.zip, r.member) for r in records if r.zip}
    # memctl's own sessions, also those only a member comment still records (a torn manifest)
    names = {r.name for r in records} | {r.name for r in known_sessions(layout).values()}
    histories = dict(iter_history_blocks(layout.histories))
    new: list[ManifestRecord] = []
    blocks: list[str] = []
    for zip_path in monthly_zips(layout):
        try:
            found = _foreign_members(zip_path, recorded)
        except (zipfile.BadZipFile, OSError) as exc:
            report.unreadable.append(f"{zip_path.name}: {exc}")
            continue
        for info, data in found:
            record = member_record(zip_path, info, data, names)
            names.add(record.name)
            new.append(record)
            report.members.append(f"{zip_path.name}:{info.filename}")
            if record.name not in histories:
                blocks.append(history_block(record.name, _history_of(data)))
                report.blocks_added.append(record.name)
    for name, lines in histories.items():
        if name not in names:
            names.add(name)
            new.append(_history_record(layout, name, lines))
            report.history_only.append(name)
    append_records(layout, new)
    if blocks:
        append_whole_lines(layout, layout.histories, "".join(blocks).encode("utf-8", "surrogateescape"))
    return report


def _foreign_members(zip_path: Path, recorded: set[tuple[str, str]]) -> list[tuple[zipfile.ZipInfo, bytes]]:
    """Members of a monthly zip that neither the manifest nor memctl's own encoding claims.
    GenericAgent can write one name twice into a zip; only the last can be opened by name."""
    found = []
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.endswith(".txt") or (zip_path.name, info.filename) in recorded:
                continue
            if archive.getinfo(info.filename) is not info:
                continue
            if info.comment:  # memctl stores each member's record as its comment
                continue
            data = archive.read(info)
            if not is_session_header(data):
                found.append((info, data))
    return found


def member_record(zip_path: Path, info: zipfile.ZipInfo, data: bytes, names: set[str]) -> ManifestRecord:
    stem = Path(info.filename).stem
    start, end = name_times(stem, int(zip_path.name[:4]))
    return ManifestRecord(
        name=unique_name(stem, names),  # memctl names alike: a clash keeps both
        sha256=hashlib.sha256(data).hexdigest(), source=info.filename,
        zip=zip_path.name, member=info.filename, bytes_raw=0, bytes_compressed=info.file_size,
        start=start, end=end, format=GENERICAGENT, archived_at=datetime(*info.date_time).isoformat(),
        origin=GENERICAGENT,
    )


def _history_record(layout: Layout, name: str, lines: list[str]) -> ManifestRecord:
    text = history_block(name, lines)
    written = datetime.fromtimestamp(layout.histories.stat().st_mtime)
    start, end = name_times(name, written.year)
    if start > written.isoformat():  # a December session in a file last written in January
        start, end = name_times(name, written.year - 1)
    return ManifestRecord(
        name=name, sha256=hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(), source=layout.histories.name,
        zip="", member="", bytes_raw=0, bytes_compressed=len(text.encode("utf-8", "surrogateescape")),
        start=start, end=end, format=HISTORY_ONLY_FORMAT, archived_at=clock.iso(clock.now()),
        origin=GENERICAGENT,
    )


def name_times(name: str, year: int) -> tuple[str, str]:
    """ISO start and end from `MMDD_HHMM-MMDD_HHMM` (GenericAgent's names carry no year); ''
    when the name is not of that shape."""
    try:
        start = datetime.strptime(f"{year}{name[:9]}", "%Y%m%d_%H%M")
        end = datetime.strptime(f"{year}{name[10:19]}", "%Y%m%d_%H%M") if name[9:10] == "-" else start
    except ValueError:
        return "", ""
    if end < start:  # a session across New Year
        end = end.replace(year=year + 1)
    return start.isoformat(), end.isoformat()


def _history_of(member: bytes) -> list[str]:
    """memctl's history lines for a GenericAgent member (its text keeps markers and bodies)."""
    import io

    builder = HistoryBuilder()
    for item in iter_log(io.BytesIO(member)):
        if isinstance(item, RawEntry):
            builder.feed(item)
    return builder.result()
