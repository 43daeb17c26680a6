"""Every output surface redacts: the secrets of test_redact.SHAPES are planted in L2, L3, L5,
L6, a task and an archived session *as plain text* (written straight to the files, as an
agent or an older memctl would have), then every command that prints memory is run and its
stdout and stderr are searched for each secret and for the second half of each."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SAMPLES, clean_env, memctl_executable
from test_redact import SHAPES

MARK = "zebrafact"
SECRETS = [(name, secret) for name, _, secret in SHAPES]


def _entry(number: int, text: str) -> str:
    return json.dumps({"id": f"k{number:03d}", "type": "event", "topic": MARK, "text": f"{MARK}\n{text}",
                       "created": "2026-11-01T00:00:00Z", "updated": "2026-11-01T00:00:00Z", "refs": 0,
                       "confidence": 5, "source": ""}) + "\n"


def _session_log(texts: list[str]) -> str:
    """A sample GenericAgent log whose first request also carries every secret."""
    log = sorted(SAMPLES.glob("model_responses_*.txt"))[0].read_text(encoding="utf-8")
    payload = json.dumps(MARK + "\n" + "\n".join(texts), ensure_ascii=False)[1:-1]
    marker = '{"type": "text", "text": "'
    at = log.index(marker) + len(marker)
    return log[:at] + payload + " " + log[at:]


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("surfaces")
    root = base / "memory"
    memctl = memctl_executable()
    env = clean_env()
    subprocess.run([memctl, "--root", str(root), "init"], check=True, capture_output=True, env=env)
    texts = [text for _, text, _ in SHAPES]
    body = "\n".join(texts)
    (root / "global_mem.txt").write_text(f"## [creds]\n{MARK}\n{body}\n", encoding="utf-8")
    (root / "notes.md").write_text(f"{MARK}\n{body}\n", encoding="utf-8")
    (root / "long_term.jsonl").write_text("".join(_entry(n, t) for n, t in enumerate(texts)), encoding="utf-8")
    (root / "archive.jsonl").write_text("".join(_entry(500 + n, t) for n, t in enumerate(texts)), encoding="utf-8")
    task = {"id": "t1", "created": "2026-11-01T00:00:00Z", "updated": "2026-11-01T00:00:00Z", "saves": 1,
            "state": {"goal": MARK, "notes": texts}}
    (root / "working" / "t1.json").write_text(json.dumps(task, ensure_ascii=False), encoding="utf-8")
    raw = base / "temp" / "model_responses"
    raw.mkdir(parents=True)
    (raw / "model_responses_100001.txt").write_text(_session_log(texts), encoding="utf-8")
    done = subprocess.run([memctl, "--root", str(root), "archive", "--min-age", "0s", "--keep-newest", "0"],
                          capture_output=True, env=env)
    assert done.returncode == 0, done.stderr
    return root


def _leaks(output: bytes) -> list[str]:
    text = output.decode("utf-8", "replace")
    return [name for name, secret in SECRETS if secret in text or secret[len(secret) // 2:] in text]


def _session_name(run, root) -> str:
    out = run("recent", "--json", root=root)
    return json.loads(out.stdout.splitlines()[0])["name"]


SURFACES = [
    ("search lean TSV", ["search", MARK, "-k", "200"]),
    ("search lean JSON", ["search", MARK, "-k", "200", "--json"]),
    ("search full TSV", ["search", MARK, "-k", "200", "--wide"]),
    ("search full JSON", ["search", MARK, "-k", "200", "--json", "--wide"]),
    ("search L6", ["search", MARK, "-k", "200", "--layers", "L6"]),
    ("search L4", ["search", MARK, "--layers", "L4", "--json"]),
    ("show L2", ["show", "L2:creds"]),
    ("show L3", ["show", "L3:notes.md"]),
    ("show L5", ["show", "L5:k007"]),
    ("show L6", ["show", "L6:k507"]),
    ("show bare id", ["show", "k041"]),
    ("compose", ["compose", MARK, "--budget", "20000"]),
    ("compose JSON", ["compose", MARK, "--budget", "20000", "--json"]),
    ("recent", ["recent"]),
    ("recent JSON", ["recent", "--json"]),
    ("status", ["status"]),
    ("task show", ["task", "show", "t1"]),
    ("task list", ["task", "list"]),
    ("forget dry run", ["forget", "--match", MARK, "--dry-run"]),
    ("forget dry run JSON", ["forget", "--match", MARK, "--dry-run", "--json"]),
    ("dream dry run", ["dream", "--dry-run", "-v"]),
    ("dream dry run JSON", ["dream", "--dry-run", "-v", "--json"]),
    ("insight rebuild dry run", ["insight", "rebuild", "--dry-run"]),
    ("verify", ["verify"]),
]


@pytest.mark.parametrize("name,args", SURFACES, ids=[s[0] for s in SURFACES])
def test_no_secret_reaches_any_surface(run, planted, name, args):
    out = run(*args, root=planted)
    allowed = (0, 1, 2, 3) if name == "verify" else (0, 1, 3)  # verify: exit 2 = findings
    assert out.returncode in allowed, (out.returncode, out.stderr[-400:])
    assert out.stdout or out.stderr
    assert _leaks(out.stdout + out.stderr) == []


def test_the_secrets_are_really_there(planted):
    """The planted files hold the secrets in clear: the surfaces above are what redacts."""
    raw = (planted / "long_term.jsonl").read_text() + (planted / "notes.md").read_text()
    assert len(_leaks(raw.encode())) == len(SECRETS)


def test_session_show_redacts_and_raw_says_it_holds_secrets(run, planted):
    session = _session_name(run, planted)
    shown = run("show", session, root=planted)
    assert shown.returncode == 0 and _leaks(shown.stdout + shown.stderr) == []
    raw = run("show", session, "--raw", root=planted)
    assert raw.returncode == 0
    assert _leaks(raw.stdout) != []  # byte-exact by contract
    assert b"holds secrets" in raw.stderr and _leaks(raw.stderr) == []


def test_the_insight_file_holds_no_secret(run, planted, tmp_path):
    root = tmp_path / "memory"
    shutil.copytree(planted, root)
    rebuilt = run("insight", "rebuild", root=root)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _leaks(rebuilt.stdout + rebuilt.stderr) == []
    assert _leaks((root / "global_mem_insight.txt").read_bytes()) == []


def test_extra_patterns_apply_on_output(run, planted, tmp_path):
    root = tmp_path / "memory"
    shutil.copytree(planted, root)
    with (root / "memctl.toml").open("a") as handle:
        handle.write('\n[redaction]\nextra_patterns = ["ACME-[0-9]{6}"]\n')
    (root / "notes.md").write_text(f"{MARK} internal ticket ACME-123456 here\n")
    for args in (["search", MARK, "--layers", "L3"], ["show", "L3:notes.md"]):
        out = run(*args, root=root)
        assert b"ACME-123456" not in out.stdout, args
        assert b"[REDACTED:custom]" in out.stdout, args


def test_terminal_table_redacts(memctl_bin, planted):
    """The rich table of a search on a terminal (a real pty)."""
    primary, secondary = pty.openpty()
    env = clean_env(COLUMNS="400")
    proc = subprocess.Popen([memctl_bin, "--root", str(planted), "search", MARK, "-k", "200", "--wide"],
                            stdin=secondary, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    chunks = []
    while True:
        ready, _, _ = select.select([primary], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(primary, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(primary)
    output = b"".join(chunks)
    assert proc.returncode == 0 and b"REDACTED" in output
    assert _leaks(output.replace(b"\r\n", b"\n")) == []
