"""`memctl --version` and the top-level `--help` on the lean path: no typer or rich, and the same
text as the full command line's (issue #31)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import clean_env

import memctl
from memctl.cli import help_text

PROBE = """import sys
sys.argv = ['memctl'] + %r
from memctl.entry import main
try:
    main()
except SystemExit as exit:
    code = exit.code
sys.stdout.flush(); sys.stderr.flush()
sys.__stdout__.write('\\nloaded=%%s code=%%s' %% ([m for m in ('typer', 'rich', 'click') if m in sys.modules], code))
"""


def _console_script(memctl_bin: str, args: list[str], env: dict) -> subprocess.CompletedProcess:
    python = str(Path(memctl_bin).with_name("python"))
    return subprocess.run([python, "-c", PROBE % args], capture_output=True, env=env, timeout=120)


def _full_app(memctl_bin: str, args: list[str], env: dict) -> subprocess.CompletedProcess:
    python = str(Path(memctl_bin).with_name("python"))
    code = f"from memctl.cli.app import main; main({args!r})"
    return subprocess.run([python, "-c", code], capture_output=True, env=env, timeout=120)


def test_the_stored_help_is_current_and_the_full_command_lines_own():
    """Fails when a command's help changed without `python -m memctl.cli.help_text` (the lean
    path then hands --help to the full command line: right, but 0.4 s)."""
    assert help_text.stored_help() is not None, "memctl/cli/help.txt is stale: run python -m memctl.cli.help_text"
    assert help_text.stored_help() == help_text.full_help()


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"], [], ["--root", "/nowhere", "--help"]])
def test_version_and_help_are_answered_without_typer_and_as_the_full_command_line(memctl_bin, args):
    env = clean_env(COLUMNS="100")
    lean = _console_script(memctl_bin, args, env)
    out, _, tail = lean.stdout.decode().rpartition("\nloaded=")
    assert tail.startswith("[] "), (tail, lean.stderr)
    full = _full_app(memctl_bin, args, env)
    assert (out.encode(), lean.stderr) == (full.stdout, full.stderr)
    assert tail.endswith(f"code={full.returncode}")
    if args == ["--version"]:
        assert out == f"memctl {memctl.__version__}\n"
    else:
        assert "Commands:" in (out + lean.stderr.decode()) and "search" in (out + lean.stderr.decode())


def test_a_narrow_terminal_and_other_words_go_to_the_full_command_line(memctl_bin):
    narrow = _console_script(memctl_bin, ["--help"], clean_env(COLUMNS="60"))
    assert "'typer'" in narrow.stdout.decode().rpartition("\nloaded=")[2]
    assert narrow.stdout.decode().rpartition("\nloaded=")[0].encode() == \
        _full_app(memctl_bin, ["--help"], clean_env(COLUMNS="60")).stdout
    for args in (["search", "--help"], ["--version", "status"], ["--root"], ["--root", "--version"], ["--debug"]):
        assert help_text.answer(args) is None, args


def test_a_stale_stored_help_is_not_used(tmp_path, monkeypatch):
    stale = tmp_path / "help.txt"
    stale.write_text("# fingerprint 00000000\nUsage: an old help\n", encoding="utf-8")
    monkeypatch.setattr(help_text, "HELP_FILE", str(stale))
    monkeypatch.setattr(help_text, "fingerprint", lambda: "12345678")
    monkeypatch.setenv("COLUMNS", "100")
    assert help_text.stored_help() is None
    assert help_text.answer(["--help"]) is None
    assert help_text.answer(["--version"]) == 0  # the version needs no stored text


def test_the_fingerprint_covers_every_command_module(tmp_path, monkeypatch):
    """A command module added or changed changes the fingerprint."""
    package = tmp_path / "cli"
    (package / "commands").mkdir(parents=True)
    (package / "app.py").write_text("app\n")
    (package / "commands" / "a.py").write_text("def a(): 'help a'\n")
    monkeypatch.setattr(help_text, "HELP_FILE", str(package / "help.txt"))
    first = help_text.fingerprint()
    (package / "commands" / "b.py").write_text("def b(): 'help b'\n")
    second = help_text.fingerprint()
    (package / "commands" / "a.py").write_text("def a(): 'help A'\n")
    assert len({first, second, help_text.fingerprint()}) == 3
