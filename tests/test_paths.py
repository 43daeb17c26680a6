"""memctl.core.paths gives the text pathlib would, so a str layout prints the same paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memctl.core import paths
from memctl.core.config import Layout, load_settings

TEXTS = ["", ".", "./", "a", "a/", "a//b", "a/./b", "a/../b", "/", "//", "///", "//a", "///a", "/a/b/", "/a/./b/.",
         "~", "~/x", "~/", "~root/x", "~no-such-user-here/x", "x/~", "./~", "/tmp/../tmp", "..", "a b/ü", "~/../x"]


def _outcome(call, text):
    try:
        return call(text)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return repr(exc)


@pytest.mark.parametrize("text", TEXTS)
def test_like_pathlib(text, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert paths.normal(text) == str(Path(text))
    assert _outcome(paths.absolute_user, text) == _outcome(lambda t: str(Path(t).expanduser().absolute()), text)
    assert paths.absolute(text) == str(Path(text).absolute())
    if text:
        assert paths.join(paths.normal(text), "x.txt") == str(Path(text) / "x.txt")
        assert paths.parent(paths.normal(text)) == str(Path(text).parent)
        assert paths.name(paths.normal(text)) == Path(text).name


def test_home_without_a_home_variable_and_with_a_relative_one(monkeypatch):
    monkeypatch.setenv("HOME", "relative/home")
    assert paths.home() == str(Path.home())
    assert paths.absolute_user("~/m") == str(Path("~/m").expanduser().absolute())


def test_a_layout_of_a_str_root_names_the_files_a_path_layout_names(tmp_path):
    text, path = Layout(str(tmp_path)), Layout(tmp_path)
    for prop in ("config_file", "insight", "histories", "manifest", "long_term", "cold_archive", "dream_log",
                 "state_dir", "lock", "refs_log"):
        assert isinstance(getattr(text, prop), str)
        assert getattr(text, prop) == str(getattr(path, prop)), prop
    assert text.default_raw_dir() == str(path.default_raw_dir())


def test_settings_as_text_keep_the_root_text(tmp_path):
    settings = load_settings(f"{tmp_path}//./", as_text=True)
    assert settings.layout.root == str(tmp_path)
    assert load_settings(tmp_path).layout.root == tmp_path
    assert os.path.isabs(settings.layout.root)
