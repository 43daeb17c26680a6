"""The L4 cycle: compress raw session logs, extract their history, pack monthly zips, and
delete a raw file only once its session is verified inside a zip and in the manifest.

`plan` decides from file metadata alone which logs are candidates and why the others are
left alone; `run_archive` carries the plan out under the writer lock (or, with dry_run,
only reads). Order of every step, each one durable before the next (conventions.md §0):

1. encode each candidate into a hidden staging file, hashing the raw bytes;
2. per month, copy the existing zip beside itself, add the new members, fsync, verify every
   new member decodes to the raw sha256 and every old member is unchanged, rename over;
3. append the sessions' manifest records; 4. append their history blocks;
5. delete each raw file, unless it changed since it was read.

A run killed anywhere leaves every session whole in its raw file or in a verified zip; the
next run finishes the job without duplicating zip members or history blocks, because every
zip member carries its manifest record and identity is the sha256 of the raw bytes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from memctl.core import clock, faults
from memctl.core.clock import parse_duration
from memctl.core.config import Layout, Settings
from memctl.core.errors import IntegrityError, UsageError
from memctl.core.fsutil import ensure_private_dir, sweep_stale_temp_files
from memctl.l4.history import history_block, sessions_in_history
from memctl.l4.kept import (KeepReport, beside_genericagent, drop_kept, keep_unarchived, kept_dir, kept_inodes, orphan_candidates,
                            remove_if_empty)
from memctl.l4.manifest import (ManifestRecord, append_records, append_whole_lines, iter_manifest, monthly_zips,
                                 records_in_zip)
from memctl.l4.staging import Candidate, FileSignature, Staged, stage_ahead, unique_name
from memctl.l4.zips import write_month_zips

RAW_GLOB_PREFIX = "model_responses_"
RAW_SUFFIX = ".txt"


@dataclass
class FileDecision:
    """What happens (or would happen) to one raw file, and why."""

    path: str
    action: str  # archive | finish (already archived: history + delete) | skip | error
    reason: str
    name: str = ""
    zip: str = ""
    sha256: str = ""
    bytes_raw: int = 0
    bytes_compressed: int = 0
    deleted: bool = False


@dataclass
class ArchiveReport:
    raw_dir: str
    dry_run: bool
    decisions: list[FileDecision] = field(default_factory=list)
    months: list[str] = field(default_factory=list)
    kept: KeepReport = field(default_factory=KeepReport)

    @property
    def errors(self) -> list[FileDecision]:
        return [d for d in self.decisions if d.action == "error"]

    def summary(self) -> dict:
        skipped: dict[str, int] = {}
        for decision in self.decisions:
            if decision.action == "skip":
                key = decision.reason.split(":")[0]
                skipped[key] = skipped.get(key, 0) + 1
        processed = [d for d in self.decisions if d.action in ("archive", "finish")]
        return {
            "raw_dir": self.raw_dir,
            "dry_run": self.dry_run,
            "processed": len(processed),
            "new_sessions": sum(1 for d in self.decisions if d.action == "archive"),
            "skipped": skipped,
            "errors": [f"{d.path}: {d.reason}" for d in self.errors],
            "deleted_raw": sum(1 for d in self.decisions if d.deleted),
            "bytes_in": sum(d.bytes_raw for d in processed),
            "bytes_out": sum(d.bytes_compressed for d in self.decisions if d.action == "archive"),
            "months": self.months,
            "kept_raw": {"linked": len(self.kept.linked), "copied": len(self.kept.copied),
                         "orphans": len(self.kept.orphans)},
        }

    def to_json(self) -> dict:
        return {**self.summary(), "files": [asdict(d) for d in self.decisions]}


# ---------------------------------------------------------------- planning (pure: metadata only)


def select_candidates(
    raw_dir: Path, now: datetime, min_age_seconds: float, keep_newest: int,
    kept: set[tuple[int, int]] = frozenset(),
) -> tuple[list[Candidate], list[FileDecision]]:
    """Which raw logs may be archived now; every other log gets a skip decision with its reason.
    `kept`: (device, inode) of memctl's own second names (`l4.kept`), which are no other link."""
    if not raw_dir.is_dir():
        raise UsageError(f"raw-log folder {raw_dir} does not exist; pass RAW_DIR or set [archive] raw_dir")
    found: list[tuple[Path, os.stat_result]] = []
    skipped: list[FileDecision] = []
    for entry in os.scandir(raw_dir):
        if not (entry.name.startswith(RAW_GLOB_PREFIX) and entry.name.endswith(RAW_SUFFIX)):
            continue
        path = Path(entry.path)
        info = os.lstat(path)
        reason = _unsafe_reason(entry, info, (info.st_dev, info.st_ino) in kept)
        if reason:
            skipped.append(FileDecision(str(path), "skip", reason))
            continue
        if not _utf8_name(entry.name):  # the manifest and the zip record it as text: the rest go on
            skipped.append(FileDecision(str(path), "error", "its name is not UTF-8; rename it to archive it"))
            continue
        found.append((path, info))
    found.sort(key=lambda item: (item[1].st_mtime_ns, item[0].name), reverse=True)
    candidates: list[Candidate] = []
    cutoff = now.timestamp() - min_age_seconds
    for rank, (path, info) in enumerate(found):
        if rank < keep_newest:
            skipped.append(FileDecision(str(path), "skip", f"live: among the {keep_newest} newest logs (--keep-newest)"))
        elif info.st_mtime > cutoff:
            age = max(0, int(now.timestamp() - info.st_mtime))
            skipped.append(FileDecision(str(path), "skip", f"live: modified {_age_text(age)} ago (< --min-age)"))
        elif info.st_size == 0:
            skipped.append(FileDecision(str(path), "skip", "empty: nothing to archive, left in place"))
        else:
            candidates.append(Candidate(path, FileSignature.of(info)))
    candidates.sort(key=lambda c: (c.signature.mtime_ns, c.path.name))
    return candidates, skipped


def _unsafe_reason(entry: os.DirEntry, info: os.stat_result, kept: bool) -> str:
    if entry.is_symlink():
        return "unsafe: symlink, not followed"
    if not entry.is_file(follow_symlinks=False):
        return "unsafe: not a regular file"
    if info.st_nlink > 1 + kept:
        return "unsafe: hard-linked elsewhere, deleting it would not free or protect it"
    return ""


def _utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, as os.scandir gives them: lone surrogates
        return False
    return True


def _age_text(seconds: int) -> str:
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


# ---------------------------------------------------------------- the run


@dataclass
class ArchiveOptions:
    raw_dir: Path
    min_age_seconds: float
    keep_newest: int
    dry_run: bool = False
    zip_level: int = 6
    redact_patterns: tuple[str, ...] = ()


def options_from_settings(
    settings: Settings,
    raw_dir: Path | None,
    min_age: str | None,
    keep_newest: int | None,
    dry_run: bool,
) -> ArchiveOptions:
    keep = settings.get("archive", "keep_newest") if keep_newest is None else keep_newest
    if keep < 0:
        raise UsageError("--keep-newest must be 0 or more")
    return ArchiveOptions(
        raw_dir=settings.raw_dir(raw_dir),
        min_age_seconds=parse_duration(min_age if min_age is not None else settings.get("archive", "min_age")),
        keep_newest=keep,
        dry_run=dry_run,
        zip_level=int(settings.get("archive", "zip_level")),
        redact_patterns=tuple(settings.get("redaction", "extra_patterns")),
    )


def known_sessions(layout: Layout, recorded: dict[str, ManifestRecord] | None = None) -> dict[str, ManifestRecord]:
    """Archived sessions by sha256: the manifest (or `recorded`, already read from it), plus zip
    members a crash left unrecorded."""
    known = dict(recorded) if recorded is not None else {record.sha256: record for record in iter_manifest(layout)}
    for zip_path in monthly_zips(layout):
        try:
            for record in records_in_zip(zip_path):
                known.setdefault(record.sha256, record)
        except (zipfile.BadZipFile, OSError):
            continue
    return known


def run_archive(layout: Layout, options: ArchiveOptions, progress: Callable[[str], None] | None = None) -> ArchiveReport:
    """Archive every eligible raw log (the caller holds the writer lock unless dry_run)."""
    now = clock.now()
    report = ArchiveReport(raw_dir=str(options.raw_dir), dry_run=options.dry_run)
    if not options.dry_run:
        ensure_private_dir(layout.l4_dir)
        ensure_private_dir(layout.state_dir)
        sweep_stale_temp_files(layout.l4_dir)
        if options.raw_dir.is_dir() and beside_genericagent(layout):
            report.kept = keep_unarchived(layout, options.raw_dir)
    candidates, skipped = select_candidates(options.raw_dir, now, options.min_age_seconds, options.keep_newest,
                                            kept_inodes(layout))
    candidates += orphan_candidates(layout, options.raw_dir)
    report.decisions.extend(skipped)
    staging_dir = layout.l4_dir if not options.dry_run else Path(tempfile.mkdtemp(prefix="memctl-dry-run-"))
    try:
        _run_candidates(layout, options, candidates, staging_dir, now, report, progress)
    finally:
        if options.dry_run:
            shutil.rmtree(staging_dir, ignore_errors=True)
    return report


def _run_candidates(layout, options, candidates, staging_dir, now, report, progress) -> None:
    recorded = {record.sha256: record for record in iter_manifest(layout)}
    known = known_sessions(layout, recorded)
    names_taken = {record.name for record in known.values()}
    history_names = sessions_in_history(layout.histories)
    new_by_month: dict[str, list[tuple[Staged, ManifestRecord]]] = {}
    finishing: list[tuple[Staged, ManifestRecord, FileDecision]] = []
    archived_at = clock.iso(now)
    staging = stage_ahead(candidates, staging_dir, options.redact_patterns, options.zip_level)
    for number, (candidate, pending) in enumerate(staging, start=1):
        if progress:
            progress(f"[{number}/{len(candidates)}] reading {candidate.path.name}")
        try:
            staged = pending.result()
        except (OSError, IntegrityError) as exc:
            report.decisions.append(FileDecision(str(candidate.path), "error", f"cannot read: {exc}"))
            continue
        decision = FileDecision(
            str(candidate.path), "archive", "", sha256=staged.sha256,
            bytes_raw=staged.bytes_raw, bytes_compressed=staged.bytes_compressed,
        )
        report.decisions.append(decision)
        existing = known.get(staged.sha256)
        if existing is not None:
            staged.staging.unlink(missing_ok=True)
            decision.action, decision.name, decision.zip = "finish", existing.name, existing.zip
            decision.reason = f"already archived as {existing.name} in {existing.zip}"
            finishing.append((staged, existing, decision))
            continue
        staged.name = unique_name(staged.base_name, names_taken)
        names_taken.add(staged.name)
        staged.continues = _continued_session(known, candidate.path.name, staged.start)
        record = _record_for(staged, candidate.path.name, archived_at)
        known[staged.sha256] = record
        decision.name, decision.zip = staged.name, record.zip
        decision.reason = f"new session {staged.name} -> {record.zip}" + (
            f" (continues {staged.continues})" if staged.continues else ""
        )
        new_by_month.setdefault(staged.month, []).append((staged, record))
        finishing.append((staged, record, decision))
    if options.dry_run:
        report.months = sorted(new_by_month)
        for _, _, decision in finishing:
            decision.reason += "; raw file would be deleted after verification"
        return
    _commit(layout, options, new_by_month, finishing, recorded, history_names, report, progress)


def _continued_session(known: dict[str, ManifestRecord], source: str, start: datetime) -> str:
    """The latest archived session of the same raw file that ended before this one starts."""
    earlier = [r for r in known.values() if r.source == source and r.end and r.end <= start.isoformat()]
    return max(earlier, key=lambda r: r.end).name if earlier else ""


def _record_for(staged: Staged, source: str, archived_at: str) -> ManifestRecord:
    return ManifestRecord(
        name=staged.name,
        sha256=staged.sha256,
        source=source,
        zip=f"{staged.month}.zip",
        member=f"{staged.name}.txt",
        bytes_raw=staged.bytes_raw,
        bytes_compressed=staged.bytes_compressed,
        start=staged.start.isoformat(),
        end=staged.end.isoformat(),
        format=staged.format,
        archived_at=archived_at,
        entries=staged.entries,
        continues=staged.continues,
    )


def _commit(layout, options, new_by_month, finishing, recorded, history_names, report, progress) -> None:
    failures = write_month_zips(layout, new_by_month, progress)
    for month in sorted(new_by_month):
        for staged, _ in new_by_month[month]:
            staged.staging.unlink(missing_ok=True)
            if month in failures:
                _mark_error(report, staged, f"zip {month}.zip not written: {failures[month]}")
        if month not in failures:
            report.months.append(month)
    unrecorded = [r for s, r, d in finishing if d.action != "error" and r.sha256 not in recorded]
    append_records(layout, _unique_records(unrecorded))
    faults.checkpoint("manifest-appended")
    _append_missing_history(layout, finishing, history_names)
    for staged, record, decision in finishing:
        if decision.action == "error":
            continue
        decision.deleted = _delete_if_unchanged(layout, staged.candidate, decision)
        faults.checkpoint("raw-deleted")


def _unique_records(records: list[ManifestRecord]) -> list[ManifestRecord]:
    seen: set[str] = set()
    unique = []
    for record in records:
        if record.sha256 not in seen:
            seen.add(record.sha256)
            unique.append(record)
    return unique


def _mark_error(report: ArchiveReport, staged: Staged, reason: str) -> None:
    for decision in report.decisions:
        if decision.path == str(staged.candidate.path):
            decision.action, decision.reason = "error", reason


def _append_missing_history(layout: Layout, finishing, history_names: set[str]) -> None:
    blocks = []
    for staged, record, decision in finishing:
        if decision.action == "error" or record.name in history_names:
            continue
        history_names.add(record.name)
        blocks.append(history_block(record.name, staged.history))
    if blocks:
        append_whole_lines(layout, layout.histories, "".join(blocks).encode("utf-8", "surrogateescape"))
        faults.checkpoint("history-appended")


def _delete_if_unchanged(layout: Layout, candidate: Candidate, decision: FileDecision) -> bool:
    """Unlink the raw log only if it is still the file that was read and verified, and then
    its kept second name (`l4.kept`); a kept orphan is itself the file."""
    try:
        now_info = os.lstat(candidate.path)
    except FileNotFoundError:
        return False
    if FileSignature.of(now_info) != candidate.signature:
        decision.reason += "; raw file changed while archiving, left in place for the next run"
        return False
    os.unlink(candidate.path)
    if candidate.path.parent.parent == kept_dir(layout):
        decision.reason += "; kept by memctl after its raw log was deleted by another program"
        remove_if_empty(candidate.path.parent)
    else:
        drop_kept(layout, now_info.st_ino, candidate.path.name)
    return True
