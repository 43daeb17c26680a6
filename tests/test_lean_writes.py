"""The lean write path (`memctl.cli.writes`) answers remember / forget / restore exactly as the
full command line does: same stdout, stderr, exit codes, and the same L5/L6 bytes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from conftest import clean_env

from memctl.core.fsutil import WriterLock

NOW = "2026-03-01T09:00:00"
ID = re.compile(rb"\b(?:m|f-|r-|d-)[0-9a-f]{12}\b")


def _normalize(data: bytes, names: dict) -> bytes:
    """Ids are random: each becomes its order of first appearance in the run."""
    return ID.sub(lambda m: names.setdefault(m.group(0), b"<id%d>" % len(names)), data)


def _script(root: Path):
    """(argv, stdin or "as:NAME") of each call; `{NAME}` is the id the call saved as NAME printed."""
    return [
        (["remember", "the deploy uses blue green switching", "--type", "event"], "as:deploy"),
        (["remember", "The deploy uses blue-green switching!", "--type", "event"], None),
        (["remember", "the deploy uses blue green switching", "--type", "event", "--json"], None),
        (["remember", "I use vim", "--type", "preference", "--topic", "editor"], None),
        (["remember", "I switched to helix", "--type=preference", "--topic", "Editor", "--json"], None),
        (["remember", "i switched to helix", "-t", "preference", "--topic", "editor"], None),
        (["remember", "-", "--type", "lesson", "--confidence", "8", "--source", "s1"], b"check the backups on n3\n"),
        (["remember", "rotated the cache on host alpha", "--type", "event", "--contradicts", "{deploy}",
          "--contradicts", "x1", "--wait=2"], "as:cache"),
        (["forget", "{cache}", "nosuch", "--reason", "wrong"], None),
        (["forget", "nosuch", "--json"], None),
        (["remember", "rotated the cache on host alpha", "--type", "event"], None),
        (["restore", "{cache}", "--json"], None),
        (["restore", "{cache}"], None),
        (["restore", "nosuch"], None),
        (["forget", "{deploy}", "--json"], None),
        (["remember", "rotated the cache on host alpha!", "--type", "event", "--force"], None),
        (["remember", "", "--type", "event"], None),
        (["remember", "a fact", "--type", "nosuchtype"], None),
        (["remember", "a fact", "--type", "event", "--confidence", "11"], None),
        (["remember", "a fact", "--type", "preference"], None),
        (["remember", "a [bold]marked[/bold] fact :smile: here", "--type", "event"], None),
        (["remember", "--root", str(root), "later root option", "--type", "event"], None),
        ("bad-line", None),
        (["remember", "written with a bad line in L5", "--type", "event"], None),
        ("lock", None),
        (["remember", "a fact while locked", "--type", "event", "--wait", "0"], None),
    ]


def _play(memctl_bin: str, root: Path, full: bool, extra: dict | None = None) -> list:
    """The script's records; `extra`: more of the environment (test_resident.py's writer)."""
    env = clean_env(**{"MEMCTL_NOW": NOW, **({"MEMCTL_FULL_CLI": "1"} if full else {}), **(extra or {})})
    names: dict = {}
    saved: dict[str, str] = {}
    record = []
    for step, (argv, stdin) in enumerate(_script(root)):
        if argv == "bad-line":
            with open(root / "long_term.jsonl", "ab") as handle:
                handle.write(b"not an entry\n")
            continue
        if argv == "lock":
            lock = WriterLock(root / ".memctl" / "lock").acquire()
            continue
        args = [a.format(**saved) if "{" in a else a for a in argv]
        save = stdin[3:] if isinstance(stdin, str) else None
        done = subprocess.run([memctl_bin, "--root", str(root), *args], input=None if save else stdin,
                              capture_output=True, env=env, timeout=120)
        if save:
            saved[save] = done.stdout.decode().strip()
        record.append((step, done.returncode, _normalize(done.stdout, names),
                       _normalize(done.stderr.replace(str(root).encode(), b"ROOT"), names)))
    lock.release()
    for name in ("long_term.jsonl", "archive.jsonl", "dream_log.jsonl"):
        record.append((name, _normalize((root / name).read_bytes(), names)))
    return record


def test_lean_and_full_write_paths_print_and_write_the_same(memctl_bin, tmp_path):
    base = tmp_path / "base"
    subprocess.run([memctl_bin, "--root", str(base), "init"], check=True, capture_output=True, env=clean_env())
    lean_root, full_root = tmp_path / "lean", tmp_path / "full"
    shutil.copytree(base, lean_root)
    shutil.copytree(base, full_root)
    lean = _play(memctl_bin, lean_root, full=False)
    full = _play(memctl_bin, full_root, full=True)
    for mine, theirs in zip(lean, full):
        assert mine == theirs
    codes = [r[1] for r in full if len(r) == 4]
    assert {0, 2, 3, 75} <= set(codes)  # the script met success, errors, a partial forget, a busy lock
    assert any(b"warning: long_term.jsonl:" in r[3] for r in full if len(r) == 4)


def test_the_lean_write_path_imports_neither_typer_nor_rich(memctl_bin, tmp_path):
    root = tmp_path / "memory"
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    heavy = ["typer", "rich", "click", "memctl.cli.app", "memctl.cli.commands.longterm"]
    python = str(Path(memctl_bin).with_name("python"))
    for argv in (["remember", "the proxy listens on 7890", "--type", "event"],
                 ["remember", "the proxy listens on 7890", "--type", "event", "--json"],
                 ["forget", "nosuch"], ["restore", "nosuch"]):
        probe = ("import sys, runpy; sys.argv = ['memctl', '--root', %r] + %r\n"
                 "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
                 "except SystemExit as exit:\n"
                 "    sys.stderr.write('exit=%%s loaded=%%s' %% (exit.code, [m for m in %r if m in sys.modules]))\n"
                 % (str(root), argv, heavy))
        done = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(), timeout=120)
        assert done.stderr.endswith(b"loaded=[]"), (argv, done.stderr)
    full = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(MEMCTL_FULL_CLI="1"), timeout=120)
    assert b"'typer'" in full.stderr  # the probe can see the full command line load


# what a write process must never load (each costs milliseconds of every agent turn): the
# full command line, the modules that pull in inspect/ast/dis, OpenSSL, the search side, and
# tomllib once memctl.toml was parsed (.memctl/config.json), rapidfuzz (and the typing it
# loads) while a few near-duplicate candidates are scored in pure Python (longterm.indel), copy
# (and its weakref).
NOT_ON_THE_WRITE_PATH = ["typer", "rich", "click", "dataclasses", "inspect", "ast", "dis", "hashlib", "tempfile",
                         "rapidfuzz", "typing", "copy", "weakref",
                         "tomllib", "zipfile", "jieba", "rjieba", "subprocess", "memctl.cli.app", "memctl.recall",
                         "memctl.longterm.purge_steps", "memctl.longterm.dream", "memctl.l4"]


# and what a remember must not load either (issue #13, writes3): pathlib and its urllib.parse,
# ipaddress and fnmatch (paths are str: memctl.core.paths), json's Python modules (`_json`:
# memctl.core.jsoncodec), the sqlite3 package and datetime (`_sqlite3`: memctl.core.sqlite;
# clock.stamp); an append of a text the secret gate passes over (memctl.core.secret_gate), whose
# report is an id, not the redaction rules either
NOT_ON_THE_REMEMBER_PATH = NOT_ON_THE_WRITE_PATH + ["pathlib", "urllib", "ipaddress", "fnmatch", "ntpath", "json",
                                                    "sqlite3", "datetime"]


def test_the_lean_write_path_loads_only_what_a_write_needs(memctl_bin, tmp_path):
    root = tmp_path / "memory"
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    (root / "memctl.toml").write_text("[dream]\nauto_trigger_entries = 100000\n")  # parsed once, then cached
    first = subprocess.run([memctl_bin, "--root", str(root), "remember", "the proxy listens on 7890", "--type", "event"],
                           check=True, capture_output=True, env=clean_env()).stdout.decode().strip()
    python = str(Path(memctl_bin).with_name("python"))
    scripts = [["remember", "the cache lives on n3", "--type", "event"],  # added: the group-committed append
               ["remember", "The proxy listens on 7890!", "--type", "event"],  # seen: an L5 rewrite
               ["remember", "editor is vim", "--type", "preference", "--topic", "editor"],
               ["remember", "editor is helix", "--type", "preference", "--topic", "editor"],  # a journaled supersede
               ["forget", first], ["restore", first], ["forget", "nosuch"]]
    for argv in scripts:
        pinned = NOT_ON_THE_REMEMBER_PATH if argv[0] == "remember" else NOT_ON_THE_WRITE_PATH
        pinned = pinned + ["memctl.core.redact"] if argv is scripts[0] else pinned
        # what the interpreter loaded before memctl (an editable install's finder loads pathlib)
        # is forgotten first, so that memctl importing it shows
        probe = ("import sys, runpy; sys.argv = ['memctl', '--root', %r] + %r\n"
                 "pinned = lambda: sorted({m for m in sys.modules for n in %r if m == n or m.startswith(n + '.')})\n"
                 "for m in pinned():\n    del sys.modules[m]\n"
                 "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
                 "except SystemExit as exit:\n"
                 "    sys.stderr.write('exit=%%s loaded=%%s' %% (exit.code, pinned()))\n"
                 % (str(root), argv, pinned))
        done = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(), timeout=120)
        assert done.stderr.endswith(b"loaded=[]"), (argv, done.stderr)
        assert b"exit=0" in done.stderr or argv == ["forget", "nosuch"], (argv, done.stderr)
