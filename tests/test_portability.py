"""Works wherever its users are (issue #12): any root, read-only memories, any locale, no
fcntl (Windows), launchd and Task Scheduler units, the terminal table, the README as written.

Every test runs the installed `memctl` as a real subprocess.
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import shutil
import subprocess
import sys
import textwrap
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import clean_env
from terminal import in_terminal

REPO = Path(__file__).resolve().parent.parent
NOT_A_MEMORY = "not a memctl memory folder"


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under folder with its size and mtime: what 'nothing changed' compares."""
    out = {}
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        out[str(path.relative_to(folder))] = (stat.st_size, stat.st_mtime_ns)
    return out


def memory_with_entries(run, root: Path, *texts: str) -> list[str]:
    assert run("init", root=root).returncode == 0
    ids = []
    for text in texts:
        result = run("remember", text, "--type", "lesson", root=root)
        assert result.returncode == 0, result.stderr
        ids.append(result.stdout.decode().strip())
    return ids


# ---------------------------------------------------------------- root resolution


@pytest.mark.parametrize("args", [("search", "backup"), ("status",), ("show", "L5:m0"), ("recent",),
                                  ("remember", "x", "--type", "lesson"), ("archive",), ("verify",)])
def test_a_mistyped_root_is_one_line_exit_2_and_creates_nothing(run, tmp_path, args):
    missing = tmp_path / "memroy"
    empty = tmp_path / "empty"
    empty.mkdir()
    before = tree(tmp_path)
    for folder in (missing, empty):
        result = run(*args, root=folder)
        assert result.returncode == 2, result
        lines = result.stderr.decode().splitlines()
        assert lines == [f"memctl: error: {NOT_A_MEMORY}: {folder} (no memctl.toml, no memory/); "
                         f"run memctl init {folder}"]
        assert result.stdout == b""
    assert tree(tmp_path) == before  # no .memctl, no folder, nothing


def test_a_search_before_init_in_an_empty_folder_creates_nothing(memctl_bin, tmp_path):
    env = clean_env(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    result = subprocess.run([memctl_bin, "search", "x"], cwd=tmp_path, capture_output=True, env=env, timeout=60)
    assert result.returncode == 2
    assert NOT_A_MEMORY in result.stderr.decode() and len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_root_naming_a_file_is_one_line(run, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("hello\n")
    for args in (("search", "hello"), ("status",), ("init",)):
        result = run(*args, root=file)
        assert result.returncode == 2
        assert result.stderr.decode().splitlines() == [f"memctl: error: not a folder: {file}; --root names the memory folder"]


def test_root_at_a_genericagent_checkout_resolves_to_its_memory(run, tmp_path, sample_logs):
    checkout = tmp_path / "GenericAgent"
    memory = checkout / "memory"
    raw = checkout / "temp" / "model_responses"
    memory.mkdir(parents=True)
    raw.mkdir(parents=True)
    (checkout / "agent_loop.py").write_text("# the agent's code, not memory: never indexed\nzebra = 1\n")
    (memory / "global_mem.txt").write_text("## [HOSTS]\nzebra backups live on bk-07\n", encoding="utf-8")
    # reads work on a GenericAgent memory never initialised, and create nothing in it
    status = run("status", "--json", root=checkout)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["root"] == str(memory)
    found = run("search", "zebra", "--layers", "L2,L3", root=checkout)
    assert found.returncode == 0, found.stderr
    assert [line.split("\t")[0] for line in found.stdout.decode().splitlines()] == ["L2:HOSTS"]
    assert sorted(p.name for p in memory.iterdir()) == ["global_mem.txt"]
    assert not (checkout / ".memctl").exists()
    # and the archive finds temp/model_responses beside it
    shutil.copy(sample_logs[0], raw / sample_logs[0].name)
    os.utime(raw / sample_logs[0].name, (1, 1))
    archived = run("archive", "--keep-newest", "0", root=checkout)
    assert archived.returncode == 0, archived.stderr
    assert list((memory / "L4_raw_sessions").glob("*.zip"))


def test_root_and_debug_after_the_subcommand(run, memctl_bin, tmp_path):
    root = tmp_path / "memory"
    (entry_id,) = memory_with_entries(run, root, "the kettle descales every March")
    plain = [memctl_bin, "search", "kettle", "--root", str(root)]  # the lean path (piped)
    full = [memctl_bin, "status", "--json", "--debug", "--root", str(root)]  # the full command line
    shown = [memctl_bin, "show", f"L5:{entry_id}", f"--root={root}"]
    for command in (plain, full, shown):
        result = subprocess.run(command, capture_output=True, env=clean_env(), cwd=tmp_path, timeout=60)
        assert result.returncode == 0, (command, result.stderr)
    result = subprocess.run(plain, capture_output=True, env=clean_env(), cwd=tmp_path, timeout=60)
    assert result.stdout.decode().startswith(f"L5:{entry_id}\t")


# ---------------------------------------------------------------- read-only memories

SETPRIV = shutil.which("setpriv")


def as_unprivileged(command: list[str]) -> list[str]:
    """Run as `nobody`, able to read every file (CAP_DAC_READ_SEARCH: the interpreter lives
    under /root) but to write only where nobody may: a read-only memory."""
    return [SETPRIV, "--reuid", "65534", "--regid", "65534", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *command]


@pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None,
                    reason="needs root and setpriv to run memctl as an unprivileged user")
def test_a_read_only_root_answers_every_read_and_refuses_writes(run, memctl_bin, tmp_path):
    root = tmp_path / "backup" / "memory"
    assert run("demo", "--dir", str(root.parent)).returncode == 0
    (entry_id,) = memory_with_entries(run, root, "the kettle descales every March")
    subprocess.run(["chmod", "-R", "a-w", str(root.parent)], check=True)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    env = clean_env(HOME="/nonexistent", XDG_CACHE_HOME=str(cache))
    before = tree(root)

    def unprivileged(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(as_unprivileged([memctl_bin, "--root", str(root), *args]), capture_output=True,
                              env=env, cwd="/", timeout=120)

    probe = subprocess.run(as_unprivileged(["touch", str(root / "probe")]), capture_output=True)
    assert probe.returncode != 0, "the memory is writable for the unprivileged user: the test proves nothing"
    expected = {("search", "kettle"): f"L5:{entry_id}", ("search", "backup", "--json"): '"layer": "L4"',
                ("show", f"L5:{entry_id}"): "descales", ("status",): "L5\t1 files\t1 entries",
                ("recent", "-n", "1"): "0405_0902", ("compose", "kettle", "--budget", "300"): "descales"}
    for args, wanted in expected.items():
        result = unprivileged(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert wanted in result.stdout.decode(), (args, result.stdout)
        assert b"Traceback" not in result.stderr
    assert list(cache.glob("memctl/*/index.sqlite")), "the derived index should live in the cache"
    for args in (("remember", "a new fact", "--type", "lesson", "--wait", "0"), ("forget", entry_id), ("archive",)):
        result = unprivileged(*args)
        assert result.returncode == 2, (args, result)
        lines = result.stderr.decode().splitlines()
        assert len(lines) == 1 and str(root) in lines[0] and "Traceback" not in lines[0], (args, lines)
    assert tree(root) == before


# ---------------------------------------------------------------- locales


def latin1_locale(tmp_path: Path) -> dict[str, str] | None:
    """Environment for an ISO-8859-1 locale, generated into tmp_path with localedef if the
    machine has none; None when neither works."""
    listed = subprocess.run(["locale", "-a"], capture_output=True, text=True).stdout.lower().split()
    env = {}
    name = "en_US.ISO-8859-1"
    if not any(n in listed for n in ("en_us.iso88591", "en_us.iso-8859-1")):
        localedef = shutil.which("localedef")
        if localedef is None:
            return None
        subprocess.run([localedef, "-i", "en_US", "-f", "ISO-8859-1", str(tmp_path / name)], capture_output=True)
        env["LOCPATH"] = str(tmp_path)
    env.update(LANG=name, LC_ALL=name)
    check = subprocess.run([sys.executable, "-c", "import locale; print(locale.getpreferredencoding())"],
                           capture_output=True, text=True, env={**locale_env(), **env})
    return env if check.stdout.strip().lower().replace("-", "") in ("iso88591", "latin1") else None


def locale_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if not k.startswith(("LC_", "PYTHONUTF8", "PYTHONIOENCODING"))}
    env.pop("LANG", None)
    env.update(overrides)
    return env


@pytest.mark.parametrize("locale_name", ["C", "latin-1"])
def test_a_chinese_query_finds_chinese_text_in_any_locale(run, memctl_bin, tmp_path, locale_name):
    root = tmp_path / "memory"
    (entry_id,) = memory_with_entries(run, root, "上次部署 bk-02 的问题是磁盘满了")
    if locale_name == "C":
        env = locale_env(LANG="C", LC_ALL="C")
    else:
        extra = latin1_locale(tmp_path)
        if extra is None:
            pytest.skip("no ISO-8859-1 locale on this machine and localedef could not make one")
        env = locale_env(**extra)
    for args in (["search", "部署"], ["search", "部署", "--json"], ["compose", "部署", "--budget", "300"],
                 ["show", f"L5:{entry_id}"]):
        result = subprocess.run([memctl_bin, "--root", str(root), *args], capture_output=True, env=env, timeout=60)
        assert result.returncode == 0, (args, result.stderr)
        text = result.stdout.decode("utf-8")  # strict: the output is valid UTF-8
        assert "磁盘满了" in text, (args, text)
    piped_in = subprocess.run([memctl_bin, "--root", str(root), "remember", "-", "--type", "lesson"],
                              input="今天的茶很好喝\n".encode("utf-8"), capture_output=True, env=env, timeout=60)
    assert piped_in.returncode == 0, piped_in.stderr
    found = subprocess.run([memctl_bin, "--root", str(root), "search", "茶"], capture_output=True, env=env, timeout=60)
    assert "今天的茶很好喝" in found.stdout.decode("utf-8")
    missing = subprocess.run([memctl_bin, "--root", str(root), "show", "L5:不存在"], capture_output=True, env=env)
    assert missing.returncode == 2 and "不存在" in missing.stderr.decode("utf-8")


# ---------------------------------------------------------------- no fcntl (Windows)

NO_FCNTL_SITE = '''
"""Test stand-in for Windows: `import fcntl` fails, `msvcrt.locking` is emulated with
byte-range locks so that two processes still exclude each other, and the POSIX-only parts of
`os` that memctl touches are gone. subprocess is imported
first: it takes the presence of msvcrt to mean Windows."""
import os, subprocess, sys, types
import fcntl as _real

class _NoFcntl:
    def find_spec(self, name, path=None, target=None):
        if name == "fcntl":
            raise ImportError("No module named 'fcntl'")
        return None

sys.modules.pop("fcntl", None)
sys.meta_path.insert(0, _NoFcntl())

msvcrt = types.ModuleType("msvcrt")
msvcrt.LK_UNLCK, msvcrt.LK_LOCK, msvcrt.LK_NBLCK, msvcrt.LK_RLCK, msvcrt.LK_NBRLCK = 0, 1, 2, 3, 4

def locking(fd, mode, nbytes):
    start = os.lseek(fd, 0, os.SEEK_CUR)
    if mode == msvcrt.LK_UNLCK:
        _real.lockf(fd, _real.LOCK_UN, nbytes, start)
        return
    try:
        _real.lockf(fd, _real.LOCK_EX | _real.LOCK_NB, nbytes, start)
    except OSError:
        raise PermissionError(13, "Permission denied") from None

msvcrt.locking = locking
sys.modules["msvcrt"] = msvcrt

# the os functions and flags Windows does not have (subprocess, imported above, kept its own)
for _name in ("pread", "pwrite", "posix_spawn", "getloadavg", "sched_getaffinity", "getuid", "geteuid",
              "O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC"):
    if hasattr(os, _name):
        delattr(os, _name)
'''


def _without_fcntl(tmp_path: Path, sample_logs, **env: str) -> tuple[dict[str, str], Path]:
    """(an environment where `import fcntl` fails and `msvcrt` is emulated, the memory of a
    GenericAgent checkout whose raw logs are old enough to archive)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_FCNTL_SITE)
    checkout = tmp_path / "agent"
    raw = checkout / "temp" / "model_responses"
    raw.mkdir(parents=True)
    for log in sample_logs:
        shutil.copy(log, raw / log.name)
        os.utime(raw / log.name, (1, 1))
    return clean_env(PYTHONPATH=str(site), **env), checkout / "memory"


def test_the_cli_works_without_fcntl_and_the_lock_still_excludes(memctl_bin, tmp_path, sample_logs):
    env, root = _without_fcntl(tmp_path, sample_logs)
    probe = subprocess.run([sys.executable, "-c", "import memctl.core.fsutil as f, sys; print(f.fcntl, 'fcntl' in sys.modules)"],
                           capture_output=True, text=True, env=env)
    assert probe.stdout.split() == ["None", "False"], probe

    def memctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([memctl_bin, *args], capture_output=True, env=env, timeout=120)

    assert b"Usage" in memctl("--help").stdout
    for args in (["init"], ["remember", "the kettle descales every March", "--type", "lesson"],
                 ["archive", "--keep-newest", "0"], ["dream", "--dry-run"]):
        result = memctl("--root", str(root), *args)
        assert result.returncode == 0, (args, result.stderr)
    assert memctl("--root", str(root), "search", "kettle").stdout.startswith(b"L5:")
    assert memctl("--root", str(root), "search", "backup", "--layers", "L4").returncode == 0

    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from memctl.core.fsutil import WriterLock
            with WriterLock({str(root / '.memctl' / 'lock')!r}):
                print('held', flush=True)
                sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout.readline() == b"held\n"
        busy = memctl("--root", str(root), "remember", "a second writer", "--type", "lesson", "--wait", "0")
        assert busy.returncode == 75, busy
        assert busy.stderr.decode().startswith("memctl: error: lock busy")
    finally:
        holder.communicate(b"\n", timeout=30)
    after = memctl("--root", str(root), "remember", "a second writer", "--type", "lesson", "--wait", "0")
    assert after.returncode == 0, after.stderr


def test_every_write_and_search_works_without_fcntl_where_a_resident_writer_would_serve(memctl_bin, tmp_path, sample_logs):
    """Issue #32: with fcntl absent and msvcrt present, a `remember` wrote its entry and then
    exited 2 with `internal error: import of fcntl halted` (the resident writer's start assumed
    POSIX). With resident processes on (the default outside the tests), every command runs
    in-process and no resident process is started."""
    env, root = _without_fcntl(tmp_path, sample_logs, MEMCTL_RESIDENT="1")

    def memctl(*args: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([memctl_bin, "--root", str(root), *args], capture_output=True,
                              env={**env, **more}, timeout=120)

    assert memctl("init").returncode == 0
    ids = []
    for n in range(3):  # the first would start a writer; the next would find one
        done = memctl("remember", f"the kettle descales every March, note {n}", "--type", "lesson")
        assert done.returncode == 0 and done.stderr == b"", done
        ids.append(done.stdout.decode().strip())
    for full in ("0", "1"):  # the lean path, then the full command line
        for args in (["forget", ids[0]], ["restore", ids[0]], ["search", "kettle"], ["archive", "--keep-newest", "0"],
                     ["search", "backup", "--layers", "L4"]):
            done = memctl(*args, MEMCTL_FULL_CLI=full)
            assert done.returncode == 0 and b"Traceback" not in done.stderr, (args, full, done)
    assert not [name for name in os.listdir(root / ".memctl") if name.startswith(("writer.", "semantic."))]


# ---------------------------------------------------------------- launchd and Task Scheduler


def dry_run_files(output: str) -> dict[str, str]:
    """`schedule install --dry-run` output -> {file name: content}."""
    files, name = {}, None
    for line in output.splitlines(keepends=True):
        header = re.match(r"# (\S+) \(would \w+\)$", line.rstrip("\n"))
        if header:
            name = Path(header.group(1)).name
            files[name] = ""
        elif name:
            files[name] += line
    return files


def systemd_jobs(files: dict[str, str]) -> dict[str, tuple[list[str], set[tuple[int, int]]]]:
    """job -> (ExecStart words after the memctl path, {(hour, minute)}) from the systemd units."""
    jobs = {}
    for name, text in files.items():
        if not name.endswith(".timer"):
            continue
        job = name[len("memctl-"):-len(".timer")]
        calendar = re.search(r"^OnCalendar=\*-\*-\* (\d+)(?:/(\d+))?:(\d+):00$", text, re.M)
        first, step, minute = int(calendar.group(1)), int(calendar.group(2) or 24), int(calendar.group(3))
        exec_start = re.search(r"^ExecStart=(.*)$", files[f"memctl-{job}.service"], re.M).group(1).split()
        jobs[job] = (exec_start[1:], {(hour, minute) for hour in range(first, 24, step)})
    return jobs


def test_launchd_and_windows_units_parse_and_match_the_systemd_ones(run, tmp_path):
    root = tmp_path / "memory"
    run("init", root=root)
    common = ["--dry-run", "--memctl", "/opt/memctl/bin/memctl", "--unit-dir", str(tmp_path / "units")]
    outputs = {}
    for kind in ("--systemd", "--launchd", "--windows"):
        result = run("schedule", "install", kind, *common, root=root)
        assert result.returncode == 0, result.stderr
        outputs[kind] = dry_run_files(result.stdout.decode())
    expected = systemd_jobs(outputs["--systemd"])
    assert expected == {"archive": (["archive", "--missing-ok"], {(0, 0), (12, 0)}), "dream": (["dream"], {(4, 0)})}

    plists = {name: plistlib.loads(text.encode()) for name, text in outputs["--launchd"].items()}
    assert sorted(plists) == ["io.memctl.archive.plist", "io.memctl.dream.plist"]
    for job, (args, times) in expected.items():
        plist = plists[f"io.memctl.{job}.plist"]
        assert plist["Label"] == f"io.memctl.{job}"
        assert plist["ProgramArguments"] == ["/opt/memctl/bin/memctl", *args]
        assert plist["EnvironmentVariables"]["MEMCTL_HOME"] == str(root)
        assert {(c["Hour"], c["Minute"]) for c in plist["StartCalendarInterval"]} == times

    ns = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
    tasks = {name: ET.fromstring(text.encode()) for name, text in outputs["--windows"].items()}
    assert sorted(tasks) == ["memctl-archive.xml", "memctl-dream.xml"]
    for job, (args, times) in expected.items():
        task = tasks[f"memctl-{job}.xml"]
        assert task.tag == f"{{{ns['t']}}}Task" and task.get("version") == "1.2"
        assert [child.tag.split("}")[1] for child in task] == ["RegistrationInfo", "Triggers", "Principals",
                                                               "Settings", "Actions"]
        assert task.find("t:Actions/t:Exec/t:Command", ns).text == "/opt/memctl/bin/memctl"
        assert task.find("t:Actions/t:Exec/t:Arguments", ns).text.split() == ["--root", str(root), *args]
        boundaries = [t.find("t:StartBoundary", ns).text for t in task.findall("t:Triggers/t:CalendarTrigger", ns)]
        assert {(int(b[11:13]), int(b[14:16])) for b in boundaries} == times
        assert all(t.find("t:ScheduleByDay/t:DaysInterval", ns).text == "1"
                   for t in task.findall("t:Triggers/t:CalendarTrigger", ns))
        assert task.find("t:Settings/t:StartWhenAvailable", ns).text == "true"
        assert task.find("t:Settings/t:MultipleInstancesPolicy", ns).text == "IgnoreNew"


def test_launchd_install_writes_plists_and_refuses_a_foreign_file(run, tmp_path):
    root = tmp_path / "memory"
    run("init", root=root)
    target = tmp_path / "LaunchAgents"
    first = run("schedule", "install", "--launchd", "--unit-dir", str(target), root=root)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in target.iterdir()) == ["io.memctl.archive.plist", "io.memctl.dream.plist"]
    again = run("schedule", "install", "--launchd", "--unit-dir", str(target), root=root)
    assert again.stdout.decode().count("unchanged") == 2
    (target / "io.memctl.dream.plist").write_text("<plist>someone else's</plist>\n")
    refused = run("schedule", "install", "--launchd", "--unit-dir", str(target), root=root)
    assert refused.returncode == 2 and "not written by memctl" in refused.stderr.decode()


# ---------------------------------------------------------------- the terminal table

def cells(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def test_the_search_table_fits_80_columns_with_every_ref_whole(run, memctl_bin, tmp_path):
    base = tmp_path / "demo"
    assert run("demo", "--dir", str(base)).returncode == 0
    root = base / "memory"
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(json.dumps({"id": f"conversation-2026-04-03:session_{n}:turn_{n}",
                                         "text": f"the nightly backup of bk-02 was checked, note {n} " * 3}) + "\n"
                             for n in range(4)))
    assert run("import", str(turns), "--layer", "L5", root=root).returncode == 0
    query = ["backup", "bk-02", "部署", "Atlas"]
    piped = run("search", *query, "-k", "12", root=root)
    refs = [line.split("\t")[0] for line in piped.stdout.decode().splitlines()]
    assert len(refs) >= 8 and any(len(ref) > 40 for ref in refs)

    env = clean_env()
    status, screen = in_terminal([memctl_bin, "--root", str(root), "search", *query, "-k", "12"], env)
    assert status == 0, screen
    lines = [line for line in screen.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    assert "ref" in header and "snippet" in header
    assert len(rows) == len(refs), screen  # one line a hit
    for row, ref in zip(rows, refs):
        assert cells(row) <= 80, row
        assert re.search(rf"(^|\s){re.escape(ref)}(\s|$)", row), (ref, row)  # the ref whole
        shown = run("show", ref, root=root)
        assert shown.returncode == 0 and shown.stdout.strip(), (ref, shown.stderr)

    status, screen = in_terminal([memctl_bin, "--root", str(root), "search", "zzqqxx"], env)
    assert status == 1 and screen.strip() == "no matches"


def test_native_json_session_snippets_show_text_not_repr(run, tmp_path):
    base = tmp_path / "demo"
    run("demo", "--dir", str(base))
    result = run("search", "summary.md", "Atlas", "--layers", "L4", "-k", "10", root=base / "memory")
    sessions = [line for line in result.stdout.decode().splitlines() if "#h" not in line.split("\t")[0]]
    assert sessions, result.stdout
    for line in sessions:
        snippet = line.split("\t")[3]
        assert "'type':" not in snippet and '"type":' not in snippet and "\\\\" not in snippet, snippet
        assert "\\n" not in snippet, snippet


def test_show_accepts_the_id_search_json_prints(run, tmp_path):
    root = tmp_path / "memory"
    run("init", root=root)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "0403_2013-0403_2021#7", "text": "the zebra crossing was repainted"}) + "\n"
                     + json.dumps({"id": "conv-7:session_2:11", "text": "the zebra again, an id with colons"}) + "\n")
    assert run("import", str(items), root=root).returncode == 0
    hits = [json.loads(line) for line in run("search", "zebra", "--layers", "L6", "--json", root=root).stdout.splitlines()]
    assert {hit["id"] for hit in hits} == {"0403_2013-0403_2021#7", "conv-7:session_2:11"}
    for hit in hits:
        for identifier in (hit["ref"], hit["id"]):
            shown = run("show", identifier, root=root)
            assert shown.returncode == 0, (identifier, shown.stderr)
            assert json.loads(shown.stdout)["id"] == hit["id"]


def test_purge_dry_run_lists_what_it_would_erase(run, tmp_path):
    base = tmp_path / "demo"
    run("demo", "--dir", str(base))
    root = base / "memory"
    before = tree(root)
    result = run("forget", "--purge", "--match", "bk-02", "--dry-run", root=root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert f"would scrub: {root / 'L4_raw_sessions' / 'all_histories.txt'}" in lines
    assert any(line.startswith("would scrub: ") and ".zip: sessions 0405_0902-0405_0908" in line for line in lines)
    assert tree(root) == before


def test_demo_removes_its_temporary_folder(memctl_bin, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run([memctl_bin, "demo"], capture_output=True, env=clean_env(TMPDIR=str(scratch)), timeout=120)
    assert result.returncode == 0, result.stderr
    assert list(scratch.iterdir()) == []
    assert "# removed " in result.stdout.decode() and "demo --dir DIR" in result.stdout.decode()


# ---------------------------------------------------------------- the README as written


def readme_blocks() -> tuple[str, list[str]]:
    """The README's first command, and the code blocks of its "Quick start" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    section = re.search(r"^## Quick start\n(.*?)^## ", text, re.S | re.M).group(1)
    return first, re.findall(r"```sh\n(.*?)```", section, re.S)


@pytest.mark.slow
def test_readme_quick_start_runs_as_written(tmp_path):
    first, blocks = readme_blocks()
    assert first.strip().startswith("python3 -m venv .venv") and len(blocks) >= 2
    checkout = tmp_path / "memctl"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "__pycache__",
                                                                  ".pytest_cache", "build"))
    home = tmp_path / "home"
    home.mkdir()
    base_bin = Path(sys.base_prefix) / "bin"  # python3 itself, not this venv's memctl
    env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HOME=str(home), PATH=f"{base_bin}:/usr/local/bin:/usr/bin:/bin", XDG_CACHE_HOME=str(home / ".cache"))
    assert shutil.which("memctl", path=env["PATH"]) is None
    script = "set -e\n" + first + "".join(f"echo '### block {n}'\n{block}" for n, block in enumerate(blocks))
    result = subprocess.run(["bash", "-c", script], cwd=checkout, capture_output=True, env=env, timeout=900)
    out = result.stdout.decode("utf-8")
    assert result.returncode == 0, (out[-3000:], result.stderr.decode()[-3000:])
    assert out.count("### block") == len(blocks)
    assert "backups of bk-02 run at 02:00" in out and "凌晨两点" in out


def test_the_terminal_table_is_drawn_without_rich_and_as_the_full_command_line_draws_it(run, memctl_bin, tmp_path):
    """Issue #13: a search on a terminal takes the lean path (no typer, no rich) and prints the
    same table as the full command line."""
    root = tmp_path / "memory"
    run("init", root=root)
    (root / "notes.md").write_text("the proxy listens on port 7890; 代理 端口 7890 在 notes 里\n"
                                   "another proxy line, long enough to be cut at eighty columns " * 3 + "\n")
    python = str(Path(memctl_bin).with_name("python"))
    args = ["--root", str(root), "search", "proxy", "7890"]
    lean = ("import sys, runpy; sys.argv = ['memctl'] + %r\n"
            "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
            "except SystemExit as exit:\n"
            "    sys.stdout.flush(); print('loaded=%%s' %% [m for m in ('typer', 'rich') if m in sys.modules])\n" % args)
    full = ("import sys\nfrom memctl.cli.app import main\n"
            "try:\n    main(%r)\nexcept SystemExit:\n    sys.stdout.flush(); print('loaded=')\n" % args)
    env = clean_env(PYTHONUTF8="1")
    status, lean_screen = in_terminal([python, "-c", lean], env)
    assert status == 0 and "loaded=[]" in lean_screen, lean_screen
    status, full_screen = in_terminal([python, "-c", full], env)
    assert status == 0, full_screen
    table = lean_screen.split("loaded=")[0]
    assert table == full_screen.split("loaded=")[0]
    assert "notes.md" in table and "…" in table
    assert all(cells(line) <= 80 for line in table.splitlines())
