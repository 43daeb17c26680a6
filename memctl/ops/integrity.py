"""`verify`: read everything back and report what is not as it should be (design.md §9).

Checks, each producing `Finding`s (never raising for a damaged file; a damaged file is the
point of the check):

- every manifest record has its zip member, the member's CRC reads clean and it decodes to
  the record's sha256 and size; every zip member has a manifest record; loose compressed
  sessions decode to their own trailer;
- `all_histories.txt` is valid UTF-8, its SESSION blocks are unique, and every archived
  session has one;
- L1 keeps its limits (the same lint as `insight check`);
- files under the root are 0600 and folders 0700 (nothing readable by group or others);
- no secrets in L2, L3, L5 and L6 (L1 is covered by its own lint);
- every line of L5, L6, the manifest and the dream log parses.

Sessions adopted from GenericAgent's own archive (`l4.adopt`) have no raw bytes: their
member must read back with a clean CRC and still be the bytes adopted, and their history
block must be there. Each finding is an error (integrity: `verify` exits 3) or a warning
(hygiene: shown, exit 0 unless --strict); see `Finding`.

verify takes no lock: it only reads. A zip member that appears while an archive run is
committing may have no manifest record yet, so orphans are confirmed against a second read
of the manifest before they are reported.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from memctl.l4.codec import HEADER, decode_stream, is_session_header
from memctl.core.config import Layout
from memctl.core.errors import IntegrityError
from memctl.l4.kept import kept_dir
from memctl.l4.manifest import ManifestRecord, iter_manifest, monthly_zips

PRIVATE_BITS = 0o077  # any permission for group or others


ERROR, WARNING = "error", "warning"


@dataclass
class Finding:
    """One problem. An error is damage to what memctl keeps (a member that does not decode to
    its sha256, a torn line, a missing session); a warning is hygiene (permissions, L1 limits
    and pointers, a secret in plain text, a repeated history block, GenericAgent's archive
    not yet adopted), which needs a person but loses nothing."""

    path: str
    kind: str  # zip, member, orphan, unadopted, manifest, history, insight-<kind>, permissions, secret, l5, l6, dream-log, symlink, purge-order
    message: str
    severity: str = ERROR

    def line(self) -> str:
        return f"{self.path}: {self.kind}: {self.message}" + (" [warning]" if self.severity == WARNING else "")

    def to_json(self) -> dict:
        return {"type": "finding", "path": self.path, "kind": self.kind, "message": self.message,
                "severity": self.severity}


@dataclass
class VerifyReport:
    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: {
        "zips": 0, "sessions": 0, "loose_sessions": 0, "history_blocks": 0, "files": 0, "folders": 0,
        "scanned_for_secrets": 0, "entries": 0})

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    def summary(self) -> dict:
        kinds: dict[str, int] = {}
        for finding in self.findings:
            kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        return {"type": "summary", "ok": self.ok, "findings": len(self.findings), "errors": len(self.errors),
                "warnings": len(self.warnings), "by_kind": kinds, "checked": dict(self.checked)}


def verify(layout: Layout, max_lines: int = 30, max_bytes: int = 1024,
           extra_patterns: Sequence[str] = (), max_member_bytes: int = 64 << 20) -> VerifyReport:
    report = _check_l4(layout)
    _check_archiver(layout, report)
    _check_member_sizes(layout, max_member_bytes, report)
    _check_insight(layout, max_lines, max_bytes, report)
    _check_permissions(layout, report)
    _check_secrets(layout, extra_patterns, report)
    from memctl.longterm.store import entry_store_files, open_store

    links = [path for path in entry_store_files(layout) if path.is_symlink()]
    for path in links:
        report.findings.append(Finding(str(path), "symlink", "memctl does not follow links in the memory; every "
                                                              "command refuses this one (remove the link and rerun)"))
    if links:
        return report
    store = open_store(layout)
    if store.on_server:
        _check_server_rows(store, report)
        _check_purge_orders(store, report)
        return report
    _check_jsonl(layout.long_term, "l5", _entry_problem, report)
    _check_jsonl(layout.cold_archive, "l6", _entry_problem, report)
    _check_jsonl(layout.dream_log, "dream-log", _object_problem, report)
    return report


def _check_purge_orders(store, report: VerifyReport) -> None:
    """A team memory's purge orders that some machine has not applied: its files may still
    hold the string (a warning: each machine applies them at its next search or refresh)."""
    from memctl.longterm.purge_orders import waiting

    for run, at, hosts in waiting(store.server, store.server.schema):
        report.findings.append(Finding(
            f"purge {run}", "purge-order",
            f"made {at}, not applied yet on {' '.join(hosts)} (each machine applies it at its next search, "
            "refresh, show, recent or compose; a machine that is gone: `memctl retire-machine HOST:/ROOT/`)",
            WARNING))


def _check_server_rows(store, report: VerifyReport) -> None:
    """L5 and L6 rows of a server memory read back as entries (line numbers as `export` writes
    them), no id twice in L5, and the dream log's rows as JSON."""
    from memctl.longterm.store import duplicate_ids

    for kind, part in (("l5", store.active), ("l6", store.archive)):
        rows = part.snapshot().rows
        for number, row in enumerate(rows, start=1):
            problem = _line_problem(row.raw, _entry_problem)
            if problem:
                report.findings.append(Finding(f"{part.location}:{number}", kind, problem))
            else:
                report.checked["entries"] += 1
        if kind == "l5":
            for entry_id in sorted(duplicate_ids(rows)):
                report.findings.append(Finding(part.location, kind, f"id {entry_id} is on more than one row"))
    for number, raw in enumerate((raw for _, raw in store.log_lines()), start=1):
        problem = _line_problem(raw, _object_problem)
        if problem:
            report.findings.append(Finding(f"{store.log_location}:{number}", "dream-log", problem))


# ---------------------------------------------------------------- L4: manifest and zips


def _check_l4(layout: Layout, attempts: int = 2) -> VerifyReport:
    """The L4 checks; rerun once if L4 changed while they ran (an archive or a purge committing
    between our read of the manifest and of the zips), so a race is not reported as damage."""
    for attempt in range(attempts):
        before = _l4_signature(layout)
        report = VerifyReport()
        records = _check_manifest_lines(layout, report)
        _check_zips(layout, records, report)
        _check_loose_sessions(layout, report)
        _check_history(layout, records, report)
        if report.ok or _l4_signature(layout) == before:
            break
    return report


def _l4_signature(layout: Layout) -> list[tuple[str, int, int]]:
    if not layout.l4_dir.is_dir():
        return []
    found = []
    for path in sorted(layout.l4_dir.iterdir()):
        try:
            info = path.stat()
        except OSError:
            continue
        found.append((path.name, info.st_size, info.st_mtime_ns))
    return found


def _check_manifest_lines(layout: Layout, report: VerifyReport) -> list[ManifestRecord]:
    records: list[ManifestRecord] = []
    for number, data, problem in _json_lines(layout.manifest):
        if problem is None:
            try:
                record = ManifestRecord.from_dict(data)
            except TypeError as exc:
                problem = f"not a manifest record ({exc})"
            else:
                records.append(record)
                continue
        report.findings.append(Finding(f"{layout.manifest}:{number}", "manifest", problem))
    return records


def _check_zips(layout: Layout, records: list[ManifestRecord], report: VerifyReport) -> None:
    by_zip: dict[str, list[ManifestRecord]] = {}
    for record in records:
        if record.zip or not record.origin:  # a GenericAgent session known from all_histories.txt alone has none
            by_zip.setdefault(record.zip, []).append(record)
    names = sorted(set(by_zip) | {p.name for p in monthly_zips(layout)})
    for zip_name in names:
        if not zip_name or "/" in zip_name or "\\" in zip_name or zip_name.startswith("."):
            for record in by_zip[zip_name]:
                report.findings.append(Finding(str(layout.manifest), "manifest",
                                               f"{record.name} names zip {zip_name!r}, which is not a file name in L4"))
            continue
        zip_path = layout.l4_dir / zip_name
        wanted = by_zip.get(zip_name, [])
        if not zip_path.is_file():
            for record in wanted:
                report.findings.append(Finding(str(zip_path), "member",
                                               f"{record.member} ({record.name}) is in the manifest but the zip is missing"))
            continue
        report.checked["zips"] += 1
        try:
            with zipfile.ZipFile(zip_path) as archive:
                _check_members(layout, zip_path, archive, wanted, report)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            report.findings.append(Finding(str(zip_path), "zip", f"cannot be read as a zip ({exc})"))


def _check_member_sizes(layout: Layout, cap: int, report: VerifyReport) -> None:
    """A member that inflates past [index] max_member_bytes is searched only up to it."""
    for zip_path in sorted(layout.l4_dir.glob("*.zip")):
        try:
            with zipfile.ZipFile(zip_path) as archive:
                big = [info for info in archive.infolist() if info.file_size > cap]
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            continue  # reported by the zip check
        report.findings.extend(Finding(f"{zip_path}:{info.filename}", "member",
                                       f"inflates to {info.file_size} bytes, past [index] max_member_bytes "
                                       f"({cap}): search reads only its first {cap} bytes") for info in big)


def _check_members(layout: Layout, zip_path: Path, archive: zipfile.ZipFile,
                   wanted: list[ManifestRecord], report: VerifyReport) -> None:
    present = {info.filename: info for info in archive.infolist()}
    for record in wanted:
        report.checked["sessions"] += 1
        where = f"{zip_path}:{record.member}"
        if record.member not in present:
            report.findings.append(Finding(where, "member", f"{record.name} is in the manifest but not in the zip"))
            continue
        problem = (_adopted_member_problem if record.origin else _member_problem)(archive, present[record.member], record)
        if problem:
            report.findings.append(Finding(where, "member", f"{record.name}: {problem}"))
    recorded = {r.member for r in wanted}
    orphans = [name for name in present if name not in recorded and not name.endswith("/")]
    if orphans:
        again = {r.member for r in iter_manifest(layout) if r.zip == zip_path.name}
        for name in orphans:
            if name in again:
                continue
            if _written_by_genericagent(archive, present[name]):
                report.findings.append(Finding(f"{zip_path}:{name}", "unadopted", "archived by GenericAgent and "
                                               "not yet in the manifest; `memctl init` adopts it", WARNING))
            else:
                report.findings.append(Finding(f"{zip_path}:{name}", "orphan",
                                               f"zip member has no manifest record{_comment_hint(present[name])}"))


def _written_by_genericagent(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    """No record in its comment and not memctl's encoding: GenericAgent's own archiver wrote it."""
    if info.comment or not info.filename.endswith(".txt"):
        return False
    try:
        with archive.open(info) as member:
            return not is_session_header(member.read(len(HEADER)))
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError):
        return False


def _adopted_member_problem(archive: zipfile.ZipFile, info: zipfile.ZipInfo, record: ManifestRecord) -> str:
    """'' when a member GenericAgent wrote reads with a clean CRC and is still the bytes adopted."""
    digest = hashlib.sha256()
    try:
        with archive.open(info) as member:
            while chunk := member.read(1 << 20):
                digest.update(chunk)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError) as exc:
        return f"does not read back ({exc})"
    if digest.hexdigest() != record.sha256:
        return f"is not the member adopted from GenericAgent (sha256 {digest.hexdigest()[:12]}…, the manifest says {record.sha256[:12]}…)"
    return ""


def _member_problem(archive: zipfile.ZipFile, info: zipfile.ZipInfo, record: ManifestRecord) -> str:
    """'' when the member reads with a clean CRC and decodes to the record's sha256 and size."""
    try:
        with archive.open(info) as member:
            sha, size = decode_stream(member, _discard)
            while member.read(1 << 20):  # drain to the end: the CRC is checked only at EOF
                pass
    except IntegrityError as exc:
        return str(exc)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError) as exc:
        return f"does not read back ({exc})"
    if sha != record.sha256:
        return f"decodes to sha256 {sha[:12]}…, the manifest says {record.sha256[:12]}…"
    if size != record.bytes_raw:
        return f"decodes to {size} bytes, the manifest says {record.bytes_raw}"
    return ""


def _comment_hint(info: zipfile.ZipInfo) -> str:
    try:
        name = json.loads(info.comment.decode("utf-8")).get("name")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return f" (its comment names session {name}; `memctl` can rebuild the manifest from the zips)" if name else ""


def _discard(_: bytes) -> None:
    return None


def _check_loose_sessions(layout: Layout, report: VerifyReport) -> None:
    """Compressed sessions written by `compress` (not yet in a zip) decode to their trailer."""
    if not layout.l4_dir.is_dir():
        return
    for path in sorted(layout.l4_dir.glob("*.txt")):
        if path.name == layout.histories.name or path.name.startswith(".") or path.is_symlink():
            continue
        try:
            with open(path, "rb") as handle:
                if not is_session_header(handle.read(len(HEADER))):
                    continue  # not memctl's (a GenericAgent checkout keeps its own files here)
                handle.seek(0)
                report.checked["loose_sessions"] += 1
                decode_stream(handle, _discard)
        except IntegrityError as exc:
            report.findings.append(Finding(str(path), "session", str(exc)))
        except OSError as exc:
            report.findings.append(Finding(str(path), "session", f"cannot be read ({exc})"))


def _check_archiver(layout: Layout, report: VerifyReport) -> None:
    """GenericAgent's own archiver beside memctl's sessions deletes logs memctl has not seen
    (a `git pull` in the checkout can bring it back after `memctl init` replaced it)."""
    from memctl.ops.genericagent import archiver_active

    if archiver_active(layout.root) and any(not r.origin for r in iter_manifest(layout)):
        report.findings.append(Finding(str(layout.l4_dir / "compress_session.py"), "archiver",
                                       "GenericAgent's own archiver is active beside memctl's archive and may delete "
                                       "logs memctl has not archived; `memctl init` hands it over", WARNING))
    _check_interpreters(layout, report)


def _check_interpreters(layout: Layout, report: VerifyReport) -> None:
    """The shim, the plugin and the timers run the Python that wrote them: gone, they fail."""
    from memctl.ops.genericagent import rendered_files
    from memctl.ops.interpreters import stale_commands
    from memctl.ops.schedule import default_unit_dir

    for path, problem in stale_commands(layout.root, rendered_files(layout.root), default_unit_dir()):
        report.findings.append(Finding(str(path), "interpreter", problem, WARNING))


# ---------------------------------------------------------------- L4: the history file


def _check_history(layout: Layout, records: list[ManifestRecord], report: VerifyReport) -> None:
    from memctl.l4.history import SEPARATOR

    path = layout.histories
    if not path.exists():
        if records:
            report.findings.append(Finding(str(path), "history", f"missing, but {len(records)} sessions are archived"))
        return
    try:
        data = path.read_bytes()
    except OSError as exc:
        report.findings.append(Finding(str(path), "history", f"cannot be read ({exc})"))
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.findings.append(Finding(str(path), "history", f"not valid UTF-8 at byte {exc.start}"))
        text = data.decode("utf-8", "replace")
    seen: dict[str, int] = {}
    previous = ""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("SESSION: ") and previous == SEPARATOR:
            name = line[len("SESSION: "):].strip()
            report.checked["history_blocks"] += 1
            if name in seen:
                report.findings.append(Finding(f"{path}:{number}", "history",
                                               f"second block for session {name} (first at line {seen[name]})", WARNING))
            else:
                seen[name] = number
        previous = line
    for record in records:
        if record.name not in seen:
            report.findings.append(Finding(str(path), "history", f"no block for archived session {record.name}"))


# ---------------------------------------------------------------- L1


def _check_insight(layout: Layout, max_lines: int, max_bytes: int, report: VerifyReport) -> None:
    from memctl.agent.insight import check_text

    path = layout.insight
    if not path.is_file():
        return
    try:
        violations = check_text(layout, path.read_bytes(), max_lines, max_bytes)
    except OSError as exc:
        report.findings.append(Finding(str(path), "insight", f"cannot be read ({exc})"))
        return
    for v in violations:
        where = f"{path}:{v.line}" if v.line else str(path)
        report.findings.append(Finding(where, f"insight-{v.kind}", v.message, WARNING))


# ---------------------------------------------------------------- permissions


def _check_permissions(layout: Layout, report: VerifyReport) -> None:
    root = layout.root
    if not root.is_dir():
        return
    kept = kept_dir(layout)  # hard links to the agent's own raw logs
    for path, info in _walk(root):
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            report.checked["folders"] += 1
            wanted = 0o700
        else:
            report.checked["files"] += 1
            wanted = 0o600
            if path.parent.parent == kept:  # a chmod would change the agent's log; the 0700 folders guard it
                continue
        if mode & PRIVATE_BITS:
            who = _who(mode)
            report.findings.append(Finding(str(path), "permissions",
                                           f"mode {mode:04o} gives {who} access; run chmod {wanted:o} {path}", WARNING))


def _walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every folder and regular file under root (root included); symlinks are not followed."""
    yield root, os.stat(root, follow_symlinks=False)
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            try:
                info = os.stat(path, follow_symlinks=False)
            except OSError:
                continue  # gone since the listing (a temp file of a concurrent writer)
            if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
                yield path, info


def _who(mode: int) -> str:
    parts = []
    if mode & 0o070:
        parts.append("group")
    if mode & 0o007:
        parts.append("others")
    return " and ".join(parts)


# ---------------------------------------------------------------- secrets in L2, L3, L5 and L6


def layer_files(layout: Layout, kinds: tuple[str, ...]) -> list[Path]:
    """The files of these layers (`l2`, `l3`, `l5`, `l6`): the same set the search index reads."""
    from memctl.recall.indexing.index import IndexOptions, scan_sources

    sources = scan_sources(layout, IndexOptions(include_l6=True), include_l4_sessions=False)
    return [s.path for s in sources if s.kind in kinds]


def secret_scan_files(layout: Layout) -> list[Path]:
    """L2, L3, and L5/L6 (a secret kept at rest, by `[redaction] keep_secrets_at_rest` or
    written by another program, is reported too)."""
    return layer_files(layout, ("l2", "l3", "l5", "l6"))


def _check_secrets(layout: Layout, extra_patterns: Sequence[str], report: VerifyReport) -> None:
    from memctl.core.redact import find_secrets

    for path in secret_scan_files(layout):
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:  # gone since the listing (a `task done` meanwhile): a race, not damage
            continue
        except OSError as exc:
            report.findings.append(Finding(str(path), "secret", f"cannot be read to scan ({exc})"))
            continue
        report.checked["scanned_for_secrets"] += 1
        for finding in find_secrets(text, extra_patterns):
            number = text.count("\n", 0, finding.start) + 1
            report.findings.append(Finding(f"{path}:{number}", "secret",
                                           f"holds what looks like a {finding.kind}; remove it or `memctl forget --purge`",
                                           WARNING))


# ---------------------------------------------------------------- JSON Lines stores


def _json_lines(path: Path) -> Iterator[tuple[int, object, str | None]]:
    """(line number, parsed value, problem or None) for each non-blank line."""
    if not path.is_file():
        return
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                yield (number,) + _parsed_line(raw)


def _parsed_line(raw: bytes) -> tuple[object, str | None]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        torn = "" if raw.endswith(b"\n") else " (a torn last line?)"
        return None, f"not JSON ({exc}){torn}"
    except RecursionError:
        return None, "JSON nested too deeply"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    return value, None


def _line_problem(raw: bytes, problem_of: Callable[[dict], str | None]) -> str | None:
    value, problem = _parsed_line(raw)
    return problem or problem_of(value)  # type: ignore[arg-type]


def _entry_problem(data: dict) -> str | None:
    from memctl.longterm.entries import entry_problem  # the readers' own test: no line verify calls clean crashes them

    if not data.get("id"):
        return "entry has no id"
    if not isinstance(data.get("text"), str):
        return "entry has no text"
    return entry_problem(data)


def _object_problem(data: dict) -> str | None:
    return None


def _check_jsonl(path: Path, kind: str, problem_of: Callable[[dict], str | None], report: VerifyReport) -> None:
    for number, data, problem in _json_lines(path):
        if problem is None:
            problem = problem_of(data)  # type: ignore[arg-type]
            if kind in ("l5", "l6"):
                report.checked["entries"] += 1
        if problem:
            report.findings.append(Finding(f"{path}:{number}", kind, problem))
