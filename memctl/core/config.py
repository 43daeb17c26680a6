"""Where the memory lives and how it behaves: root resolution, layer paths, `memctl.toml`.

Every layer's path is computed here and nowhere else (design.md §2). Every configuration key
has a default; `effective_settings` reports each value with where it came from, which is
what `memctl rules` prints.
"""

from __future__ import annotations

import contextlib
import os
from collections import namedtuple

from memctl.core.errors import ConfigError, UnsafePath
from memctl.core.fsutil import FILE_MODE, NOFOLLOW, TMP_SUFFIX, ensure_private_dir, refuse_symlink, set_mode
from memctl.core.paths import CONFIG_NAME, STATE_DIR, join, name, normal, parent  # noqa: F401  (re-exported)

TYPE_CHECKING = False  # typing costs ~7 ms to import; annotations here are never evaluated
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any


from memctl.core.defaults import BOUNDS, DEFAULT_TYPES, DEFAULTS, META_RULES, RETIRED, plain_copy  # noqa: F401 (re-exported)

BACKENDS = ("files", "postgres")


class Layout(namedtuple("Layout", "root")):
    """Paths of every layer inside one memory root (immutable; a namedtuple rather than a
    dataclass: modules on a search's import path avoid `dataclasses`, which pulls in inspect
    and ast — ~15 ms of every query). A str root gives str paths (the lean `remember`, which
    never loads pathlib: memctl.core.paths), a Path root Path ones."""

    __slots__ = ()
    root: Path

    @property
    def config_file(self) -> Path:
        return join(self.root, CONFIG_NAME)

    @property
    def insight(self) -> Path:
        return join(self.root, "global_mem_insight.txt")

    @property
    def global_mem(self) -> Path:
        return join(self.root, "global_mem.txt")

    @property
    def working_dir(self) -> Path:
        return join(self.root, "working")

    @property
    def l4_dir(self) -> Path:
        return join(self.root, "L4_raw_sessions")

    @property
    def histories(self) -> Path:
        return join(self.l4_dir, "all_histories.txt")

    @property
    def manifest(self) -> Path:
        return join(self.l4_dir, "manifest.jsonl")

    @property
    def long_term(self) -> Path:
        return join(self.root, "long_term.jsonl")

    @property
    def cold_archive(self) -> Path:
        return join(self.root, "archive.jsonl")

    @property
    def dream_log(self) -> Path:
        return join(self.root, "dream_log.jsonl")

    @property
    def custom_dict(self) -> Path:
        return join(self.root, "custom_dict.txt")

    @property
    def aliases(self) -> Path:
        return join(self.root, "aliases.txt")

    @property
    def state_dir(self) -> Path:
        return join(self.root, STATE_DIR)

    @property
    def lock(self) -> Path:
        return join(self.state_dir, "lock")

    @property
    def derived_dir(self) -> Path:
        """Where the derived index (and its lock) live: `.memctl/` when it exists and can be
        written, else `$XDG_CACHE_HOME/memctl/<hash of the root>/` — so a read-only memory
        (a mounted backup, another user's folder) or one never initialised (a GenericAgent
        `memory/`) can be searched without anything being created inside it."""
        return derived_dir_for(self.root)

    def state_writable(self) -> bool:
        """True when `.memctl/` exists and this process may write into it (refs.log etc.)."""
        return os.path.isdir(self.state_dir) and os.access(self.state_dir, os.W_OK)

    @property
    def index(self) -> Path:
        return join(self.derived_dir, "index.sqlite")

    @property
    def refs_log(self) -> Path:
        return join(self.state_dir, "refs.log")

    def default_raw_dir(self) -> Path:
        return join(parent(self.root), "temp", "model_responses")


class Settings:
    """The effective configuration of one root: values plus where each came from."""

    __slots__ = ("layout", "values", "origins")

    def __init__(self, layout: Layout, values: dict[str, dict[str, object]], origins: dict[str, str] | None = None):
        self.layout = layout
        self.values = values
        self.origins = origins if origins is not None else {}

    def get(self, section: str, key: str) -> Any:
        return self.values[section][key]

    @property
    def types(self) -> dict[str, dict[str, str]]:
        return self.values["types"]

    def raw_dir(self, override: Path | None = None) -> Path:
        """Positional argument > [archive] raw_dir > temp/model_responses beside the root."""
        from pathlib import Path

        if override is not None:
            return Path(override)
        configured = str(self.values["archive"]["raw_dir"] or "")
        if configured:
            path = Path(configured).expanduser()
            return path if path.is_absolute() else self.layout.root / path
        return self.layout.default_raw_dir()


def cache_home() -> Path:
    from pathlib import Path

    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"


def derived_dir_for(root: str | Path) -> str | Path:
    state_dir = join(root, STATE_DIR)
    refuse_symlink(state_dir)  # the index and its lock would be written wherever it points
    if os.path.isdir(state_dir) and os.access(state_dir, os.W_OK):
        return state_dir
    import hashlib  # here: an initialised, writable memory (the usual case) never needs it

    digest = hashlib.sha256(os.fsencode(os.path.abspath(root))).hexdigest()[:16]
    found = cache_home() / "memctl" / digest
    return str(found) if isinstance(root, str) else found


def load_settings(root: str | Path, as_text: bool = False) -> Settings:
    """The settings of a root; `as_text`: its layout's paths are str (pathlib not loaded)."""
    layout = Layout(normal(os.fspath(root)) if as_text else _path(root))
    values, origins = _loaded(layout)
    return Settings(layout=layout, values=plain_copy(values), origins=dict(origins))


def _path(root) -> Path:
    from pathlib import Path

    return Path(root)


def store_backend(root: str | Path) -> str:
    """`[store] backend` of a root ("files" or "postgres"), without copying the settings:
    every opening of the entry store asks it, several times in one write."""
    return _loaded(Layout(root))[0]["store"]["backend"]


_LOADED: dict[tuple[str, bytes | None], tuple[dict, dict]] = {}  # (root, memctl.toml's bytes) -> parsed


def _loaded(layout: Layout) -> tuple[dict, dict]:
    """(values, origins) of a root, parsed once per process for the same memctl.toml bytes
    (a `remember` reads its settings in five places); never to be changed by the caller."""
    path = layout.config_file
    data = _bytes_if_file(path)
    key = (str(layout.root), data)
    found = _LOADED.get(key)
    if found is None:
        found = _parse_settings(path, data)
        if len(_LOADED) >= 32:  # a long-lived process (tests, a plugin) visits many roots
            _LOADED.clear()
        _LOADED[key] = found
    return found


_READ: dict[str, tuple[tuple[int, int], bytes]] = {}  # memctl.toml's path -> ((mtime_ns, size), its bytes)


def _bytes_if_file(path: str | Path) -> bytes | None:
    """memctl.toml's bytes, read again only when its mtime or size changed: a serve batch opens
    the store several times, each asking the backend (issue #30), and a stat is all it pays."""
    import stat

    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    key, signature = os.fspath(path), (info.st_mtime_ns, info.st_size)
    seen = _READ.get(key)
    if seen is not None and seen[0] == signature:
        return seen[1]
    with open(path, "rb") as handle:
        data = handle.read()
    if len(_READ) >= 32:  # a long-lived process (tests, a plugin) visits many roots
        _READ.clear()
    _READ[key] = (signature, data)
    return data


def _parse_settings(path: Path, data: bytes | None) -> tuple[dict, dict]:
    values = plain_copy(DEFAULTS)
    origins = {f"{section}.{key}": "default" for section, table in DEFAULTS.items() for key in table}
    if data is not None:
        try:
            text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc}); fix or remove the file") from None
        if _sets_something(text):
            _merge_user_config(values, origins, _parse_toml(text, path), path)
    return values, origins


def _sets_something(text: str) -> bool:
    """False for a file of comments and known empty section headers only (the file `init`
    writes): then the defaults stand and tomllib need not be loaded (a search runs this)."""
    for line in text.splitlines():
        line = line.strip()
        header = line.startswith("[") and line.endswith("]") and line[1:-1].strip() in DEFAULTS
        if line and not line.startswith("#") and not header:
            return True
    return False


PARSED_CONFIG = "config.json"  # in .memctl/: memctl.toml's text and its parse (derived)


def _parse_toml(text: str, path: Path) -> dict:
    """memctl.toml parsed; from `.memctl/config.json` when that holds the parse of this very
    text (a write process then need not import tomllib: ~3 ms of every `remember`)."""
    cache = join(parent(path), STATE_DIR, PARSED_CONFIG)
    parsed = _cached_parse(cache, text)
    if parsed is not None:
        return parsed
    import tomllib

    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix or remove the file") from None
    _keep_parse(cache, text, parsed)
    return parsed


def _cached_parse(cache: Path, text: str) -> dict | None:
    from memctl.core import jsoncodec
    from memctl.core.fsutil import read_bytes_nofollow

    try:
        kept = jsoncodec.loads(read_bytes_nofollow(cache))
    except (OSError, ValueError, UnsafePath, RecursionError):
        return None
    if isinstance(kept, dict) and kept.get("toml") == text and isinstance(kept.get("parsed"), dict):
        return kept["parsed"]
    return None


def _keep_parse(cache: Path, text: str, parsed: dict) -> None:
    """Write the cache beside the index (no fsync: derived, and checked against the text on
    every read); nothing when the parse is not plain JSON (TOML dates) or .memctl/ is not ours."""
    from memctl.core import jsoncodec
    from memctl.core.fsutil import make_temp

    try:
        data = jsoncodec.dumps({"toml": text, "parsed": parsed}).encode("utf-8")
    except (TypeError, ValueError):
        return
    folder = parent(cache)
    if os.path.islink(folder) or not os.path.isdir(folder) or os.path.islink(cache):
        return
    try:
        fd, tmp = make_temp(folder, f".{name(cache)}.", TMP_SUFFIX)
    except OSError:  # a read-only memory: parse again next time
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, cache)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


RETIRED_ORIGIN = " (retired, ignored)"


def _merge_user_config(values: dict, origins: dict, user: dict, path: Path) -> None:
    for section, table in user.items():
        if section not in values:
            raise ConfigError(f"{path}: unknown section [{section}]; known: {', '.join(sorted(values))}")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        if section == "types":
            _merge_types(values["types"], origins, table, path)
            continue
        for key, value in table.items():
            if key in RETIRED.get(section, ()):  # a setting memctl no longer has: ignored, not an error
                origins[f"{section}.{key}"] = f"{path}{RETIRED_ORIGIN}"
                continue
            if key not in values[section]:
                known = ", ".join(sorted(values[section]))
                raise ConfigError(f"{path}: unknown key {section}.{key}; known: {known}")
            default = DEFAULTS[section][key]
            if not _same_kind(default, value):
                raise ConfigError(
                    f"{path}: {section}.{key} must be {type(default).__name__}, got {value!r}"
                )
            _check_value(section, key, value, path)
            values[section][key] = value
            origins[f"{section}.{key}"] = str(path)


def _check_value(section: str, key: str, value: Any, path: Path) -> None:
    """Numbers within their range, durations readable, redaction patterns valid regexes."""
    name = f"{section}.{key}"
    if name in BOUNDS:
        low, high = BOUNDS[name]
        if not low <= value <= high:  # NaN fails both comparisons
            raise ConfigError(f"{path}: {name} must be between {low} and {high}, got {value!r}")
    elif name == "archive.min_age":
        from memctl.core.clock import parse_duration  # not at import: clock loads datetime

        if parse_duration(value) < 0:
            raise ConfigError(f"{path}: {name} must not be negative, got {value!r}")
    elif name == "redaction.extra_patterns":
        _check_patterns(value, name, path)
    elif name == "store.backend" and value not in BACKENDS:
        raise ConfigError(f"{path}: {name} must be one of {', '.join(BACKENDS)}, got {value!r}")
    elif name == "store.memory" and not _is_memory_name(value):
        raise ConfigError(f"{path}: {name} must be 1-40 lower-case letters, digits or _, "
                          f"starting with a letter, got {value!r}")


def _is_memory_name(value: str) -> bool:
    """A name that is safe as a PostgreSQL schema name without quoting."""
    return 0 < len(value) <= 40 and value[0].isascii() and value[0].isalpha() and value.islower() \
        and all(c.isascii() and (c.isalnum() or c == "_") for c in value)


def _check_patterns(patterns: list, name: str, path: Path) -> None:
    import re

    for number, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            raise ConfigError(f"{path}: {name}[{number}] must be a string, got {pattern!r}")
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ConfigError(f"{path}: {name}[{number}] is not a valid regular expression "
                              f"({exc}): {pattern!r}") from None
        if compiled.search(""):
            raise ConfigError(f"{path}: {name}[{number}] matches empty text, so it would redact "
                              f"nothing useful: {pattern!r}")


def _same_kind(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))


def _merge_types(types: dict, origins: dict, table: dict, path: Path) -> None:
    for type_name, spec in table.items():
        if not isinstance(spec, dict):
            raise ConfigError(f'{path}: [types.{type_name}] must be a table like policy = "merge"')
        policy = spec.get("policy", types.get(type_name, {}).get("policy", "append"))
        lifespan = spec.get("lifespan", types.get(type_name, {}).get("lifespan", "long"))
        if policy not in ("merge", "append", "aggregate"):
            raise ConfigError(f'{path}: types.{type_name}.policy must be "merge", "append" or "aggregate", '
                              f'got {policy!r}')
        if lifespan not in ("long", "contextual"):
            raise ConfigError(f'{path}: types.{type_name}.lifespan must be "long" or "contextual", got {lifespan!r}')
        types[type_name] = {"policy": policy, "lifespan": lifespan}
        origins[f"types.{type_name}"] = str(path)


def effective_settings(settings: Settings) -> list[tuple[str, Any, str]]:
    """(key, value, origin) for every setting, in a stable order."""
    rows = []
    for section in sorted(settings.values):
        for key in sorted(settings.values[section]):
            name = f"{section}.{key}"
            rows.append((name, settings.values[section][key], settings.origins.get(name, "default")))
    # a retired key the memctl.toml still names: shown, so that `memctl rules` says it is ignored
    rows.extend((name, None, origin) for name, origin in sorted(settings.origins.items())
                if origin.endswith(RETIRED_ORIGIN))
    return rows


DEFAULT_CONFIG_TEXT = """\
# memctl configuration. Every key is optional; `memctl rules` shows the effective values.
[archive]
# raw_dir = "../temp/model_responses"   # default: temp/model_responses beside this folder
# min_age = "2h"                         # never touch a log modified more recently
# keep_newest = 10                       # never touch the N most recently modified logs

[dream]
# consolidate_min = 3
# archive_after_days = 30
# forget_after_days = 90
# max_remove_share = 0.2

# [types.recipe]                         # add an entry type without touching code
# policy = "merge"                       # merge (by topic) or append
# lifespan = "long"                      # long or contextual
"""


def init_root(root: Path) -> list[Path]:
    from pathlib import Path
    """Create the layout (idempotent): folders 0700, files 0600. Returns what was created."""
    layout = Layout(Path(root))
    created: list[Path] = []
    for folder in (layout.root, layout.l4_dir, layout.working_dir, layout.state_dir):
        if not folder.exists():
            created.append(folder)
        ensure_private_dir(folder)
        set_mode(folder, 0o700)
    if not layout.config_file.exists():
        _create_private_file(layout.config_file, DEFAULT_CONFIG_TEXT)
        created.append(layout.config_file)
    for path in (layout.long_term, layout.cold_archive):
        if not path.exists():
            _create_private_file(path, "")
            created.append(path)
    return created


def _create_private_file(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)

