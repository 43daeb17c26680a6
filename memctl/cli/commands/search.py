"""Recall subcommands: `search`, `import`, `index rebuild|refresh|embed` (design.md §5, §6)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from memctl.cli import render
from memctl.cli.state import state
from memctl.core.config import Settings
from memctl.core.errors import EXIT_NO_MATCH, EXIT_OK, MemctlError, UsageError

if TYPE_CHECKING:  # the modules themselves load when a command runs: `memctl --help` stays fast
    from memctl.recall.indexing.index import IndexOptions
    from memctl.recall.ranking.hits import Hits
    from memctl.recall.search import Hit, Searcher

index_app = typer.Typer(help="The derived search index in .memctl/index.sqlite.", no_args_is_help=True,
                        add_completion=False, rich_markup_mode=None)


def register(app: typer.Typer) -> None:
    app.command("search")(search)
    app.command("show")(show)
    app.command("import")(import_command)
    app.add_typer(index_app, name="index")


def index_options(settings: Settings) -> "IndexOptions":
    from memctl.recall.indexing.index import IndexOptions

    return IndexOptions.from_settings(settings)


def search(
    ctx: typer.Context,
    words: Optional[List[str]] = typer.Argument(None, metavar="QUERY", help="Words to look for (Chinese, English or both)."),
    k: Optional[int] = typer.Option(None, "-k", help="Number of results (default 5, or the mode's)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Comma-separated layers, e.g. L2,L3,L4,L5 (L6 only when asked)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="reply (L5>L4>L2, k=3), deep (L5>L4>L6, k=5), earlier (L4>L5, k=3), recall (L5>L4, k=3)."),
    since: Optional[str] = typer.Option(None, "--since", help="Only items dated on or after: ISO date or a phrase like '3 days ago'."),
    until: Optional[str] = typer.Option(None, "--until", help="Only items dated on or before (a date alone means the end of that day)."),
    type_: Optional[str] = typer.Option(None, "--type", help="Only entries of this type (event, preference, …)."),
    json_out: bool = typer.Option(False, "--json", help="JSON Lines: ref, layer, score, date, type, text, id."),
    queries: Optional[Path] = typer.Option(None, "--queries", help='Batch: JSON Lines {"qid", "query"} in ("-" for stdin); one JSON line per hit with qid out.'),
    no_refresh: bool = typer.Option(False, "--no-refresh", help="Search the index as it is, without refreshing it first."),
    wide: bool = typer.Option(False, "--wide", help="Terminal table: let snippets wrap instead of one line a hit."),
) -> None:
    """Ranked search over the layers. Exit 0 when something matched, 1 when nothing did, 2 on error.

    Output: a table on a terminal (one line a hit, the ref whole; "no matches" on stderr when
    nothing matched); piped, one hit a line `ref<TAB>layer<TAB>score<TAB>snippet`;
    --json, one JSON object a line.

    A word the memory does not hold is read as the closest written word (a typo), and when no
    word matches, as the start or a piece of written words (`cert`, `SignatureDoes`); stderr
    then says "showing results for …" and each --json line carries `corrected` or `completed`.
    An identifier (`bk-03`, `v2.1`, `ERR_42`) is never read as another one. With --mode, the
    mode's layer order comes first among hits that hold the query's words alike.
    """
    query = " ".join(words) if words else None
    if (query is None) == (queries is None):
        raise UsageError("give a QUERY or --queries FILE (not both)")
    from memctl.recall.search import record_references, request_from_settings

    settings = state(ctx).settings
    base = request_from_settings(settings, "", k=k, layers=layers, mode=mode, since=since, until=until, type=type_)
    searcher = _open_searcher(settings, refresh=not no_refresh)
    found = False
    try:
        if queries is not None:
            found = _run_batch(searcher, base, queries, settings)
        else:
            base = base._replace(query=query or "")
            hits = _search(searcher, base)
            record_references(settings.layout, hits, searcher.store)
            found = bool(hits)
            if hits.note() and not json_out:  # above the table; --json says it on every hit line
                render.message(hits.note())
            _print_hits(hits, base.query, json_out, wide)
    finally:
        for warning in searcher.warnings():
            render.warning(warning)
        searcher.close()
    raise typer.Exit(EXIT_OK if found else EXIT_NO_MATCH)


def _open_searcher(settings: Settings, refresh: bool) -> "Searcher":
    from memctl.recall.search import Searcher

    try:
        return Searcher(settings.layout, index_options(settings), refresh=refresh)
    except sqlite3.DatabaseError as exc:
        raise MemctlError(f"the search index cannot be used ({exc}); run `memctl index rebuild`") from None


def _search(searcher: "Searcher", request) -> "Hits":
    from memctl.recall.ranking.hits import Hits

    try:
        return searcher.search(request)
    except sqlite3.OperationalError as exc:
        if "fts5" in str(exc).lower() or "syntax" in str(exc).lower():
            return Hits()
        raise MemctlError(f"search failed: {exc}") from None


def _run_batch(searcher: "Searcher", base, path: Path, settings: Settings) -> bool:
    from memctl.recall.importer import read_input
    from memctl.recall.search import record_references

    lines = read_input(str(path))
    found = False
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
            qid, query = item["qid"], str(item["query"])
        except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested 10k deep
            render.warning(f"{path}:{number}: not a JSON line with qid and query; skipped")
            continue
        request = base._replace(query=query)
        hits = _search(searcher, request)
        record_references(settings.layout, hits, searcher.store)
        found = found or bool(hits)
        for rank, hit in enumerate(hits, start=1):
            render.json_line({"qid": qid, "rank": rank, **hits.hit_json(hit)})
    return found


def _print_hits(hits: "Hits", query: str, json_out: bool, wide: bool = False) -> None:
    from memctl.cli.tsv import tsv_line

    if json_out:
        for hit in hits:
            render.json_line(hits.hit_json(hit))
    elif render.stdout_is_terminal():
        if hits:
            _print_table(hits, query, wide)
        else:
            render.message("no matches")
    else:
        for hit in hits:
            render.line(tsv_line(hit))
    sys.stdout.flush()


def _print_table(hits: "list[Hit]", query: str, wide: bool) -> None:
    from memctl.cli.table import table_lines

    render.lines(table_lines(hits, query, wide))


def import_command(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE|-", help="JSON Lines: text, optional id, date, session, type, speaker."),
    layer: str = typer.Option("L6", "--layer", help="L6 (default: bulk history skips the layers) or L5."),
    default_type: str = typer.Option("event", "--type", help="Type for lines that do not give one."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON Lines (bad lines, then a summary)."),
    wait: float = typer.Option(0.0, "--wait", metavar="SECONDS", help="Wait for another memctl to finish instead of exiting 75."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="A line on stderr for each step's count (on a "
                                                                 "terminal there is otherwise one progress line)."),
) -> None:
    """Bulk-load items into L6 (or L5); bad lines are reported with their numbers, good ones kept.
    The search index is brought up to date with them before it returns (built, if the memory
    had none), so the next search does not pay for it.

    Exit 0 when every line was imported, 3 when some lines were bad, 2 when none could be.
    """
    from memctl.recall.importer import import_lines, read_input

    settings = state(ctx).settings
    from memctl.cli.progress import ProgressLine

    lines = read_input(file)
    with ProgressLine("import", "", verbose=verbose) as line:
        report = import_lines(settings.layout, lines, layer=layer.upper(), default_type=default_type,
                              source=f"import:{'stdin' if file == '-' else Path(file).name}",
                              known_types=settings.types.keys(),
                              extra_patterns=tuple(settings.get("redaction", "extra_patterns")), lock_wait=wait,
                              progress=lambda done, total, step: line.update(done, total, unit=step))
    for bad in report.bad:
        render.error(f"{file}:{bad.number}: {bad.reason}")
    if report.imported:  # the next search finds them indexed, the index built if there was none
        from memctl.cli.progress import rebuild_progress
        from memctl.recall.indexing.index import refresh_after_write
        from memctl.recall.embeddings.semantic import embed_in_background  # [semantic] embed_after_writes

        with rebuild_progress(verbose) as line:
            indexed = refresh_after_write(settings, line.hear)
        for warning in [*indexed, embed_in_background(settings)]:
            if warning:
                render.warning(warning)
    if json_out:  # last, after the index's progress line: the result is what a terminal ends with
        render.json_line(report.to_json())
    else:
        render.message(f"imported {report.imported} item(s) into {report.layer}; {len(report.bad)} bad line(s)")
    if report.bad:
        raise typer.Exit(3 if report.imported else 2)


@index_app.command("rebuild")
def index_rebuild(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="A line on stderr for each source indexed (on a "
                                                                 "terminal there is otherwise one progress line)."),
) -> None:
    """Recreate .memctl/index.sqlite from the layers (it is derived; nothing is lost)."""
    from memctl.cli.progress import rebuild_progress
    from memctl.recall.indexing.index import SearchIndex

    settings = state(ctx).settings
    with rebuild_progress(verbose) as line:
        report = SearchIndex(settings.layout, index_options(settings)).rebuild(line.hear)
    data = {"rebuilt": True, "items": report.docs_added, "bytes_read": report.bytes_read,
            "seconds": round(report.seconds, 3), "errors": report.errors}
    if json_out:
        render.json_line(data)
    else:
        render.message(f"indexed {report.docs_added} item(s) from {render.human_bytes(report.bytes_read)} "
                       f"in {report.seconds:.2f}s")
    for error in report.errors:
        render.warning(error)
    _embed_if_opted_in(settings)


@index_app.command("refresh")
def index_refresh(ctx: typer.Context) -> None:
    """Bring the index up to date with changed files only (a search does this by itself)."""
    from memctl.recall.indexing.index import SearchIndex

    settings = state(ctx).settings
    report = SearchIndex(settings.layout, index_options(settings)).ensure_fresh(wait=True)
    render.message(report.summary())
    for error in report.errors:
        render.warning(error)
    _embed_if_opted_in(settings)


def _embed_if_opted_in(settings: Settings) -> None:
    """A memory with item vectors gets the new items' vectors after a refresh or rebuild."""
    from memctl.recall.embeddings.semantic import embed_if_opted_in

    message = embed_if_opted_in(settings)
    if message:
        render.message(message)


@index_app.command("embed")
def index_embed(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    for_: str = typer.Option("", "--for", metavar="DURATION",
                             help="Stop once this much time has passed (e.g. 10m, 2h): what was embedded is "
                                  "kept, a next run continues. The last-indexed rows go first."),
) -> None:
    """Item vectors for the [semantic] extra (.memctl/vectors.sqlite): only texts never embedded
    before go through the model. Searches use the vectors that exist; run this after an import."""
    settings = state(ctx).settings
    report = embed_now(settings, _embed_budget(for_))
    if json_out:
        render.json_line({"rows": report.rows, "embedded": report.embedded, "reused": report.reused,
                          "dropped": report.dropped, "left": report.left, "ivf_trained": report.trained,
                          "seconds": round(report.seconds, 3), "model": report.model})
    else:
        render.message(report.summary())


def embed_now(settings: Settings, budget: float | None = None):
    """The index brought up to date, then the vectors its rows lack (`index embed`, `init
    --semantic`): memctl.recall.embeddings.semantic.EmbedReport."""
    from memctl.recall.indexing.index import SearchIndex
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.embeddings.semantic import embed_missing, locked

    SearchIndex(settings.layout, index_options(settings)).ensure_fresh(wait=True)
    with locked(settings.layout):
        return embed_missing(settings.layout, Ranking.from_settings(settings), budget=budget)


def _embed_budget(text: str) -> float | None:
    """--for's seconds, or None without it."""
    from memctl.core.clock import parse_duration
    from memctl.core.errors import UsageError

    if not text:
        return None
    seconds = parse_duration(text)
    if seconds < 0:
        raise UsageError(f"--for must not be negative, got {text!r}")
    return seconds


def show(
    ctx: typer.Context,
    ref: str = typer.Argument(..., help="A ref from search (L2:SECTION, L3:path, L4:session, L5:id, L6:id), "
                                        "an entry id, or a session name / sha256 prefix / raw file name."),
    raw: bool = typer.Option(False, "--raw", help="L4 sessions: print the original raw log, byte for byte."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object: an L5/L6 entry as stored (with its "
                                  "sources, conflicts, facts), else {ref, layer, text}."),
) -> None:
    """Print the whole item a ref names: an L5/L6 entry as JSON, an L2 section, an L3 file, an
    L4 history line, or an archived session (from its zip if need be)."""
    from memctl.cli.commands import l4
    from memctl.recall.search import find_item

    settings = state(ctx).settings
    layout = settings.layout
    item = _history_line_of_a_team_memory(settings, ref) or find_item(layout, ref)
    if item is None:
        item = _find_unprefixed(layout, ref)
    if item is None or item.layer == "L4-session":
        if json_out:
            raise UsageError("--json is for entries and lines; an archived session prints as its text")
        session = item.key if item is not None else ref
        l4.show(ctx, session, raw)
        return
    if raw:
        raise UsageError("--raw is only for L4 sessions")
    if json_out and item.layer not in ("L5", "L6"):
        render.json_line({"ref": f"{item.layer}:{item.key}", "layer": item.layer, "text": item.text})
        return
    render.line(item.text.rstrip("\n"))


LAYER_PREFIXES = ("L2:", "L3:", "L4:", "L5:", "L6:")


def _history_line_of_a_team_memory(settings, ref: str):
    """On a team memory a history line may be another machine's: its text from the index."""
    if settings.get("store", "backend") != "postgres" or not ref.startswith("L4:") or "#h" not in ref:
        return None
    from memctl.recall.indexing.pg_index import shared_history_line
    from memctl.recall.search import Item

    text = shared_history_line(index_options(settings), settings.layout.root, ref)
    return Item("L4", ref[3:], text) if text is not None else None


def _find_unprefixed(layout, ref: str):
    """`show` takes the `id` of --json as well as the `ref`: an id may itself hold a colon
    (`conv:s1:3`) or be a history line or a session piece without its layer (`0403_2013-0403_2021#h7`,
    `0403_2013-0403_2021#4`)."""
    from memctl.core.errors import NotFound
    from memctl.recall.search import find_item

    if ref.startswith(LAYER_PREFIXES):
        return None
    for prefix in ("L5:", "L6:", "L4:") if "#" in ref or ":" in ref else ():
        try:
            item = find_item(layout, prefix + ref)
        except NotFound:
            continue
        if item is not None and item.layer != "L4-session":
            return item
    return None
