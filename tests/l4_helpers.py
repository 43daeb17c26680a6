"""Helpers for L4 tests: a GenericAgent-style folder with raw logs of chosen ages."""

from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class GAFolder:
    base: Path
    originals: dict[str, str] = field(default_factory=dict)  # raw file name -> sha256

    @property
    def root(self) -> Path:
        return self.base / "memory"

    @property
    def raw_dir(self) -> Path:
        return self.base / "temp" / "model_responses"

    @property
    def l4(self) -> Path:
        return self.root / "L4_raw_sessions"

    def add_log(self, name: str, content: str | bytes, age_hours: float = 72.0) -> Path:
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8") if isinstance(content, str) else content
        path = self.raw_dir / name
        path.write_bytes(data)
        stamp = time.time() - age_hours * 3600
        os.utime(path, (stamp, stamp))
        self.originals[name] = hashlib.sha256(data).hexdigest()
        return path

    def manifest(self) -> list[dict]:
        path = self.l4 / "manifest.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def history_sessions(self) -> list[str]:
        path = self.l4 / "all_histories.txt"
        if not path.exists():
            return []
        return [ln[len("SESSION: "):] for ln in path.read_text(errors="replace").splitlines() if ln.startswith("SESSION: ")]


def make_folder(tmp_path: Path) -> GAFolder:
    folder = GAFolder(tmp_path / "ga")
    folder.root.mkdir(parents=True)
    folder.raw_dir.mkdir(parents=True)
    return folder


def snapshot(*folders: Path, ignore: tuple[str, ...] = (".memctl/lock",)) -> dict[str, bytes]:
    state = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            rel = str(path.relative_to(folder.parent))
            if any(rel.endswith(i) for i in ignore):
                continue
            if path.is_symlink():
                state[rel] = b"->" + os.readlink(path).encode()
            elif path.is_file():
                state[rel] = path.read_bytes()
            else:
                state[rel] = b"<dir>"
    return state


def zips_readable(l4: Path) -> None:
    for zip_path in l4.glob("*.zip"):
        with zipfile.ZipFile(zip_path) as archive:
            assert archive.testzip() is None, zip_path


def raw_sha_from_show(run, root: Path, ref: str) -> str:
    result = run("show", "--raw", ref, root=root)
    assert result.returncode == 0, result.stderr.decode()
    return hashlib.sha256(result.stdout).hexdigest()


def assert_all_recoverable(run, folder: GAFolder, via_cli: bool = True) -> None:
    """Every original is either still a raw file with its bytes, or restorable byte for byte
    (through `memctl show --raw`, or in-process through the same function when via_cli=False)."""
    from memctl.core.config import Layout
    from memctl.l4.manifest import ManifestRecord
    from memctl.l4.sessions import SessionRef, write_raw

    by_sha = {r["sha256"]: r for r in folder.manifest()}
    for name, sha in folder.originals.items():
        raw = folder.raw_dir / name
        if raw.exists() and hashlib.sha256(raw.read_bytes()).hexdigest() == sha:
            continue
        assert sha in by_sha, f"{name} is neither in the raw folder nor archived"
        if via_cli:
            assert raw_sha_from_show(run, folder.root, by_sha[sha]["name"]) == sha
            continue
        hasher = hashlib.sha256()
        record = ManifestRecord.from_dict(by_sha[sha])
        write_raw(Layout(folder.root), SessionRef(record.name, record), hasher.update)
        assert hasher.hexdigest() == sha


def every_byte_under(root: Path):
    """(path, bytes) of every file under root, zip members unpacked (for "no trace left" checks)."""
    for path in root.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes()
            if path.suffix == ".zip":
                with zipfile.ZipFile(path) as archive:
                    for name in archive.namelist():
                        yield path / name, archive.read(name)
