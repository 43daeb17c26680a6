"""Reading archived L4 sessions back: find one by name (or sha256 prefix, or raw file name),
read its compressed text from its zip or loose file, or rebuild its raw bytes exactly."""

from __future__ import annotations

import io
import os
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from memctl.l4.archive import known_sessions
from memctl.l4.staging import Candidate, FileSignature, stage, unique_name
from memctl.l4.codec import decode_stream, is_session_header, read_trailer
from memctl.core.config import Layout
from memctl.core.errors import NotFound, UsageError
from memctl.core.fsutil import ensure_private_dir, safe_child
from memctl.l4.adopt import GENERICAGENT
from memctl.l4.history import history_block, iter_history_blocks
from memctl.l4.manifest import ManifestRecord, iter_manifest


@dataclass
class SessionRef:
    """An archived session: in a zip (record.zip set) or a loose compressed file."""

    name: str
    record: ManifestRecord | None
    loose_path: Path | None = None


def find_session(layout: Layout, ref: str) -> SessionRef:
    ref = ref.strip()
    if ref.endswith(".txt"):
        ref = ref[:-4]
    records = list(iter_manifest(layout))
    matches = [r for r in records if r.name == ref]
    if not matches and len(ref) >= 8 and all(c in "0123456789abcdef" for c in ref.lower()):
        matches = [r for r in records if r.sha256.startswith(ref.lower())]
    if not matches:
        matches = [r for r in records if r.source in (ref, ref + ".txt")]
    if matches:
        record = matches[-1]
        return SessionRef(record.name, record)
    loose = layout.l4_dir / f"{ref}.txt"
    safe_child(layout.l4_dir, f"{ref}.txt")
    if loose.is_file() and not loose.is_symlink():
        return SessionRef(ref, None, loose)
    raise NotFound(f"no archived session named {ref!r}; `memctl status` or the manifest lists them")


def find_unarchived(layout: Layout, raw_dir: Path, ref: str) -> Path | None:
    """A raw log not archived yet, by its file name (with or without .txt): in `raw_dir`, or
    kept by memctl after another program deleted it (`l4.kept`). None when there is none."""
    from memctl.l4.kept import is_raw_log_name, kept_logs, orphan_candidates

    name = ref.strip().removesuffix(".txt") + ".txt"
    if not is_raw_log_name(name) or "/" in name or "\\" in name or "\x00" in name:
        return None
    path = Path(raw_dir) / name
    if path.is_file() and not path.is_symlink():
        return path
    kept = [c.path for c in orphan_candidates(layout, Path(raw_dir)) if c.path.name == name] if kept_logs(layout) else []
    return kept[-1] if kept else None


def copy_out(path: Path, write: Callable[[bytes], None]) -> None:
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            write(chunk)


@contextmanager
def open_compressed(layout: Layout, session: SessionRef) -> Iterator[BinaryIO]:
    """The compressed session as a binary stream, from its zip member or loose file."""
    if session.record is not None:
        zip_path = safe_child(layout.l4_dir, session.record.zip)
        try:
            with zipfile.ZipFile(zip_path) as archive, archive.open(session.record.member) as member:
                yield io.BufferedReader(member, buffer_size=1 << 20)
        except (KeyError, FileNotFoundError):
            raise NotFound(f"{session.record.zip} has no member {session.record.member}; run `memctl verify`") from None
        return
    with open(session.loose_path, "rb") as handle:
        yield handle


def write_raw(layout: Layout, session: SessionRef, write: Callable[[bytes], None]) -> tuple[str, int]:
    """Rebuild the original raw log byte for byte (its sha256 is checked on the way)."""
    if session.record is not None and session.record.origin == GENERICAGENT:
        raise NotFound(f"{session.name} was archived by GenericAgent, which keeps no raw bytes (it drops system "
                       f"prompts and echoes); `memctl show {session.name}` prints what it kept")
    with open_compressed(layout, session) as stream:
        return decode_stream(stream, write)


def write_compressed(layout: Layout, session: SessionRef, write: Callable[[bytes], None]) -> None:
    if session.record is not None and not session.record.zip:  # known from all_histories.txt alone
        write(_history_text(layout, session.record.name).encode("utf-8", "surrogateescape"))
        return
    with open_compressed(layout, session) as stream:
        while chunk := stream.read(1 << 20):
            write(chunk)


def _history_text(layout: Layout, name: str) -> str:
    for block_name, lines in iter_history_blocks(layout.histories):
        if block_name == name:
            return history_block(name, lines).lstrip("\n")
    raise NotFound(f"{name} is known only from all_histories.txt, which no longer has its block; run `memctl verify`")


# ---------------------------------------------------------------- `compress FILE…`


@dataclass
class CompressResult:
    source: str
    destination: str
    bytes_before: int
    bytes_after: int
    status: str  # written | unchanged | already-archived
    name: str = ""

    @property
    def ratio(self) -> float:
        return self.bytes_after / self.bytes_before if self.bytes_before else 0.0


def compress_file(layout: Layout, path: Path, extra_patterns: tuple[str, ...] = ()) -> CompressResult:
    """Write the compressed form of one raw log into L4 as `<name>.txt`; never touches the input."""
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink; pass the real file")
    if not path.is_file():
        raise NotFound(f"{path}: no such file")
    ensure_private_dir(layout.l4_dir)
    info = os.stat(path)
    staged = stage(Candidate(path, FileSignature.of(info)), layout.l4_dir, extra_patterns, level=None)
    try:
        archived = known_sessions(layout).get(staged.sha256)
        if archived is not None:
            return CompressResult(str(path), f"{archived.zip}:{archived.member}", staged.bytes_raw,
                                  archived.bytes_compressed, "already-archived", archived.name)
        base = staged.base_name
        taken = set()
        name = base
        while (layout.l4_dir / f"{name}.txt").exists():
            existing = (layout.l4_dir / f"{name}.txt").read_bytes()
            trailer = read_trailer(existing) if is_session_header(existing) else None
            if trailer and trailer[0] == staged.sha256:
                return CompressResult(str(path), str(layout.l4_dir / f"{name}.txt"), staged.bytes_raw,
                                      len(existing), "unchanged", name)
            taken.add(name)
            name = unique_name(base, taken)
        destination = layout.l4_dir / f"{name}.txt"
        os.chmod(staged.staging, 0o600)
        os.replace(staged.staging, destination)
        return CompressResult(str(path), str(destination), staged.bytes_raw, staged.bytes_compressed, "written", name)
    finally:
        staged.staging.unlink(missing_ok=True)
