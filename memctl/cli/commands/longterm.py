"""Long-term memory commands: `remember`, `forget`, `restore`, `dream` (design.md §6–8).

Each parses its options, calls remember.py / forget.py / dream.py and renders what they
return; the plan objects feed both the borg-style dry-run lines and the JSON.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from memctl.core import clock

from memctl.cli import render, writes
from memctl.cli.writes import REMEMBER_WAIT
from memctl.cli.state import state
from memctl.core.errors import EXIT_PARTIAL, UsageError



def register(app: typer.Typer) -> None:
    app.command("remember")(remember_cmd)
    app.command("forget")(forget_cmd)
    app.command("restore")(restore_cmd)
    app.command("dream")(dream_cmd)


def _settings(ctx: typer.Context):
    """The root's settings; refuse a folder that is not a memory (taking the lock would create it)."""
    return writes.memory_settings(state(ctx).settings)


def remember_cmd(
    ctx: typer.Context,
    text: Optional[str] = typer.Argument(None, help="The fact to remember; `-` or nothing reads stdin."),
    type_: str = typer.Option(..., "--type", "-t", help="Entry type (see `memctl rules`), e.g. preference, lesson."),
    topic: str = typer.Option("", "--topic", help="What it is about; merge types supersede by (type, topic)."),
    confidence: float = typer.Option(5, "--confidence", help="0-10."),
    source: str = typer.Option("", "--source", help="Where the fact comes from (session, URL, person)."),
    force: bool = typer.Option(False, "--force", help="Remember it even if it was forgotten before."),
    contradicts: Optional[List[str]] = typer.Option(None, "--contradicts", help="Id of an entry this fact proves wrong (repeatable); the next dream forgets it."),
    wait: float = typer.Option(REMEMBER_WAIT, "--wait", help="Seconds to wait for the writer lock."),
    json_out: bool = typer.Option(False, "--json", help="Report as one JSON object."),
) -> None:
    """Write one fact to L5 under its type's write policy and print its id."""
    from memctl.longterm.remember import RememberRequest, remember

    settings = _settings(ctx)
    request = RememberRequest(writes.read_text(text).strip("\n"), type_, topic, confidence, source, force,
                              list(contradicts or []))
    result = remember(settings, request, clock.now(), wait)
    writes.report_remember(result, json_out)
    writes.after_remember(settings, result)


def forget_cmd(
    ctx: typer.Context,
    ids: Optional[List[str]] = typer.Argument(None, help="Entry ids to forget."),
    match: Optional[str] = typer.Option(None, "--match", help="Forget every L5 entry whose text contains QUERY."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be forgotten; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Needed with --match (it may select many entries)."),
    reason: str = typer.Option("", "--reason", help="Why; kept in L6 and the audit log."),
    purge: bool = typer.Option(False, "--purge", help="Erase the text everywhere (L5, L6, L4, zips, index). Irreversible."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for the writer lock."),
    json_out: bool = typer.Option(False, "--json", help="Report as JSON."),
) -> None:
    """Soft-forget entries (L5 -> L6, undo with `restore`), or erase them with --purge."""
    from memctl.longterm.forget import apply_forget, forget_ids, plan_forget, purge as purge_fn
    from memctl.longterm.store import open_store

    settings = _settings(ctx)
    ids = list(ids or [])
    if purge:
        _purge(settings, ids, match, dry_run, yes, reason, wait, json_out, purge_fn)
        return
    if ids and not match and not dry_run:  # planned under the lock, from the store's lookups
        plan, result = forget_ids(settings, ids, reason, clock.now(), wait)
        if plan.missing:
            writes.warning(f"not active in L5: {', '.join(plan.missing)}")
    else:
        plan = plan_forget(open_store(settings.layout).active.entries(), ids, match, reason)
        if dry_run or (match and not yes):
            _print_forget_plan(plan, json_out)
            if match and not yes and not dry_run:
                render.message(f"{len(plan.entries)} entries match; rerun with --yes to forget them")
            return
        if plan.missing:
            writes.warning(f"not active in L5: {', '.join(plan.missing)}")
        result = apply_forget(settings, plan, clock.now(), wait)
    code = writes.report_forget(plan, result, json_out)
    if code:
        raise typer.Exit(code)


def _print_forget_plan(plan, json_out: bool) -> None:
    if json_out:
        render.json_line(plan.to_dict())
        return
    for entry in plan.entries:
        render.line(f"would forget: {entry.id}\t{entry.type}\t{_short(entry.text)}")
    for missing in plan.missing:
        render.line(f"not found: {missing}")


def _purge(settings, ids, match, dry_run, yes, reason, wait, json_out, purge_fn) -> None:
    from memctl.longterm.forget import files_a_purge_would_scrub, matching
    from memctl.longterm.store import open_store

    if not ids and not match:
        raise UsageError("nothing to purge: give entry ids or --match STRING")
    if match and len(match.strip()) < 4:
        raise UsageError("--purge --match needs at least 4 characters: a shorter string would be "
                         "scrubbed out of every session")
    strings = [match] if match else []
    targets = list(ids)
    if match:
        store = open_store(settings.layout)
        targets += [e.id for e in matching(store.active.entries(), match)]
        targets += [e.id for e in matching(store.archive.entries(), match)]
        targets = list(dict.fromkeys(targets))
    if dry_run or not yes:
        scrub = files_a_purge_would_scrub(settings, targets, strings)
        if json_out:
            render.json_line({"would_purge": targets, "strings": len(strings), "would_scrub": scrub})
        else:
            for entry_id in targets:
                render.line(f"would purge: {entry_id}")
            for where in scrub:
                render.line(f"would scrub: {where}")
            if not dry_run:
                render.message("purge is irreversible; rerun with --yes to erase the text everywhere")
        return
    result = purge_fn(settings, targets, strings, reason, clock.now(), wait)
    _scrub_shared_index(settings, result.needles)
    if json_out:
        render.json_line({"run": result.run, "purged": result.ids, "hashes": result.hashes,
                          "files": result.files, "l4": result.l4, "pending": result.pending,
                          "settled": result.settled})
    else:
        _print_purge(result)
    if result.pending:
        raise typer.Exit(EXIT_PARTIAL)


def _scrub_shared_index(settings, needles: list[bytes]) -> None:
    """On a team memory the index is on the server, not a file the purge can delete: refreshed
    now, it drops the purged entries' rows and reads this machine's scrubbed L4 files again;
    the other machines' rows holding the strings go too (each indexes its files again once it
    has applied the purge's order)."""
    if settings.get("store", "backend") != "postgres":
        return
    from memctl.recall.indexing.index import IndexOptions, SearchIndex, refresh_after_write
    from memctl.recall.indexing.pg_purge import scrub_other_machines

    for warning in refresh_after_write(settings):
        render.warning(warning)
    scrub_other_machines(SearchIndex(settings.layout, IndexOptions.from_settings(settings)), needles)


def _print_purge(result) -> None:
    for note in result.settled:
        render.message(note)
    for entry_id in result.ids:
        render.line(entry_id)
    if result.ids or result.files or result.l4:
        rewrote = len(result.files) + len(result.l4)  # an L4 line is one file: the history, a zip, a raw log
        render.message(f"purged {len(result.ids)} entries (run {result.run}); rewrote {rewrote} files")
    elif not result.settled and not result.pending:
        render.message("nothing left to purge: already purged")
    for note in result.l4:
        render.message(note)
    for note in result.pending:
        render.warning(f"purge pending: {note}; everything else was scrubbed. Free space, repair or remove "
                       "that file, then rerun the purge (or `memctl verify --repair`) to finish it")


def restore_cmd(
    ctx: typer.Context,
    entry_id: str = typer.Argument(..., help="The id of a forgotten entry."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for the writer lock."),
    json_out: bool = typer.Option(False, "--json", help="Report as JSON."),
) -> None:
    """Undo a soft forget: put the entry back in L5."""
    from memctl.longterm.forget import restore

    entry = restore(_settings(ctx), entry_id, clock.now(), wait)
    writes.report_restore(entry, json_out)


def dream_cmd(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (would forget / keeping) and change nothing."),
    only: Optional[str] = typer.Option(None, "--only", help="Comma list of: consolidate,archive,forget,merge."),
    force: bool = typer.Option(False, "--force", help="Proceed even past the max_remove_share guard rail."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Put back every change of run RUN_ID."),
    summarizer: Optional[str] = typer.Option(None, "--summarizer", help="Command that turns merged texts (stdin) into one text (stdout)."),
    wait: float = typer.Option(0.0, "--wait", help="Seconds to wait for the writer lock at each step."),
    auto: bool = typer.Option(False, "--auto", hidden=True),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="With --dry-run, also list kept entries and their "
                                                                 "rule; in a run, a line on stderr for each step."),
    json_out: bool = typer.Option(False, "--json", help="Report (or the plan) as JSON."),
) -> None:
    """Consolidate, archive, forget and merge L5 entries; every change logged and undoable."""
    from memctl.longterm import dream

    settings = _settings(ctx)
    if undo:
        report = dream.undo(settings, undo, clock.now(), max(wait, 5.0))
        if json_out:
            render.json_line(report.to_dict())
        else:
            render.line(report.run)
            render.message(f"undid {report.undone} changes of {undo}"
                           + (f"; {len(report.conflicts)} could not be undone" if report.conflicts else ""))
        if report.conflicts:
            raise typer.Exit(EXIT_PARTIAL)
        return
    ops = dream.parse_only(only)
    options = dream.DreamOptions(ops=ops, force=force, summarizer=summarizer, lock_wait=wait)
    if dry_run:
        plan = dream.plan_now(settings, clock.now(), options)
        _print_plan(plan, json_out, verbose)
        try:  # the dry run also says whether the real run would stop
            dream.check_guard(plan, settings, force)
        except dream.GuardRail as exc:
            render.warning(str(exc).replace("dream stopped, nothing changed: it", "the real run would stop: it"))
        return
    from memctl.cli.progress import ProgressLine

    with ProgressLine("dream", "changes", verbose=verbose) as line:
        options.progress = line.hear
        report = dream.run(settings, clock.now(), options)
    if json_out:
        render.json_line(report.to_dict())
        return
    render.line(report.run)
    render.message(report.summary())


def _print_plan(plan, json_out: bool, verbose: bool) -> None:
    if json_out:
        render.json_line(plan.to_dict())
        return
    for change in plan.changes:
        for line_text in change.describe():
            render.line(line_text)
    if verbose:
        for entry_id, rule in plan.kept:
            render.line(f"keeping: {entry_id} (rule: {rule})")
    render.message(plan.totals_text())


def _short(text: str, limit: int = 70) -> str:
    """One line of an entry's text; redacted before it is cut, so no cut leaves half a secret."""
    flat = " ".join(render.redacted(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
