"""Installing: every install line a user is shown installs this project, never the unrelated
project that owns the name `memctl` on the package index (issue #32)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import clean_env

import memctl
from memctl.core.extras import DISTRIBUTION, EXTRAS, install_hint

REPO = Path(__file__).resolve().parent.parent
TAKEN = "memctl"  # on the package index since 2023: another project's code
INSTALL = re.compile(r"\b(?:pipx|pip3?|python3? -m pip)\s+install\s+([^`#\n;&|)]*)")
# documents whose install lines a user may copy (the changelog's history included)
SCANNED = ("README.md", "CHANGELOG.md", "ARCHITECTURE.md", "bench/RESULTS.md", ".ci/run")


def index_names(arguments: str) -> list[str]:
    """The distributions an install's arguments would fetch from the index by name (local
    paths, `-e PATH`, wheels and options left out), lower-cased, without extras or versions."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        words = arguments.split()
    names, skip_next = [], False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        if word in ("-e", "--editable", "-r", "--requirement", "-c", "--constraint", "--python"):
            skip_next = True
            continue
        if word.startswith("-") or word.startswith((".", "/", "~", "$")) or "/" in word or word.endswith(".whl"):
            continue
        names.append(re.split(r"[\[<>=!~;\s]", word, maxsplit=1)[0].lower())
    return names


def install_lines(text: str) -> list[str]:
    return [match.group(0) for match in INSTALL.finditer(text)]


def test_the_checker_catches_every_form_of_the_taken_name():
    caught = ["pipx install memctl", "pip install memctl", "pip install 'memctl[semantic]'",
              'pip install "memctl[postgres]"', "pip install memctl==0.1.0 numpy", "pip install -U memctl",
              f"pip install {DISTRIBUTION}"]
    passed = ["pip install -e .", "pipx install .", "pip install -e '.[semantic]'", "pip install --user .",
              "pip install -e . numpy tokenizers", "pipx install dist/memctl_agent-0.1.0-py3-none-any.whl",
              "pip install ~/src/memctl", "pip install /tmp/bsrc"]
    for line in caught:
        assert {TAKEN, DISTRIBUTION} & set(index_names(INSTALL.search(line).group(1))), line
    for line in passed:
        assert not {TAKEN, DISTRIBUTION} & set(index_names(INSTALL.search(line).group(1))), line


def test_no_install_line_fetches_memctl_from_the_index_by_name():
    """The README (and every doc, script and message) installs the checkout: the taken name
    installs someone else's code, and this project's own name is not published yet."""
    files = [REPO / name for name in SCANNED] + sorted((REPO / "memctl").rglob("*.py")) \
        + sorted((REPO / "bench").rglob("*.py")) + sorted((REPO / "contrib").rglob("*"))
    offending = []
    for path in files:
        if not path.is_file():
            continue
        for line in install_lines(path.read_text(encoding="utf-8", errors="replace")):
            if {TAKEN, DISTRIBUTION} & set(index_names(INSTALL.search(line).group(1))):
                offending.append(f"{path.relative_to(REPO)}: {line}")
    assert not offending, offending
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(install_lines(readme)) >= 8  # the checker saw the README's install lines


def test_the_distribution_is_not_the_taken_name_and_the_command_is_memctl():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION != TAKEN
    assert project["scripts"] == {"memctl": "memctl.entry:main"}


def test_the_messages_asking_for_an_extra_name_its_packages():
    """An error asking for an extra names what pyproject.toml's extra installs."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for name, packages in EXTRAS.items():
        assert tuple(extras[name]) == packages, name
        hint = install_hint(name)
        assert hint.startswith("pip install ") and not {TAKEN, DISTRIBUTION} & set(index_names(hint[12:]))
        assert f"[{name}] extra" in hint


@pytest.mark.slow
def test_the_readme_install_line_installs_this_project_in_a_fresh_venv(tmp_path):
    """The README's install-and-run line, in a fresh venv (its dependencies left out: --no-deps),
    installs this checkout as memctl-agent, and the `memctl` it puts there reports this
    project's version (answered on the lean path, which needs none of them)."""
    first = re.search(r"```sh\n(python3 -m venv .venv && .venv/bin/pip install -e \.)( && .*)\n```",
                      (REPO / "README.md").read_text(encoding="utf-8"))
    assert first, "the README's first command changed: update this test"
    checkout = tmp_path / "memctl"
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "__pycache__",
                                                                  ".pytest_cache", "build"))
    base_bin = Path(sys.base_prefix) / "bin"  # python3 itself, not this venv's
    env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{base_bin}:/usr/bin:/bin", PIP_DISABLE_PIP_VERSION_CHECK="1")
    install = first.group(1) + " --no-deps -q"
    done = subprocess.run(["bash", "-c", install], cwd=checkout, capture_output=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    shown = subprocess.run([str(checkout / ".venv/bin/pip"), "show", DISTRIBUTION], capture_output=True, env=env,
                           timeout=120)
    assert shown.returncode == 0 and f"Version: {memctl.__version__}" in shown.stdout.decode(), shown.stdout
    assert f"Location: {checkout}" in shown.stdout.decode() or "Editable project location" in shown.stdout.decode()
    taken = subprocess.run([str(checkout / ".venv/bin/pip"), "show", TAKEN], capture_output=True, env=env, timeout=120)
    assert taken.returncode != 0  # nothing by the taken name came in
    version = subprocess.run([str(checkout / ".venv/bin/memctl"), "--version"], capture_output=True, env=env,
                             timeout=60)
    assert (version.returncode, version.stdout.decode()) == (0, f"memctl {memctl.__version__}\n"), version.stderr
