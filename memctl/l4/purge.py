"""Erasing strings from L4 for `forget --purge`: history, archived sessions, loose sessions.

A purge is the one change that rewrites archived sessions. Each session that holds a needle
is decoded to its raw bytes, the needles are replaced by a mark, and the result is encoded
again — a new sha256, recorded in the zip member's comment and the manifest. Every zip is
rebuilt beside the old one (untouched members copied as they are, compressed bytes and CRC
unchanged), verified, and renamed over it, exactly as the archive cycle does; the manifest is
then rebuilt from the zips. The caller holds the writer lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from memctl.core import clock, faults
from memctl.l4.adopt import member_record
from memctl.l4.staging import Candidate, FileSignature, stage
from memctl.l4.zips import PassThrough, verify_new_zip
from memctl.l4.codec import HEADER, decode_stream, is_session_header
from memctl.core.config import Layout
from memctl.core.errors import IntegrityError
from memctl.core.fsutil import atomic_write_bytes, fsync_dir
from memctl.l4.manifest import ManifestRecord, append_records, iter_manifest, monthly_zips, rebuild_from_zips

MARK = b"[PURGED]"
_CHUNK = 4 << 20


def purge_l4(layout: Layout, needles: Iterable[bytes], mark: bytes = MARK, pending: list[str] | None = None) -> list[str]:
    """Remove every needle from all_histories.txt, the monthly zips and loose sessions.
    Returns one line per file rewritten. With `pending`, a zip that cannot be read is noted
    there (`path: why`) and the others are still scrubbed; the manifest is then not rebuilt."""
    needles = sorted({n for n in needles if n}, key=len, reverse=True)
    if not needles or not layout.l4_dir.is_dir():
        return []
    done = []
    if layout.histories.exists() and _replace_in_file(layout.histories, needles, mark):
        done.append(f"{layout.histories}: history lines scrubbed")
    zips_changed = False
    adopted = [r for r in iter_manifest(layout) if r.origin]
    faults.checkpoint("purge-history")
    for zip_path in monthly_zips(layout):
        try:
            changed = _purge_zip(layout, zip_path, needles, mark, {(r.zip, r.member): r for r in adopted})
        except Exception as exc:  # one damaged zip must not keep the string in all the others
            if pending is None:
                raise
            pending.append(f"{zip_path}: {str(exc) or type(exc).__name__}")
            continue
        faults.checkpoint("purge-zip")
        if changed:
            zips_changed = True
            done.append(f"{zip_path}: {len(changed)} sessions rewritten ({', '.join(changed)})")
    if zips_changed and not pending:
        rebuild_manifest(layout, adopted)
        faults.checkpoint("purge-manifest")
        done.append(f"{layout.manifest}: rebuilt from the zips")
    for loose in sorted(layout.l4_dir.glob("*.txt")):
        if loose == layout.histories or loose.is_symlink():
            continue
        if _purge_loose_session(layout, loose, needles, mark):
            done.append(f"{loose}: session rewritten")
            faults.checkpoint("purge-loose")
    return done


def _replace_in_file(path: Path, needles: list[bytes], mark: bytes) -> bool:
    data = path.read_bytes()
    new = _replace_all(data, needles, mark)
    if new == data:
        return False
    atomic_write_bytes(path, new)
    return True


def _replace_all(data: bytes, needles: list[bytes], mark: bytes) -> bytes:
    for needle in needles:
        data = data.replace(needle, mark)
    return data


class _StreamingReplacer:
    """Replaces needles in a byte stream, holding back enough bytes to catch one split
    across two chunks; tells whether anything was replaced."""

    def __init__(self, needles: list[bytes], mark: bytes, write: Callable[[bytes], None]):
        self.needles, self.mark, self.write = needles, mark, write
        self.keep = max(len(n) for n in needles) - 1
        self.pending = b""
        self.replaced = False

    def feed(self, data: bytes) -> None:
        data = self.pending + data
        new = _replace_all(data, self.needles, self.mark)
        self.replaced |= new != data
        cut = max(0, len(new) - self.keep)
        self.write(new[:cut])
        self.pending = new[cut:]

    def close(self) -> None:
        if self.pending:
            self.write(self.pending)
            self.pending = b""


def _raw_with_needles_replaced(source: BinaryIO, needles: list[bytes], mark: bytes, folder: Path) -> Path | None:
    """Decode a compressed session into a temp raw file with the needles replaced;
    None (and no file) when it held none of them."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".purge-", suffix=".tmp")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            replacer = _StreamingReplacer(needles, mark, out.write)
            decode_stream(source, replacer.feed)
            replacer.close()
        if replacer.replaced:
            return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    path.unlink(missing_ok=True)
    return None


def rebuild_manifest(layout: Layout, adopted: list[ManifestRecord] | None = None) -> None:
    """The manifest rebuilt from the zips, adopted sessions kept (how a purge, or a resumed one, ends)."""
    if adopted is None:
        adopted = [r for r in iter_manifest(layout) if r.origin]
    _keep_adopted(adopted, rebuild_from_zips(layout), layout)


def _keep_adopted(adopted: list[ManifestRecord], rebuilt: list[ManifestRecord], layout: Layout) -> None:
    """Sessions adopted from GenericAgent carry no record in a member comment unless a purge
    rewrote them: the manifest rebuilt from the comments gets the others back from before."""
    present = {(r.zip, r.member) for r in rebuilt}
    append_records(layout, [r for r in adopted if not r.zip or (r.zip, r.member) not in present])


def _purge_zip(layout: Layout, zip_path: Path, needles: list[bytes], mark: bytes,
               adopted: dict[tuple[str, str], ManifestRecord]) -> list[str]:
    rewritten: dict[str, tuple[object, ManifestRecord]] = {}
    with zipfile.ZipFile(zip_path) as archive:
        infos = archive.infolist()
        for info in infos:
            if not info.comment:  # GenericAgent's member: its own text, no raw bytes to rebuild
                scrubbed = _scrub_text_member(archive, info, needles, mark, layout.l4_dir,
                                              adopted.get((zip_path.name, info.filename)))
                if scrubbed is not None:
                    rewritten[info.filename] = scrubbed
                continue
            record = _record_of(info)
            with archive.open(info) as member:
                raw = _raw_with_needles_replaced(member, needles, mark, layout.l4_dir)
            if raw is None:
                continue
            try:
                staged = stage(Candidate(raw, FileSignature.of(os.stat(raw))), layout.l4_dir)
            finally:
                raw.unlink(missing_ok=True)
            new_record = replace(record, sha256=staged.sha256, bytes_raw=staged.bytes_raw,
                                 bytes_compressed=staged.bytes_compressed, purged=clock.iso())
            rewritten[info.filename] = (staged, new_record)
    if rewritten:
        try:
            _rebuild_zip(layout, zip_path, infos, rewritten)
        finally:
            for staged, _ in rewritten.values():
                staged.staging.unlink(missing_ok=True)
    return [record.name for _, record in rewritten.values()]


@dataclass
class _TextMember:
    """A rewritten GenericAgent member, deflated into a staging file like a staged session."""

    staging: Path
    crc: int
    bytes_compressed: int  # its size inflated, as Staged names it


def _scrub_text_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, needles: list[bytes], mark: bytes,
                       folder: Path, record: ManifestRecord | None) -> tuple[_TextMember, ManifestRecord] | None:
    data = archive.read(info)
    new = data
    for needle in needles:
        new = new.replace(needle, mark)
    if new == data:
        return None
    if record is None:  # not adopted yet: adopt it now, so that the rewrite is recorded
        record = member_record(Path(archive.filename), info, data, set())
    fd, name = tempfile.mkstemp(dir=folder, prefix=".purge-", suffix=".tmp")
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    with os.fdopen(fd, "wb") as out:
        out.write(compressor.compress(new) + compressor.flush())
    member = _TextMember(Path(name), zlib.crc32(new), len(new))
    return member, replace(record, sha256=hashlib.sha256(new).hexdigest(), bytes_compressed=len(new), purged=clock.iso())


def _record_of(info: zipfile.ZipInfo) -> ManifestRecord:
    return ManifestRecord.from_dict(json.loads(info.comment.decode("utf-8")))


def _rebuild_zip(layout: Layout, zip_path: Path, infos: list[zipfile.ZipInfo], rewritten: dict) -> None:
    fd, tmp_name = tempfile.mkstemp(dir=layout.l4_dir, prefix=f".{zip_path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    kept = []
    try:
        with zipfile.ZipFile(tmp, "w", allowZip64=True) as new, open(zip_path, "rb") as old:
            for info in infos:
                if info.filename in rewritten:
                    staged, record = rewritten[info.filename]
                    _write_member(new, info, record.to_json().encode("utf-8"), staged.crc, staged.bytes_compressed,
                                  lambda out, s=staged: shutil.copyfileobj(open(s.staging, "rb"), out, 1 << 20))
                else:
                    kept.append((info.filename, info.CRC, info.file_size))
                    _write_member(new, info, info.comment, info.CRC, info.file_size,
                                  lambda out, i=info: _copy_compressed(old, i, out))
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        _verify_rebuilt(tmp, kept, [record for _, record in rewritten.values()])
        os.chmod(tmp, 0o600)
        os.replace(tmp, zip_path)
        fsync_dir(layout.l4_dir)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_member(archive: zipfile.ZipFile, old: zipfile.ZipInfo, comment: bytes, crc: int, size: int,
                  copy_compressed: Callable) -> None:
    info = zipfile.ZipInfo(old.filename, date_time=old.date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o600 << 16
    info.comment = comment
    with archive.open(info, "w", force_zip64=True) as member:
        member._compressor = PassThrough()  # the bytes copied in are deflated already
        copy_compressed(member)
        member._crc, member._file_size = crc, size


def _copy_compressed(old_file: BinaryIO, info: zipfile.ZipInfo, out) -> None:
    """Copy a member's deflated bytes as they are (no inflate, no deflate)."""
    old_file.seek(info.header_offset)
    header = old_file.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    old_file.seek(info.header_offset + 30 + name_length + extra_length)
    remaining = info.compress_size
    while remaining:
        chunk = old_file.read(min(remaining, _CHUNK))
        if not chunk:
            raise zipfile.BadZipFile(f"{info.filename}: member data ends early")
        out.write(chunk)
        remaining -= len(chunk)


def _verify_rebuilt(zip_path: Path, kept: list[tuple[str, int, int]], new: list[ManifestRecord]) -> None:
    """Kept members unchanged and readable (CRC), rewritten ones decode to their new sha256."""
    with zipfile.ZipFile(zip_path) as archive:
        signatures = {(i.filename, i.CRC, i.file_size) for i in archive.infolist()}
        missing = [name for name, crc, size in kept if (name, crc, size) not in signatures]
        bad = archive.testzip()
    if missing or bad is not None:
        raise IntegrityError(f"{zip_path.name}: rebuilt zip does not read back ({(missing or [bad])[0]})")
    verify_new_zip(zip_path, [], new)


def _purge_loose_session(layout: Layout, path: Path, needles: list[bytes], mark: bytes) -> bool:
    with open(path, "rb") as handle:
        if not is_session_header(handle.read(len(HEADER))):
            return False
        handle.seek(0)
        raw = _raw_with_needles_replaced(handle, needles, mark, layout.l4_dir)
    if raw is None:
        return False
    try:
        staged = stage(Candidate(raw, FileSignature.of(os.stat(raw))), layout.l4_dir, level=None)
        os.chmod(staged.staging, 0o600)
        os.replace(staged.staging, path)
        fsync_dir(layout.l4_dir)
    finally:
        raw.unlink(missing_ok=True)
    return True
