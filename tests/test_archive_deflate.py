"""The monthly zips are standard zips whichever deflate wrote them: zlib-ng's where the package
is installed, the standard library's zlib when its import fails (simulated in a subprocess)."""

from __future__ import annotations

import hashlib
import io
import random
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime

import pytest

from memctl.l4 import loggen
from memctl.l4.codec import decode_stream
from l4_helpers import assert_all_recoverable, make_folder
from conftest import clean_env

BLOCK_ZLIB_NG = "import sys; sys.modules['zlib_ng'] = None; "
RUN_MEMCTL = "sys.argv[0] = 'memctl'; from memctl.entry import main; main()"


def add_month_of_logs(folder) -> None:
    """Two logs of April, the first long enough that its member spans several 1 MiB deflate blocks."""
    big = "".join(loggen.format_b(datetime(2026, 4, 5 + day, 9, 0), 400, random.Random(day)) for day in range(3))
    folder.add_log("model_responses_1.txt", big)
    folder.add_log("model_responses_2.txt", loggen.format_a(datetime(2026, 4, 20, 9, 0), 30, random.Random(9)))


def deflate_backend(block_zlib_ng: bool) -> str:
    code = (BLOCK_ZLIB_NG if block_zlib_ng else "") + "from memctl.l4.staging import DEFLATE_BACKEND; print(DEFLATE_BACKEND)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def archive(folder, block_zlib_ng: bool) -> subprocess.CompletedProcess:
    args = ["--root", str(folder.root), "archive", str(folder.raw_dir), "--keep-newest", "0", "--quiet"]
    code = (BLOCK_ZLIB_NG if block_zlib_ng else "import sys; ") + RUN_MEMCTL
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=clean_env(), timeout=300)


def assert_standard_zip(folder) -> dict[str, str]:
    """Python's zipfile (stdlib zlib) reads every member, CRC checked, and it decodes to the raw
    log's sha256; `unzip -t` agrees where it is installed. Returns member -> raw sha256."""
    zip_path = folder.l4 / "2026-04.zip"
    decoded = {}
    with zipfile.ZipFile(zip_path) as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        assert len(infos) == 2 and all(info.compress_type == zipfile.ZIP_DEFLATED for info in infos)
        assert max(info.file_size for info in infos) > 2 << 20  # three deflate blocks or more
        for info in infos:
            sha, _ = decode_stream(io.BytesIO(archive.read(info)), lambda _: None)
            decoded[info.filename] = sha
    assert sorted(decoded.values()) == sorted(folder.originals.values())
    if shutil.which("unzip"):
        tested = subprocess.run(["unzip", "-t", str(zip_path)], capture_output=True, text=True)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "No errors detected" in tested.stdout
    return decoded


def test_zip_written_with_zlib_ng_reads_with_the_standard_library(run, tmp_path):
    pytest.importorskip("zlib_ng")
    assert deflate_backend(block_zlib_ng=False).startswith("zlib-ng ")
    folder = make_folder(tmp_path)
    add_month_of_logs(folder)
    result = archive(folder, block_zlib_ng=False)
    assert result.returncode == 0, result.stderr.decode()
    assert not any(folder.raw_dir.iterdir())
    assert_standard_zip(folder)
    assert_all_recoverable(run, folder)


def test_without_zlib_ng_the_standard_zlib_writes_the_same_sessions(run, tmp_path):
    assert deflate_backend(block_zlib_ng=True).startswith("zlib ")
    fallback, fast = make_folder(tmp_path / "fallback"), make_folder(tmp_path / "fast")
    for folder in (fallback, fast):
        add_month_of_logs(folder)
    result = archive(fallback, block_zlib_ng=True)
    assert result.returncode == 0, result.stderr.decode()
    assert not any(fallback.raw_dir.iterdir())
    members = assert_standard_zip(fallback)
    assert_all_recoverable(run, fallback)  # read back by the installed memctl (zlib-ng's inflate)
    assert archive(fast, block_zlib_ng=False).returncode == 0
    with zipfile.ZipFile(fallback.l4 / "2026-04.zip") as slow_zip, zipfile.ZipFile(fast.l4 / "2026-04.zip") as fast_zip:
        for name in members:
            assert hashlib.sha256(slow_zip.read(name)).digest() == hashlib.sha256(fast_zip.read(name)).digest()


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_a_member_that_does_not_read_back_fails_its_month_only(tmp_path, damage):
    """Months are verified side by side: a damaged member fails its own month (no zip put in
    place, no temporary left) and the other month's zip still goes in place, verified."""
    from memctl.core.config import Layout
    from memctl.l4.archive import _record_for
    from memctl.l4.staging import Candidate, FileSignature, stage
    from memctl.l4.zips import write_month_zips

    layout = Layout(tmp_path / "memory")
    layout.l4_dir.mkdir(parents=True)
    items = {}
    for number, (month, day) in enumerate([("2026-04", 5), ("2026-05", 6)]):
        log = tmp_path / f"model_responses_{number}.txt"
        log.write_text(loggen.format_b(datetime(2026, int(month[-2:]), day, 9, 0), 200, random.Random(number)))
        staged = stage(Candidate(log, FileSignature.of(log.stat())), layout.l4_dir, level=6, durable=False)
        staged.name = staged.base_name
        items[month] = [(staged, _record_for(staged, log.name, "2026-06-01T00:00:00"))]
    damaged = items["2026-04"][0][0].staging
    data = bytearray(damaged.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x55
    else:
        del data[len(data) // 2:]
    damaged.write_bytes(bytes(data))

    failures = write_month_zips(layout, items)

    assert list(failures) == ["2026-04"] and "does not" in str(failures["2026-04"])
    assert not (layout.l4_dir / "2026-04.zip").exists()
    assert not [p for p in layout.l4_dir.iterdir() if p.name.endswith(".zip.tmp") or ".zip." in p.name]
    with zipfile.ZipFile(layout.l4_dir / "2026-05.zip") as archive:
        assert archive.testzip() is None
        (member,) = archive.infolist()
        sha, _ = decode_stream(io.BytesIO(archive.read(member)), lambda _: None)
    assert sha == items["2026-05"][0][0].sha256
