"""Monthly zips: write `<month>.zip` anew beside the old one with the new members added,
verify it (old members unchanged, every new member decodes to its raw sha256), rename it
into place. Members already deflated by staging are passed through, not deflated twice.
The new members are verified side by side on the worker threads, inflated by the same
zlib (zlib-ng where installed) that deflated them."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import tempfile
import zipfile
import zlib
from datetime import datetime
from pathlib import Path

from memctl.core import faults
from memctl.core.config import Layout
from memctl.core.errors import IntegrityError
from memctl.core.fsutil import fsync_dir
from memctl.l4.codec import decode_stream
from memctl.l4.manifest import ManifestRecord
from memctl.l4.staging import ZLIB, Staged, worker_pool


def _zip_date(stamp: datetime) -> tuple[int, int, int, int, int, int]:
    year = min(max(stamp.year, 1980), 2107)
    return (year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)


def write_month_zip(layout: Layout, month: str, items: list[tuple[Staged, ManifestRecord]]) -> Path:
    """Write `<month>.zip` anew beside the old one, verify it, and rename it into place."""
    zip_path = layout.l4_dir / f"{month}.zip"
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
        verify_new_zip(tmp, old_members, [record for _, record in items])
        os.chmod(tmp, 0o600)
        os.replace(tmp, zip_path)
        fsync_dir(layout.l4_dir)
        faults.checkpoint("zip-replaced")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return zip_path


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
    try:
        with zipfile.ZipFile(zip_path) as archive:
            signatures = [(i.filename, i.CRC, i.file_size) for i in archive.infolist()]
            if signatures[: len(old_members)] != old_members:
                raise IntegrityError(f"{zip_path.name}: existing members changed while adding new ones")
        # Members read side by side, each through its own handle (a shared ZipFile counts its
        # readers without a lock); the largest first, so that the last to finish is small.
        ordered = sorted(new, key=lambda record: record.bytes_compressed, reverse=True)
        checks = [worker_pool().submit(_verify_member, zip_path, record) for record in ordered]
        concurrent.futures.wait(checks)
        for check in checks:
            check.result()
    except zipfile.BadZipFile as exc:
        raise IntegrityError(f"{zip_path.name}: written zip does not read back ({exc})") from None


def _verify_member(zip_path: Path, record: ManifestRecord) -> None:
    with zipfile.ZipFile(zip_path) as archive, _open_member(archive, record.member) as member:
        if record.origin:  # GenericAgent's text, kept as it is: no raw log to decode to
            sha, size = hashlib.sha256(member.read()).hexdigest(), record.bytes_raw
        else:
            sha, size = decode_stream(member, _discard)
    if sha != record.sha256 or size != record.bytes_raw:
        raise IntegrityError(f"{zip_path.name}:{record.member} does not match the raw log")


def _open_member(archive: zipfile.ZipFile, name: str):
    """The member as zipfile reads it (CRC checked at its end), inflated by ZLIB."""
    member = archive.open(name)
    if member._compress_type == zipfile.ZIP_DEFLATED and ZLIB is not zlib:
        member._decompressor = ZLIB.decompressobj(-15)  # nothing read yet: same state as zipfile's
    return member


def _discard(_: bytes) -> None:
    return None


