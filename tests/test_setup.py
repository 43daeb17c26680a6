import json
import os
import stat

from memctl.core.config import load_settings
from memctl.core.roots import resolve_root
from memctl.core.errors import ConfigError, LockBusy
from memctl.core.fsutil import WriterLock, atomic_write_bytes, safe_child

import pytest


def test_version_and_help(run):
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.decode().startswith("memctl ")
    helped = run("--help")
    assert helped.returncode == 0
    assert b"archive" in helped.stdout or b"init" in helped.stdout


def test_init_is_idempotent_and_private(run, root):
    first = run("init", "--json", root=root)
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)["created"]
    assert created
    second = run("init", "--json", root=root)
    assert json.loads(second.stdout)["created"] == []
    for path in [root, root / "L4_raw_sessions", root / ".memctl"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in [root / "memctl.toml", root / "long_term.jsonl"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_rules_show_origin_of_each_setting(run, root):
    run("init", root=root)
    (root / "memctl.toml").write_text('[archive]\nkeep_newest = 3\n[types.recipe]\npolicy = "merge"\n')
    result = run("rules", "--json", root=root)
    data = json.loads(result.stdout)
    settings = {row["key"]: row for row in data["settings"]}
    assert settings["archive.keep_newest"]["value"] == 3
    assert settings["archive.keep_newest"]["origin"].endswith("memctl.toml")
    assert settings["archive.min_age"]["origin"] == "default"
    assert settings["types.recipe"]["value"]["policy"] == "merge"
    assert data["rules"]


def test_bad_config_is_one_line_error(run, root):
    run("init", root=root)
    (root / "memctl.toml").write_text("[archive]\nkeep_newest = 'many'\n")
    result = run("rules", root=root)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr
    assert len(result.stderr.decode().strip().splitlines()) == 1


def test_config_of_comments_and_headers_only_means_defaults(tmp_path):
    (tmp_path / "memctl.toml").write_text("# nothing set\n[archive]\n# keep_newest = 3\n\n[dream]\n")
    settings = load_settings(tmp_path)
    assert all(origin == "default" for origin in settings.origins.values())
    for broken in ("[archive\n", "archive\n", "[bogus]\n"):
        (tmp_path / "memctl.toml").write_text(broken)
        with pytest.raises(ConfigError):
            load_settings(tmp_path)


def test_unknown_key_rejected(tmp_path):
    (tmp_path / "memctl.toml").write_text("[archive]\nbogus = 1\n")
    with pytest.raises(ConfigError, match="unknown key archive.bogus"):
        load_settings(tmp_path)


def test_root_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMCTL_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert resolve_root(None, cwd=tmp_path, for_init=True) == tmp_path / "xdg" / "memctl"
    (tmp_path / "memory").mkdir()
    assert resolve_root(None, cwd=tmp_path, for_init=True) == tmp_path / "memory"
    monkeypatch.setenv("MEMCTL_HOME", str(tmp_path / "home"))
    assert resolve_root(None, cwd=tmp_path, for_init=True) == tmp_path / "home"
    assert resolve_root(str(tmp_path / "flag"), cwd=tmp_path, for_init=True) == tmp_path / "flag"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")
    monkeypatch.delenv("MEMCTL_HOME")
    (tmp_path / "memory").rmdir()
    assert resolve_root(None, cwd=tmp_path, for_init=True).is_absolute()


def test_lock_is_exclusive_and_released(tmp_path):
    lock_path = tmp_path / ".memctl" / "lock"
    with WriterLock(lock_path):
        with pytest.raises(LockBusy) as info:
            WriterLock(lock_path).acquire()
        assert info.value.exit_code == 75
    with WriterLock(lock_path):
        pass


def test_atomic_write_leaves_no_temp_on_failure(tmp_path):
    dest = tmp_path / "f.txt"
    atomic_write_bytes(dest, b"one")

    class Boom(Exception):
        pass

    from memctl.core.fsutil import atomic_writer

    with pytest.raises(Boom):
        with atomic_writer(dest) as handle:
            handle.write(b"partial")
            raise Boom()
    assert dest.read_bytes() == b"one"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", "..", "", "x\x00y"])
def test_safe_child_refuses_escaping_names(tmp_path, name):
    from memctl.core.errors import UnsafePath

    with pytest.raises(UnsafePath):
        safe_child(tmp_path, name)


def test_a_piped_search_does_not_import_the_full_command_line(memctl_bin, tmp_path):
    """The console script answers piped searches without typer and rich (start-up cost), and
    a search over a fresh index without the modules only writers need."""
    import subprocess

    from conftest import clean_env

    root = tmp_path / "memory"
    subprocess.run([memctl_bin, "--root", str(root), "init"], check=True, capture_output=True, env=clean_env())
    (root / "notes.md").write_text("the proxy listens on port 7890\n")
    heavy = ["typer", "rich", "jieba", "rjieba", "multiprocessing", "tomllib", "zipfile", "tempfile", "json", "typing",
             "dataclasses", "memctl.longterm.entries", "numpy", "torch", "tokenizers", "memctl.recall.embeddings.vectors"]
    probe = ("import sys, runpy; sys.argv = ['memctl', '--root', %r, 'search', 'proxy']\n"
             "try:\n    runpy.run_module('memctl', run_name='__main__')\n"
             "except SystemExit as exit:\n"
             "    sys.stderr.write('exit=%%s loaded=%%s' %% (exit.code, [m for m in %r if m in sys.modules]))\n"
             % (str(root), heavy))
    python = str(__import__("pathlib").Path(memctl_bin).with_name("python"))
    first = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(), timeout=120)
    assert b"notes.md" in first.stdout
    assert first.stderr.startswith(b"exit=0 loaded=") and b"typer" not in first.stderr, first.stderr
    second = subprocess.run([python, "-c", probe], capture_output=True, env=clean_env(), timeout=120)
    assert b"notes.md" in second.stdout
    assert second.stderr.endswith(b"exit=0 loaded=[]"), second.stderr


def test_the_parsed_config_cache_follows_the_file_and_survives_damage(tmp_path):
    """`.memctl/config.json` saves a write process the tomllib import; it is used only for the
    very text it was parsed from, and a damaged or planted cache is never trusted."""
    from memctl.core import config
    from memctl.core.config import init_root

    init_root(tmp_path)
    cache = tmp_path / ".memctl" / "config.json"
    (tmp_path / "memctl.toml").write_text("[archive]\nkeep_newest = 3\n")
    assert load_settings(tmp_path).get("archive", "keep_newest") == 3
    assert json.loads(cache.read_text())["parsed"] == {"archive": {"keep_newest": 3}}
    config._LOADED.clear()  # what a new process sees
    (tmp_path / "memctl.toml").write_text("[archive]\nkeep_newest = 4\n")
    assert load_settings(tmp_path).get("archive", "keep_newest") == 4
    config._LOADED.clear()
    cache.write_text(json.dumps({"toml": "[archive]\nkeep_newest = 4\n", "parsed": {"archive": {"keep_newest": 9}}}))
    assert load_settings(tmp_path).get("archive", "keep_newest") == 9  # proof that the cache is what was read
    for damage in (b"{not json", b"[]", json.dumps({"toml": "other", "parsed": {}}).encode()):
        config._LOADED.clear()
        cache.write_bytes(damage)
        assert load_settings(tmp_path).get("archive", "keep_newest") == 4
    config._LOADED.clear()
    (tmp_path / "memctl.toml").write_text("[archive]\nkeep_newest = 'many'\n")
    with pytest.raises(ConfigError):  # the cached parse is validated as a fresh one is
        load_settings(tmp_path)


def test_init_takes_the_folder_the_not_a_memory_error_names(run, tmp_path):
    """The error for a folder that is not a memory says `run memctl init PATH`: typed as said, it works."""
    plain = tmp_path / "notes"
    plain.mkdir()
    refused = run("status", root=plain)
    assert refused.returncode == 2
    assert f"run memctl init {plain}".encode() in refused.stderr, refused.stderr
    made = run("init", str(plain), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["root"] == str(plain)
    assert (plain / "memctl.toml").is_file()
    assert run("status", root=plain).returncode == 0
    twice = run("init", str(tmp_path / "other"), root=plain)
    assert twice.returncode == 2 and b"two folders" in twice.stderr and b"Traceback" not in twice.stderr
    assert not (tmp_path / "other").exists()
    home = tmp_path / "home"
    empty = run("init", "", env={"HOME": str(home), "XDG_DATA_HOME": str(home / "data")})
    assert empty.returncode == 2 and b"empty path" in empty.stderr and not home.exists()
