"""Paths kept as str where pathlib is not loaded, as `pathlib.Path` elsewhere.

Importing pathlib loads urllib.parse, ipaddress, fnmatch, ntpath and warnings: ~18M
instructions, the largest part of a `remember` process after the interpreter itself. The
lean write path therefore works on str paths (`Layout` of a str root, `load_settings(...,
as_text=True)`); the functions below answer for both kinds, a str for a str, and give the
text `str(Path(...))` would (tests/test_paths.py compares them).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

_POSIX = os.name != "nt"
CONFIG_NAME = "memctl.toml"  # here, not in config: root resolution needs them without loading the settings
STATE_DIR = ".memctl"


def join(base: str | Path, *names: str) -> str | Path:
    """`base / name / …`: a str when `base` is one (it is a normalized path, `names` plain names)."""
    if isinstance(base, str):
        return os.path.join(base, *names) if base != "." else os.path.join(*names)  # Path(".") / "x" is "x"
    return base.joinpath(*names)


def parent(path: str | Path) -> str | Path:
    return (os.path.dirname(path) or ".") if isinstance(path, str) else path.parent


def name(path: str | Path) -> str:
    if isinstance(path, str):
        return os.path.basename(path) if path != "." else ""
    return path.name


def normal(text: str) -> str:
    """`str(Path(text))`: empty and `.` parts dropped, a leading `//` kept (POSIX)."""
    if not _POSIX:
        from pathlib import Path

        return str(Path(text))
    root = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    parts = [part for part in text.split("/") if part and part != "."]
    return root + "/".join(parts) if root or parts else "."


def absolute_user(text: str | os.PathLike) -> str:
    """`str(Path(text).expanduser().absolute())`."""
    text = os.fspath(text)
    if not _POSIX or isinstance(text, bytes):
        from pathlib import Path

        return str(Path(text).expanduser().absolute())
    return absolute(expand_user(text))


def absolute(text: str) -> str:
    """`str(Path(text).absolute())` (POSIX)."""
    if not _POSIX:
        from pathlib import Path

        return str(Path(text).absolute())
    path = normal(text)
    return path if path.startswith("/") else normal(os.getcwd() + "/" + path)


def expand_user(text: str) -> str:
    """`str(Path(text).expanduser())` (POSIX)."""
    path = normal(text)
    if not path.startswith("~"):
        return path
    first, _, rest = path.partition("/")
    home_dir = os.path.expanduser(first)
    if home_dir.startswith("~"):  # no home directory: pathlib's own error
        from pathlib import Path

        return str(Path(text).expanduser())
    return normal(home_dir + "/" + rest)


def home() -> str:
    """`str(Path.home())`."""
    if not _POSIX:
        from pathlib import Path

        return str(Path.home())
    return expand_user("~")
