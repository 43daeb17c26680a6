"""`memctl remember`, `forget ID…`, `restore ID` and `archive` without typer or rich: the lean
write path.

An agent writes after every turn, so these run as often as searches, and the full command
line's imports (~0.3 s of CPU) would be most of their cost; `archive` runs from a timer or
GenericAgent's shim, and those imports ran on one core before its work could use two. The console script
(memctl.entry) tries `run` first; it answers the plain forms — the options below, a
terminal or a pipe — and returns None for anything else (--help, --match, --purge,
--dry-run, an option it does not know, a repeated option, a value it cannot read), which the
full command line then handles: behaviour is defined once, in the modules both call and in
the shared steps and reports here (`cli.commands.longterm` and `cli.commands.l4` use them too). `MEMCTL_FULL_CLI=1`
sends everything to the full command line (the tests compare both).
"""

from __future__ import annotations

import os
import sys
import time

from memctl.cli import render
from memctl.cli.argv import write_form
from memctl.core.errors import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, MemctlError, NotFound, UsageError

REMEMBER_WAIT = 10.0  # interactive: a dream holds the lock only for short steps
AUTO_DREAM_COOLDOWN = 600.0  # seconds between two automatic dreams
# what rich would render differently from the plain text: markup, emoji codes, tabs, controls
_RICH_SENSITIVE = r"[\[\]\t\r\x00-\x08\x0b-\x1f\x7f]|:[^\s:]+:"  # compiled when a message is printed


# --- steps and reports shared with the full command line


def memory_settings(settings):
    """The root's settings; refuse a folder that is not a memory (taking the lock would create it)."""
    root = settings.layout.root
    if not os.path.isdir(settings.layout.state_dir):
        raise NotFound(f"{root} is not a memory folder yet; run `memctl --root {root} init`")
    warn_bad_lines(settings.layout)
    return settings


def warn_bad_lines(layout) -> None:
    """A line of L5/L6 that is not an entry is skipped and left in place: say so, with file:line."""
    from memctl.longterm.store import open_store

    store = open_store(layout)
    for name, number, problem in store.active.bad_lines(quick=True) + store.archive.bad_lines(quick=True):
        warning(f"{name}:{number}: {problem}; skipped, left as it is (see `memctl verify`)")


def message(text: str) -> None:
    """render.message, without importing rich when the output would be the plain text."""
    if _plain(text):
        sys.stderr.write(render.redacted(text) + "\n")
    else:
        render.message(text)


def warning(text: str) -> None:
    if _plain(text):
        sys.stderr.write("warning: " + render.redacted(text) + "\n")
    else:
        render.warning(text)


def _plain(text: str) -> bool:
    try:
        terminal = sys.stderr.isatty()
    except ValueError:
        terminal = False
    import re  # re caches the compiled pattern

    return not terminal and not re.search(_RICH_SENSITIVE, render.redacted(text))


def read_text(text: str | None) -> str:
    if text is None or text == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no text: pass TEXT, or `-` and the text on stdin")
        text = read_stdin()
    return utf8_only(text)


def read_stdin() -> str:
    """stdin's text, no more of it than any fact may hold and one character: past that the
    write is refused (longterm.remember.validate), never held whole in memory."""
    from memctl.core.defaults import MAX_FACT_BYTES

    return sys.stdin.read(MAX_FACT_BYTES + 1)


def utf8_only(text: str) -> str:
    """A fact is stored as UTF-8: undecodable bytes (or lone surrogates) are refused, not guessed."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"the text is not valid UTF-8 (at character {exc.start + 1}); "
                         "memctl stores facts as UTF-8") from None
    return text


def report_remember(result, json_out: bool) -> None:
    if json_out:
        render.json_line(result.to_dict())
    else:
        render.line(result.entry.id)
        if result.action == "superseded":
            message(f"superseded {result.previous.id} (moved to L6)")
        elif result.action == "seen":
            message(f"near-duplicate of {result.entry.id}: seen {result.entry.seen}×, nothing added")


def report_forget(plan, result, json_out: bool) -> int:
    """Print what a forget did; its exit status."""
    if json_out:
        render.json_line({"run": result.run, "forgotten": result.forgotten,
                          "missing": plan.missing + result.skipped})
    else:
        for entry_id in result.forgotten:
            render.line(entry_id)
        message(f"forgot {len(result.forgotten)} entries (run {result.run}); `memctl restore ID` undoes")
    if plan.missing or result.skipped:
        return EXIT_PARTIAL if result.forgotten else EXIT_ERROR
    return EXIT_OK


def report_restore(entry, json_out: bool) -> None:
    if json_out:
        render.json_line({"restored": entry.id, "type": entry.type, "topic": entry.topic})
    else:
        render.line(entry.id)


def after_remember(settings, result) -> None:
    """What a remember starts once its fact is written: the automatic dream when due, the
    index's build when the memory has none."""
    if result.auto_dream_due:
        start_background_dream(settings.layout.root)
    start_background_index(settings)


def start_background_dream(root) -> None:
    """Detached `memctl dream`, at most once per cooldown; it exits 75 at once if another runs."""
    from pathlib import Path

    from memctl.core.config import Layout
    from memctl.core.fsutil import ensure_private_dir, open_nofollow

    marker = Layout(Path(root)).state_dir / "auto_dream"
    try:
        if time.time() - marker.lstat().st_mtime < AUTO_DREAM_COOLDOWN and not marker.is_symlink():
            return
    except FileNotFoundError:
        pass
    try:
        ensure_private_dir(marker.parent)
        fd = open_nofollow(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        _start_detached(root, ["dream", "--auto"])
    except (OSError, MemctlError) as exc:  # the fact is remembered either way
        warning(f"could not start the automatic dream: {exc}")


def start_background_index(settings) -> None:
    """After a remember or a turn: a memory with no search index and at least [index]
    background_build_bytes of layers gets it built by a detached `memctl index refresh`, so
    that its first search waits (under the index lock) only for the rest of that build instead
    of making all of it. A build already holding the index lock: none is started."""
    from memctl.core.fsutil import ensure_private_dir, open_nofollow, try_lock

    layout = settings.layout
    if os.path.lexists(layout.index) or _layers_bytes(layout) < int(settings.get("index", "background_build_bytes")):
        return
    try:
        ensure_private_dir(layout.state_dir)
        fd = open_nofollow(os.path.join(layout.state_dir, "index.lock"), os.O_RDWR | os.O_CREAT)
        try:
            if not try_lock(fd):
                return  # a build is running
        finally:
            os.close(fd)  # the lock goes with the descriptor: the build takes it
        _start_detached(layout.root, ["index", "refresh"])
    except (OSError, MemctlError) as exc:  # the fact is remembered either way; a search builds the index
        warning(f"could not start building the search index: {exc}")


def _layers_bytes(layout) -> int:
    """The bytes of the layers a build reads most of: L5, L6 and L4's files."""
    total = 0
    for path in (layout.long_term, layout.cold_archive):
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    try:
        with os.scandir(layout.l4_dir) as entries:
            total += sum(entry.stat(follow_symlinks=False).st_size for entry in entries
                         if entry.is_file(follow_symlinks=False))
    except OSError:
        pass
    return total


def _start_detached(root, arguments: list[str]) -> None:
    """`memctl --root ROOT ARGUMENTS…` in its own session, its output discarded."""
    import subprocess

    subprocess.Popen([sys.executable, "-m", "memctl", "--root", str(root), *arguments],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def report_archive(report, json_out: bool, quiet: bool) -> None:
    if json_out:
        render.json_line(report.to_json())
        return
    for decision in report.errors:
        render.error(f"{decision.path}: {decision.reason}")
    if quiet:
        return
    verb = {"archive": "would archive" if report.dry_run else "archived",
            "finish": "would finish" if report.dry_run else "finished",
            "skip": "skip", "error": "error"}
    for decision in report.decisions:
        render.line(f"{verb[decision.action]}\t{decision.path}\t{decision.reason}")
    summary = report.summary()
    message(
        f"{'dry run: ' if report.dry_run else ''}{summary['new_sessions']} new sessions, "
        f"{summary['deleted_raw']} raw files deleted, {sum(summary['skipped'].values())} skipped, "
        f"{len(summary['errors'])} errors; months: {', '.join(summary['months']) or '-'}"
    )


def after_archive(settings, report) -> int:
    """Outside the lock, after the raw logs are gone: L1 (under the lock again), the index and
    the embeddings (where opted in) catch up with the new sessions. The run's exit status."""
    if not report.dry_run and report.summary()["new_sessions"]:
        from memctl.agent.insight import refresh_after_archive  # L1 points at the new sessions
        from memctl.recall.indexing.index import refresh_after_write
        from memctl.recall.embeddings.semantic import embed_in_background  # [semantic] embed_after_writes

        l1 = refresh_after_archive(settings, report.summary()["new_sessions"])
        for text in [l1, *refresh_after_write(settings), embed_in_background(settings)]:
            if text:
                warning(text)
    if report.errors:
        return EXIT_PARTIAL if report.summary()["processed"] else EXIT_ERROR
    return EXIT_OK


# --- the lean path


def run(root: str | None, args: list[str]) -> int | None:
    """The exit status, or None when the full command line must handle these arguments."""
    parsed = write_form(args)
    if parsed is None:
        return None
    command = args[0]
    options, words = parsed
    if command == "archive" and not _plain_archive(options, words):
        return None
    action = {"remember": _remember, "forget": _forget, "restore": _restore, "archive": _archive}[command]
    return guarded(lambda: action(root, options, words))


def _settings(root, as_text: bool = False):
    """`as_text`: the layout's paths are str, for a command whose modules take either (remember)."""
    from memctl.core.config import load_settings
    from memctl.core.roots import resolve_root

    settings = load_settings(resolve_root(root, as_text=as_text), as_text=as_text)
    render.configure_redaction(settings.get("redaction", "extra_patterns"))
    return memory_settings(settings)


def _remember(root, options: dict, words: list[str]) -> int:
    from memctl.cli import resident
    from memctl.core import clock
    from memctl.longterm.remember import RememberRequest, remember

    settings = _settings(root, as_text=True)
    text = resident.stdin_text if resident.stdin_text is not None else read_text(words[0] if words else None)
    request = RememberRequest(utf8_only(text).strip("\n"), options["type"],
                              options.get("topic", ""), options.get("confidence", 5.0), options.get("source", ""),
                              bool(options.get("force")), list(options.get("contradicts", [])),
                              entry_id=resident.retry_id, retry=resident.retry_id is not None)
    result = remember(settings, request, clock.stamp(), options.get("wait", REMEMBER_WAIT))
    report_remember(result, bool(options.get("json")))
    after_remember(settings, result)
    if resident.wants_writer and resident.serves(settings):
        unserved = resident.start_writer(settings.layout.root)
        if unserved:
            warning(unserved)
    return EXIT_OK


def _forget(root, options: dict, words: list[str]) -> int:
    from memctl.core import clock
    from memctl.longterm.forget import forget_ids

    settings = _settings(root)
    plan, result = forget_ids(settings, words, options.get("reason", ""), clock.now(), options.get("wait", 0.0))
    if plan.missing:
        warning(f"not active in L5: {', '.join(plan.missing)}")
    return report_forget(plan, result, bool(options.get("json")))


def _restore(root, options: dict, words: list[str]) -> int:
    from memctl.core import clock
    from memctl.longterm.forget import restore

    entry = restore(_settings(root), words[0], clock.now(), options.get("wait", 0.0))
    report_restore(entry, bool(options.get("json")))
    return EXIT_OK


def _plain_archive(options: dict, words: list[str]) -> bool:
    """At most a raw-log folder, a whole --keep-newest, and no progress lines to draw (those are
    rich's, on a terminal)."""
    if len(words) > 1 or not str(options.get("keep_newest", "0")).isdigit():
        return False
    try:
        terminal = sys.stderr.isatty()
    except ValueError:
        terminal = False
    return bool(options.get("quiet")) or not terminal


def _archive(root, options: dict, words: list[str]) -> int:
    from pathlib import Path

    from memctl.core.config import load_settings
    from memctl.core.roots import resolve_root
    from memctl.core.fsutil import WriterLock
    from memctl.l4.archive import options_from_settings, run_archive

    settings = load_settings(resolve_root(root))
    render.configure_redaction(settings.get("redaction", "extra_patterns"))
    keep_newest = int(options["keep_newest"]) if "keep_newest" in options else None
    archive_options = options_from_settings(settings, Path(words[0]) if words else None, options.get("min_age"),
                                            keep_newest, bool(options.get("dry_run")))
    if archive_options.dry_run:
        report = run_archive(settings.layout, archive_options)
    else:
        with WriterLock(settings.layout.lock, wait_seconds=options.get("wait", 0.0)):
            report = run_archive(settings.layout, archive_options)
    report_archive(report, bool(options.get("json")), bool(options.get("quiet")))
    return after_archive(settings, report)


def guarded(action) -> int:
    """Every failure as the full command line maps it (cli.app.main): one line, the exit code."""
    from memctl.cli.startup import flush_stdout, internal_error_text, os_error_text, silence_stdout

    try:
        code = action()
        sys.stdout.flush()
        return code
    except MemctlError as exc:
        flush_stdout()
        render.error(str(exc))
        return exc.exit_code
    except BrokenPipeError:
        silence_stdout()
        return EXIT_OK
    except OSError as exc:
        flush_stdout()
        render.error(os_error_text(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        render.error("interrupted")
        return 130
    except Exception as exc:  # a crash is exit 2 with one line, never exit 1 ("no match")
        render.error(internal_error_text(exc))
        return EXIT_ERROR
