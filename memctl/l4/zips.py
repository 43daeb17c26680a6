"""Monthly zips: write `<month>.zip` anew beside the old one with the new members added,
verify it (old members unchanged, every new member decodes to its raw sha256), rename it
into place. Members already deflated by staging are passed through, not deflated twice.
The new members of every month written in a run are verified side by side on the worker
threads, inflated by the same zlib (zlib-ng where installed) that deflated them."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.errors import IntegrityError
from memctl.core.fsutil import fsync_dir, refuse_symlink
from memctl.l4.codec import decode_stream
from memctl.l4.manifest import ManifestRecord
from memctl.l4.staging import ZLIB, Staged, worker_pool


def _zip_date(stamp: datetime) -> tuple[int, int, int, int, int, int]:
    year = min(max(stamp.year, 1980), 2107)
    return (year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)


@dataclass
class NewZip:
    """A month's zip written anew beside the old one (`tmp`), not yet verified or in place."""

    month: str
    path: Path
    tmp: Path
    old_members: list[tuple[str, int, int]]
    records: list[ManifestRecord]


def write_month_zips(
    layout: Layout, items_by_month: dict[str, list[tuple[Staged, ManifestRecord]]],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Exception]:
    """Write every month's zip anew beside the old one, verify the new members of all of them
    side by side (the largest first: one month's single large member would otherwise be read
    alone at the end), and rename each verified zip into place. Returns the months that were
    not written, with the reason; a month's zip is never renamed before its own verify passed."""
    failures: dict[str, Exception] = {}
    written: list[NewZip] = []
    try:
        for month in sorted(items_by_month):
            if progress:
                progress(f"writing {month}.zip ({len(items_by_month[month])} new sessions)")
            try:
                written.append(_write_beside(layout, month, items_by_month[month]))
            except (OSError, IntegrityError) as exc:
                failures[month] = exc
        verdicts = _verify_side_by_side(written)
        for new_zip in written:
            failure = verdicts[new_zip.month]
            if failure is None:
                try:
                    _put_in_place(layout, new_zip)
                except OSError as exc:
                    failure = exc
            if failure is not None:
                failures[new_zip.month] = failure
    finally:
        for new_zip in written:
            new_zip.tmp.unlink(missing_ok=True)  # gone already where it was renamed into place
    return failures


def _write_beside(layout: Layout, month: str, items: list[tuple[Staged, ManifestRecord]]) -> NewZip:
    zip_path = layout.l4_dir / f"{month}.zip"
    refuse_symlink(zip_path)  # it would be read through and then replaced
    fd, tmp_name = tempfile.mkstemp(dir=layout.l4_dir, prefix=f".{month}.zip.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        old_members = _member_signatures(zip_path) if zip_path.exists() else []
        if zip_path.exists():
            shutil.copyfile(zip_path, tmp)
        faults.checkpoint("zip-copied")
        with zipfile.ZipFile(tmp, "a" if old_members else "w", allowZip64=True) as archive:
            for staged, record in items:
                _add_member(archive, staged, record)
                faults.checkpoint("zip-member-written")
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        faults.checkpoint("zip-fsynced")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return NewZip(month, zip_path, tmp, old_members, [record for _, record in items])


def _put_in_place(layout: Layout, new_zip: NewZip) -> None:
    os.chmod(new_zip.tmp, 0o600)
    os.replace(new_zip.tmp, new_zip.path)
    fsync_dir(layout.l4_dir)
    faults.checkpoint("zip-replaced")


def _add_member(archive: zipfile.ZipFile, staged: Staged, record: ManifestRecord) -> None:
    info = zipfile.ZipInfo(record.member, date_time=_zip_date(staged.start))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o600 << 16
    info.comment = record.to_json().encode("utf-8")
    with archive.open(info, "w", force_zip64=True) as member, open(staged.staging, "rb") as source:
        # The staging file is already deflated: pass its bytes through, then state the CRC
        # and size of the data they inflate to, which is what the zip headers record.
        member._compressor = PassThrough()
        shutil.copyfileobj(source, member, 1 << 20)
        member._crc, member._file_size = staged.crc, staged.bytes_compressed


class PassThrough:
    def compress(self, data: bytes) -> bytes:
        return data

    def flush(self) -> bytes:
        return b""


def _member_signatures(zip_path: Path) -> list[tuple[str, int, int]]:
    try:
        with zipfile.ZipFile(zip_path) as archive:
            return [(i.filename, i.CRC, i.file_size) for i in archive.infolist()]
    except (zipfile.BadZipFile, OSError) as exc:
        raise IntegrityError(f"{zip_path} cannot be read ({exc}); it is left untouched, run `memctl verify`") from None


def verify_new_zip(zip_path: Path, old_members: list[tuple[str, int, int]], new: list[ManifestRecord]) -> None:
    """Old members unchanged; every new member decodes (CRC checked) to its raw sha256."""
    failure = _verify_side_by_side([NewZip("", zip_path, zip_path, old_members, new)])[""]
    if failure is not None:
        raise failure


def _verify_side_by_side(zips: list[NewZip]) -> dict[str, IntegrityError | None]:
    """Per month, None or why its zip fails: old members changed, or a new member that does not
    read back or decode to its raw sha256. Members are read side by side on the worker threads,
    each through its own handle (a shared ZipFile counts its readers without a lock), the
    largest first, so that the last to finish is small."""
    verdicts = {new_zip.month: _old_members_kept(new_zip) for new_zip in zips}
    checks = [(new_zip, record) for new_zip in zips if verdicts[new_zip.month] is None for record in new_zip.records]
    checks.sort(key=lambda check: check[1].bytes_compressed, reverse=True)
    futures = [(new_zip, worker_pool().submit(_verify_member, new_zip.tmp, new_zip.path.name, record))
               for new_zip, record in checks]
    concurrent.futures.wait([future for _, future in futures])
    for new_zip, future in futures:
        failure = future.exception()
        if failure is not None and verdicts[new_zip.month] is None:
            if not isinstance(failure, READ_BACK_FAILURES):
                raise failure
            verdicts[new_zip.month] = _as_integrity_error(new_zip.path.name, failure)
    return verdicts


# What reading a written member back can raise when the zip on disk is not what was written.
READ_BACK_FAILURES = (IntegrityError, zipfile.BadZipFile, OSError, EOFError, zlib.error, ZLIB.error)


def _old_members_kept(new_zip: NewZip) -> IntegrityError | None:
    try:
        with zipfile.ZipFile(new_zip.tmp) as archive:
            signatures = [(i.filename, i.CRC, i.file_size) for i in archive.infolist()]
    except (zipfile.BadZipFile, OSError) as exc:
        return _as_integrity_error(new_zip.path.name, exc)
    if signatures[: len(new_zip.old_members)] != new_zip.old_members:
        return IntegrityError(f"{new_zip.path.name}: existing members changed while adding new ones")
    return None


def _as_integrity_error(zip_name: str, failure: Exception) -> IntegrityError:
    if isinstance(failure, IntegrityError):
        return failure
    return IntegrityError(f"{zip_name}: written zip does not read back ({failure})")


def _verify_member(zip_path: Path, zip_name: str, record: ManifestRecord) -> None:
    with zipfile.ZipFile(zip_path) as archive, _open_member(archive, record.member) as member:
        if record.origin:  # GenericAgent's text, kept as it is: no raw log to decode to
            sha, size = hashlib.sha256(member.read()).hexdigest(), record.bytes_raw
        else:
            sha, size = decode_stream(member, _discard)
    if sha != record.sha256 or size != record.bytes_raw:
        raise IntegrityError(f"{zip_name}:{record.member} does not match the raw log")


def _open_member(archive: zipfile.ZipFile, name: str):
    """The member as zipfile reads it (CRC checked at its end), inflated by ZLIB."""
    member = archive.open(name)
    if member._compress_type == zipfile.ZIP_DEFLATED and ZLIB is not zlib:
        member._decompressor = ZLIB.decompressobj(-15)  # nothing read yet: same state as zipfile's
    return member


def _discard(_: bytes) -> None:
    return None


