"""memctl in a GenericAgent checkout: find it, take over its 12-hour archiver, offer recall.

A checkout is a folder holding `memory/` and `temp/model_responses/`. `memctl init` there:

- adopts GenericAgent's archive (`l4.adopt`);
- replaces `memory/L4_raw_sessions/compress_session.py`, which GenericAgent's scheduler
  imports every 12 hours, by a shim whose `batch_process` runs `memctl archive` (so
  GenericAgent can no longer delete or rewrite logs behind memctl's back); the original is
  kept beside it as `compress_session.genericagent.py`;
- writes `plugins/memctl_recall.py` (unless declined), an `agent_before` hook that appends
  `memctl compose` for the user's request to the last user message.

`undo` puts the original archiver back and removes the plugin. Files are recognised as
memctl's by a marker line, so a person's own files are never overwritten or removed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from memctl.core.errors import UsageError
from memctl.core.fsutil import atomic_write_bytes

SHIM_MARKER = b"# memctl-genericagent-shim v"
PLUGIN_MARKER = b"# memctl-genericagent-plugin v"
TEMPLATES = Path(__file__).resolve().parent / "templates"
ARCHIVER = Path("memory/L4_raw_sessions/compress_session.py")
ORIGINAL = Path("memory/L4_raw_sessions/compress_session.genericagent.py")
PLUGIN = Path("plugins/memctl_recall.py")


@dataclass
class CheckoutChanges:
    """What init or undo did in the checkout, one sentence each, for stderr."""

    checkout: Path
    done: list[str] = field(default_factory=list)


def find_checkout(root: Path) -> tuple[Path, Path] | None:
    """(checkout, memory root) when `root` is a GenericAgent checkout or its memory/ folder."""
    root = Path(root)
    for checkout in (root, root.parent):
        memory = checkout / "memory"
        if memory.is_dir() and (checkout / "temp" / "model_responses").is_dir() and root in (checkout, memory):
            return checkout, memory
    return None


def archiver_active(memory: Path) -> bool:
    """Whether GenericAgent's own archiver (not memctl's shim) is what its scheduler will run."""
    archiver = memory / "L4_raw_sessions" / ARCHIVER.name
    return archiver.is_file() and not _is_ours(archiver, SHIM_MARKER)


def rendered_files(memory: Path) -> list[Path]:
    """The shim and the plugin memctl wrote beside the memory root `memory` (those there)."""
    found = find_checkout(memory)
    if found is None:
        return []
    checkout = found[0]
    return [checkout / path for path, marker in ((ARCHIVER, SHIM_MARKER), (PLUGIN, PLUGIN_MARKER))
            if _is_ours(checkout / path, marker)]


def memctl_command() -> list[str]:
    """How GenericAgent's code runs this memctl: its own interpreter, `-m memctl`."""
    return [sys.executable, "-m", "memctl"]


def _render(template: str) -> bytes:
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    return text.replace("__MEMCTL_COMMAND__", repr(memctl_command())).encode("utf-8")


def _is_ours(path: Path, marker: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return marker in handle.read(4096)
    except OSError:
        return False


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    atomic_write_bytes(path, data)
    os.chmod(path, 0o600)
    return True


def take_over_archiver(checkout: Path, changes: CheckoutChanges) -> None:
    archiver, original = checkout / ARCHIVER, checkout / ORIGINAL
    if not archiver.exists() and not original.exists():
        changes.done.append(f"no GenericAgent archiver at {archiver}: nothing to take over")
        return
    if archiver.exists() and not _is_ours(archiver, SHIM_MARKER):
        if original.exists() and original.read_bytes() != archiver.read_bytes():
            # e.g. a `git pull` in the checkout put GenericAgent's archiver back, and it differs
            raise UsageError(f"{archiver} is GenericAgent's again and differs from the copy kept as {original}; "
                             f"move one of them away, then run `memctl init` again")
        os.replace(archiver, original)
        changes.done.append(f"kept GenericAgent's archiver as {original}")
    archiver.parent.mkdir(parents=True, exist_ok=True)
    if _write_if_changed(archiver, _render("compress_session_shim.py")):
        changes.done.append(f"wrote {archiver}: GenericAgent's 12-hour job now runs `memctl archive`")


def offer_plugin(checkout: Path, wanted: bool, changes: CheckoutChanges) -> None:
    plugin = checkout / PLUGIN
    if not wanted:
        if _is_ours(plugin, PLUGIN_MARKER):
            plugin.unlink()
            changes.done.append(f"removed {plugin} (--no-plugin)")
        return
    if not (checkout / "plugins").is_dir():
        changes.done.append(f"no plugins/ folder in {checkout}: recall plugin not installed")
        return
    if plugin.exists() and not _is_ours(plugin, PLUGIN_MARKER):
        changes.done.append(f"{plugin} exists and is not memctl's: left alone, recall plugin not installed")
        return
    if _write_if_changed(plugin, _render("memctl_recall.py")):
        changes.done.append(f"wrote {plugin}: each user task gets `memctl compose` for its request")


def undo(checkout: Path) -> CheckoutChanges:
    """Put GenericAgent's archiver back and remove the recall plugin (memctl's files only)."""
    changes = CheckoutChanges(checkout)
    archiver, original = checkout / ARCHIVER, checkout / ORIGINAL
    if _is_ours(archiver, SHIM_MARKER):
        if original.exists():
            os.replace(original, archiver)
            changes.done.append(f"restored GenericAgent's archiver {archiver}")
        else:
            archiver.unlink()
            changes.done.append(f"removed memctl's {archiver} (there was no original to restore)")
    plugin = checkout / PLUGIN
    if _is_ours(plugin, PLUGIN_MARKER):
        plugin.unlink()
        changes.done.append(f"removed {plugin}")
    if not changes.done:
        changes.done.append(f"nothing of memctl's to undo in {checkout}")
    return changes


def adoption_sentences(report) -> list[str]:
    """What adopting GenericAgent's archive did (an `l4.adopt.AdoptReport`), for stderr."""
    done = []
    if report.adopted:
        done.append(f"adopted {report.adopted} sessions GenericAgent archived ({len(report.members)} zip members, "
                    f"{len(report.history_only)} known only from all_histories.txt): lossy, GenericAgent kept no "
                    f"raw bytes, so `show` prints what it kept and `show --raw` cannot rebuild them")
    if report.blocks_added:
        done.append(f"added {len(report.blocks_added)} history blocks GenericAgent had not written")
    done += [f"could not read {problem}; not adopted, see `memctl verify`" for problem in report.unreadable]
    return done


def set_up_checkout(checkout: Path, memory: Path, plugin: bool) -> CheckoutChanges:
    """Adopt the archive, keep the raw logs, take over the archiver, offer the plugin (the
    caller holds the lock)."""
    from memctl.core.config import load_settings
    from memctl.l4.adopt import adopt_genericagent_archive
    from memctl.l4.kept import keep_unarchived

    settings = load_settings(memory)
    changes = CheckoutChanges(checkout)
    changes.done += adoption_sentences(adopt_genericagent_archive(settings.layout))
    changes.done += keeping_sentences(keep_unarchived(settings.layout, settings.raw_dir()))
    handed_over = len(changes.done)
    take_over_archiver(checkout, changes)
    handed_over = any(s.startswith("kept GenericAgent's archiver") for s in changes.done[handed_over:])
    offer_plugin(checkout, plugin, changes)
    changes.done += restart_sentences(running_genericagent(checkout), handed_over)
    return changes


def keeping_sentences(report) -> list[str]:
    """What keeping the raw logs (an `l4.kept.KeepReport`) did, for stderr."""
    done = []
    if report.linked:
        done.append(f"kept {len(report.linked)} raw logs memctl has not archived as hard links in .memctl/kept-raw/: "
                    f"whoever deletes them, `memctl archive` still archives them")
    if report.copied:
        done.append(f"copied {len(report.copied)} raw logs into .memctl/kept-raw/ (no hard link is possible there, "
                    f"e.g. another filesystem): the copies take disk space until `memctl archive` archives them")
    return done


def running_genericagent(checkout: Path) -> list[int]:
    """Python processes (not memctl's) whose working folder or a path in whose command line is
    inside the checkout: a GenericAgent that imported its own archiver before init. Linux's
    /proc only; elsewhere none are found."""
    proc = Path("/proc")
    base = checkout.resolve()
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        names = [os.path.basename(arg) for arg in argv]
        if b"python" not in names[0] or any(name == b"memctl" or name.startswith(b"memctl.") for name in names):
            continue  # not Python, or memctl itself (`memctl …`, `python -m memctl…`)
        paths = [cwd] + [os.fsdecode(arg) for arg in argv[1:] if arg.startswith(b"/")]
        if any(Path(path) == base or base in Path(path).parents for path in paths):
            found.append(int(entry.name))
    return sorted(found)


def restart_sentences(pids: list[int], handed_over: bool) -> list[str]:
    """Restart a running GenericAgent: it keeps the archiver it imported (named by pid when found)."""
    why = ("keeps the archiver it imported, which deletes raw logs; until it restarts, memctl keeps each log "
           "it has not archived in .memctl/kept-raw/ (now and at every archive run)")
    if pids:
        return [f"GenericAgent is running in this checkout (pid {', '.join(map(str, pids))}): restart it. A running "
                f"GenericAgent {why}"]
    return [f"if GenericAgent is running, restart it: a running GenericAgent {why}"] if handed_over else []
