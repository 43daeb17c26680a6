"""`memctl demo`: a one-line first run on the sample logs shipped inside the package."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Iterator

from memctl.l4.archive import ArchiveOptions, run_archive
from memctl.core.config import Layout, init_root
from memctl.core.fsutil import WriterLock
from memctl.l4.sessions import find_session, write_raw

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def run_demo(folder: Path | None = None, command: str = "memctl") -> Iterator[str]:
    """The demo's report, line by line. A folder given is kept for exploring; the default
    temporary one is removed when the demo ends (also when it fails)."""
    if folder is not None:
        yield from _demo_in(Path(folder), command, kept=True)
        return
    base = Path(tempfile.mkdtemp(prefix="memctl-demo-"))
    try:
        yield from _demo_in(base, command, kept=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    yield f"# removed {base}; `{command} demo --dir DIR` keeps the folder to explore"


def _demo_in(base: Path, command: str, kept: bool) -> Iterator[str]:
    raw_dir = base / "temp" / "model_responses"
    raw_dir.mkdir(parents=True, exist_ok=True)
    root = base / "memory"
    init_root(root)
    layout = Layout(root)
    three_days_ago = time.time() - 3 * 86400
    originals = {}
    for sample in sorted(SAMPLES.glob("model_responses_*.txt")):
        target = raw_dir / sample.name
        shutil.copyfile(sample, target)
        os.utime(target, (three_days_ago, three_days_ago))
        originals[sample.name] = hashlib.sha256(sample.read_bytes()).hexdigest()
    yield f"# demo folder: {base} (GenericAgent layout: memory/ beside temp/model_responses/)"
    with WriterLock(layout.lock):
        report = run_archive(layout, ArchiveOptions(raw_dir=raw_dir, min_age_seconds=7200, keep_newest=0))
    yield "# memctl archive"
    for decision in report.decisions:
        yield f"  {decision.action:8} {Path(decision.path).name}: {decision.reason}"
    yield f"# {layout.histories.relative_to(base)}"
    yield from ("  " + line for line in layout.histories.read_text(encoding="utf-8").splitlines() if line)
    for zip_path in sorted(layout.l4_dir.glob("*.zip")):
        with zipfile.ZipFile(zip_path) as archive:
            members = ", ".join(f"{i.filename} ({i.file_size} B)" for i in archive.infolist())
        yield f"# {zip_path.relative_to(base)}: {members}"
    yield "# raw logs left: " + (", ".join(p.name for p in raw_dir.iterdir()) or "none (all verified, then deleted)")
    for source, digest in originals.items():
        hasher = hashlib.sha256()
        write_raw(layout, find_session(layout, source), hasher.update)
        same = "identical" if hasher.hexdigest() == digest else "DIFFERENT"
        yield f"# memctl show --raw {source}: sha256 {hasher.hexdigest()[:16]}… {same} to the original"
    if kept:
        yield f"# try: {command} --root {root} show {next(iter(_names(layout)), '')}"


def _names(layout: Layout) -> list[str]:
    from memctl.l4.manifest import iter_manifest

    return [record.name for record in iter_manifest(layout)]
