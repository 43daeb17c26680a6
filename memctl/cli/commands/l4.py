"""L4 subcommands: `compress`, `archive`, `show` (archived sessions) and `demo`."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import List, Optional

import typer

from memctl.cli import render
from memctl.cli.progress import ProgressLine, stderr_is_terminal
from memctl.cli.writes import after_archive, report_archive
from memctl.l4.archive import ArchiveReport, options_from_settings, run_archive
from memctl.cli.state import apply_team_purges, state
from memctl.core.errors import EXIT_ERROR, EXIT_PARTIAL, NotFound, UsageError
from memctl.core.redact import find_secrets
from memctl.l4.sessions import compress_file, copy_out, find_session, find_unarchived, write_compressed, write_raw


def register(app: typer.Typer) -> None:
    app.command("compress")(compress)
    app.command("archive")(archive)
    # `show` is registered by commands/search.py, which shows refs of every layer and calls
    # show() below for L4 sessions.
    app.command("demo")(demo)


WAIT_HELP = "Wait up to SECONDS for another memctl to finish instead of exiting 75 at once."


def compress(
    ctx: typer.Context,
    files: List[Path] = typer.Argument(..., help="Raw session logs (model_responses_*.txt)."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line per file."),
    wait: float = typer.Option(0.0, "--wait", metavar="SECONDS", help=WAIT_HELP),
) -> None:
    """Write the compressed, reversible form of each log into L4_raw_sessions/ (inputs are kept).

    Prints, per file: source, destination, bytes before and after, and the ratio.
    """
    app_state = state(ctx)
    settings = app_state.settings
    patterns = tuple(settings.get("redaction", "extra_patterns"))
    failures = 0
    with app_state.writer_lock(wait):
        for path in files:
            try:
                result = compress_file(settings.layout, path, patterns)
            except Exception as exc:  # one bad file must not stop the others
                failures += 1
                render.error(f"{path}: {exc}")
                continue
            if json_out:
                render.json_line({**result.__dict__, "ratio": round(result.ratio, 4)})
            else:
                render.line(
                    f"{result.source}\t{result.destination}\t{result.bytes_before}\t{result.bytes_after}\t"
                    f"{result.ratio:.2f}\t{result.status}"
                )
    if failures:
        raise typer.Exit(EXIT_PARTIAL if failures < len(files) else EXIT_ERROR)


def archive(
    ctx: typer.Context,
    raw_dir: Optional[Path] = typer.Argument(
        None, help="Folder of raw logs; default [archive] raw_dir, else temp/model_responses beside the root."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Change nothing; print what would happen to every file and why."),
    min_age: Optional[str] = typer.Option(None, "--min-age", help="Leave logs modified more recently than this (e.g. 2h, 30m). Default 2h."),
    keep_newest: Optional[int] = typer.Option(None, "--keep-newest", help="Always leave the N most recently modified logs. Default 10."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing on success (for cron); errors still go to stderr."),
    wait: float = typer.Option(0.0, "--wait", metavar="SECONDS", help=WAIT_HELP),
    missing_ok: bool = typer.Option(False, "--missing-ok",
                                    help="A raw-log folder that does not exist is nothing to archive: a note, "
                                         "exit 0 (the timers' form; logrotate's missingok)."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="A line on stderr for each log read and each zip written (on a terminal "
                                      "there is otherwise one progress line)."),
) -> None:
    """Compress raw session logs, extract their history, pack them into monthly zips, and
    delete each raw log only after its session is verified inside a zip.

    Live logs (modified within --min-age, or among the --keep-newest) are never touched.
    Exit 0 ok (also when there is nothing to do), 2 error, 3 some files failed, 75 busy.
    """
    app_state = state(ctx)
    settings = app_state.settings
    options = options_from_settings(settings, raw_dir, min_age, keep_newest, dry_run)
    if missing_ok and not os.path.lexists(options.raw_dir):
        if not quiet:
            render.message(f"nothing to archive: raw-log folder {options.raw_dir} does not exist")
        report_archive(ArchiveReport(raw_dir=str(options.raw_dir), dry_run=dry_run), json_out, quiet=True)
        return
    with ProgressLine("archive", "logs", verbose=verbose and not quiet,
                      terminal=not quiet and stderr_is_terminal()) as line:
        progress = archive_progress(line)
        if dry_run:
            report = run_archive(settings.layout, options, progress)
        else:
            with app_state.writer_lock(wait):
                report = run_archive(settings.layout, options, progress)
    report_archive(report, json_out, quiet)
    code = after_archive(settings, report)
    if code:
        raise typer.Exit(code)


def archive_progress(line: ProgressLine):
    """run_archive's progress texts ("[3/40] reading NAME", "writing 2026-04.zip (…)") as the
    progress line's counts and item."""
    counted = re.compile(r"\[(\d+)/(\d+)\] ")
    seen = [0, 0]

    def progress(text: str) -> None:
        found = counted.match(text)
        if found:
            seen[:] = int(found.group(1)), int(found.group(2))
        line.update(seen[0], seen[1], text)

    return progress


def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="A session name (MMDD_HHMM-MMDD_HHMM), sha256 prefix or raw file name."),
    raw: bool = typer.Option(False, "--raw", help="Print the original raw log, byte for byte (sha256 checked)."),
) -> None:
    """Print an archived session: its compressed text, or with --raw the original log."""
    settings = state(ctx).settings
    layout = settings.layout
    out = sys.stdout.buffer
    apply_team_purges(settings)
    try:
        session = find_session(layout, ref)
    except NotFound:
        unarchived = find_unarchived(layout, settings.raw_dir(), ref)
        if unarchived is not None:  # not archived yet: the raw log where it lies is its only text
            _print_session(out, unarchived.stem, raw, lambda write: copy_out(unarchived, write),
                           lambda write: copy_out(unarchived, write))
        elif not _show_from_server(settings, ref, raw, out):
            raise
        return
    _print_session(out, session.name, raw, lambda write: write_raw(layout, session, write),
                   lambda write: write_compressed(layout, session, write))


def _print_session(out, name: str, raw: bool, write_raw_bytes, write_text) -> None:
    if raw:  # byte-exact by contract: not redacted, but the reader is told when it matters
        seen = _LineScanner()
        write_raw_bytes(lambda chunk: (out.write(chunk), seen.feed(chunk)))
        if seen.finish():
            render.message(f"note: {name} holds secrets; --raw prints the original bytes unredacted")
    else:
        redactor = _LineRedactor(out.write)
        write_text(redactor.feed)
        redactor.finish()
    out.flush()


def _show_from_server(settings, ref: str, raw: bool, out) -> bool:
    """A session archived on another machine of a team memory: its compressed text from the
    server (the raw log stays on the machine that archived it). False: not there either."""
    from memctl.recall.indexing.documents import IndexOptions
    from memctl.recall.indexing.pg_index import shared_session_text

    text = shared_session_text(IndexOptions.from_settings(settings), settings.layout.root, ref)
    if text is None:
        return False
    if raw:
        raise UsageError(f"{ref} was archived on another machine: the server keeps its compressed text "
                         "(`memctl show` without --raw); the raw log stays where it was archived")
    redactor = _LineRedactor(out.write)
    redactor.feed(text)
    redactor.finish()
    out.flush()
    return True


class _LineScanner:
    """Reads a stream by whole lines and tells whether any line holds a secret."""

    def __init__(self):
        self.pending = bytearray()
        self.found = False

    def feed(self, chunk: bytes) -> None:
        self.pending.extend(chunk)
        cut = self.pending.rfind(b"\n") + 1
        if cut:
            self.take(bytes(self.pending[:cut]))
            del self.pending[:cut]

    def take(self, data: bytes) -> None:
        self.found = self.found or bool(find_secrets(data.decode("utf-8", "surrogateescape")))

    def finish(self) -> bool:
        if self.pending:
            self.take(bytes(self.pending))
            self.pending.clear()
        return self.found


class _LineRedactor(_LineScanner):
    """Writes a stream redacted by whole lines (a secret never straddles two writes)."""

    def __init__(self, write):
        super().__init__()
        self.write = write

    def take(self, data: bytes) -> None:
        self.write(render.redacted(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))


def demo(
    ctx: typer.Context,
    folder: Optional[Path] = typer.Option(None, "--dir", help="Build the demo here and keep it (default: a temp folder, removed at the end)."),
) -> None:
    """Build a throw-away GenericAgent-style folder from the bundled sample logs, archive it,
    and show the result: history, zip, and a byte-for-byte restore."""
    from memctl.ops.demo import run_demo

    for line in run_demo(folder, command=invoked_as()):
        render.line(line)


def invoked_as() -> str:
    """How to call memctl again in a hint: `memctl` when that is what PATH finds, else the
    path this run was started by (e.g. `.venv/bin/memctl` before the venv is activated)."""
    import os
    import shutil

    argv0 = sys.argv[0]
    if os.path.basename(argv0) != "memctl":
        return "memctl"
    on_path = shutil.which("memctl")
    if on_path and os.path.samefile(on_path, argv0):
        return "memctl"
    return os.path.relpath(argv0) if not os.path.relpath(argv0).startswith("..") else os.path.abspath(argv0)
