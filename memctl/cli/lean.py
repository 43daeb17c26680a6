"""`memctl search`, `memctl index refresh`, `memctl index rebuild [--json]` (and, through
`cli.writes`, `remember`, `forget ID…`, `restore ID`) without typer, rich or pydantic.

The console script (memctl.entry) tries these first: agents, hooks and timers run them many
times a day, and the full command line's imports cost ~0.3 s, more than a search itself.
Only the plain forms are handled here — a search (piped, --json, or the table on a terminal,
drawn by memctl.cli.table without rich), a bare `index refresh`, `index rebuild [--json]`.
Anything else (--wide, --help, --queries, an unknown option) returns None and the
full command line runs, so behaviour is defined in one place: the modules both call.
"""

from __future__ import annotations

import sys

from memctl.cli.argv import global_options
from memctl.cli.startup import internal_error_text, os_error_text, prepare_process
from memctl.cli.tsv import tsv_line
from memctl.core.errors import EXIT_NO_MATCH, EXIT_OK, MemctlError

_VALUE_OPTIONS = {"-k": "k", "--layers": "layers", "--mode": "mode", "--since": "since", "--until": "until",
                  "--type": "type"}


def is_index_rebuild(argv: list[str]) -> bool:
    """Whether these arguments are the `index rebuild` this path answers."""
    parsed = global_options(argv)
    return parsed is not None and parsed[2][:2] == ["index", "rebuild"]


def run(argv: list[str]) -> int | None:
    """The exit status, or None when the full command line must handle these arguments."""
    parsed = global_options(argv)
    if parsed is None:
        return None
    root, debug, args = parsed
    if args[:1] and args[0] in ("remember", "forget", "restore", "archive"):
        if debug:  # tracebacks are the full command line's
            return None
        from memctl.cli import writes

        return writes.run(root, args)
    if args[:1] == ["search"]:
        options = parse_search_args(args[1:])
        if options is None:
            return None
        return _guarded(lambda: _search(root, options))
    if args == ["index", "refresh"]:
        return _guarded(lambda: _refresh(root))
    if args[:2] == ["index", "rebuild"] and args[2:] in ([], ["--json"]):
        return _guarded(lambda: _rebuild(root, json_out=bool(args[2:])))
    return None


def parse_search_args(args: list[str]) -> dict | None:
    """`WORDS… [options]` after `search` -> options, or None for anything unusual."""
    options: dict = {"words": [], "json": False, "refresh": True}
    args = list(args)
    while args:
        arg = args.pop(0)
        if arg == "--json":
            options["json"] = True
        elif arg == "--no-refresh":
            options["refresh"] = False
        elif arg in _VALUE_OPTIONS and args:
            options[_VALUE_OPTIONS[arg]] = args.pop(0)
        elif arg == "--":
            options["words"].extend(args)
            break
        elif arg.startswith("-"):
            return None
        else:
            options["words"].append(arg)
    return options if options["words"] else None


def _guarded(action) -> int:
    from memctl.core.sqlite import DatabaseError

    try:
        return action()
    except (MemctlError, ValueError, DatabaseError) as exc:
        from memctl.cli import render

        render.error(str(exc))
        return getattr(exc, "exit_code", 2)
    except OSError as exc:  # e.g. a cache folder that cannot be created
        from memctl.cli import render

        render.error(os_error_text(exc))
        return 2
    except Exception as exc:  # a crash is exit 2 with one line, as on the full command line
        from memctl.cli import render

        render.error(internal_error_text(exc))
        return 2


def _settings(root):
    from memctl.cli import render
    from memctl.core.config import load_settings
    from memctl.core.roots import resolve_root

    settings = load_settings(resolve_root(root))
    render.configure_redaction(settings.get("redaction", "extra_patterns"))
    return settings


def _search(root, options: dict) -> int:
    from memctl.cli import render
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.embeddings.semantic import SemanticSignal

    settings = _settings(root)
    query = " ".join(options["words"])
    ranking = Ranking.from_settings(settings)
    # a fused search's model and vector probe start in a forked helper now, before the lexical
    # search is even imported (memctl.recall.embeddings.semantic_helper); None without item vectors
    semantic = SemanticSignal.started_for(settings.layout, ranking, query)
    try:
        hits = _search_with(settings, query, options, ranking, semantic)
    finally:
        if semantic is not None:
            semantic.close()  # the helper reaped, even when the request was refused
    if hits.note() and not options["json"]:  # above the table; --json says it on every hit line
        sys.stderr.write(render.redacted(hits.note()) + "\n")
        sys.stderr.flush()
    try:
        if options["json"]:
            render.lines(render.json_text(hits.hit_json(hit)) for hit in hits)
        elif sys.stdout.isatty():
            _terminal_table(hits, options)
        else:
            render.lines(tsv_line(hit) for hit in hits)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` closed the pipe: quiet, like grep
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK if hits else EXIT_NO_MATCH


def _search_with(settings, query: str, options: dict, ranking, semantic) -> list:
    from memctl.cli import render
    from memctl.recall.indexing.index import IndexOptions
    from memctl.recall.search import request_from_settings, search_once

    request = request_from_settings(settings, query,
                                    k=_whole_number("-k", options["k"]) if "k" in options else None,
                                    layers=options.get("layers"),
                                    mode=options.get("mode"), since=options.get("since"),
                                    until=options.get("until"), type=options.get("type"))
    return search_once(settings.layout, request, IndexOptions.from_settings(settings), refresh=options["refresh"],
                       on_warning=lambda text: sys.stderr.write(render.redacted(f"warning: {text}") + "\n"),
                       ranking=ranking, semantic=semantic)


def _terminal_table(hits, options: dict) -> None:
    from memctl.cli import render
    from memctl.cli.table import table_lines

    if hits:
        render.lines(table_lines(hits, " ".join(options["words"])))
    else:
        sys.stderr.write("no matches\n")


def _whole_number(option: str, text: str) -> int:
    if not text.lstrip("-").isdigit():
        raise MemctlError(f"{option} takes a whole number, got {text!r}")
    return int(text)


def _refresh(root) -> int:
    from memctl.recall.indexing.index import IndexOptions, SearchIndex

    settings = _settings(root)
    report = SearchIndex(settings.layout, IndexOptions.from_settings(settings)).ensure_fresh(wait=True)
    from memctl.cli import render

    sys.stderr.write(render.redacted(f"{report.summary()}") + "\n")
    _after_index_pass(settings, report)
    return EXIT_OK


def _rebuild(root, json_out: bool) -> int:
    """`index rebuild [--json]`: the same report as the full command line's (an 8 MB build
    takes well under a second now; typer's and rich's imports were a third of it)."""
    from memctl.recall.indexing.index import IndexOptions, SearchIndex

    from memctl.cli.progress import rebuild_progress

    settings = _settings(root)
    with rebuild_progress() as line:
        report = SearchIndex(settings.layout, IndexOptions.from_settings(settings)).rebuild(line.hear)
    from memctl.cli import render

    if json_out:
        render.line(render.json_text({"rebuilt": True, "items": report.docs_added, "bytes_read": report.bytes_read,
                                      "seconds": round(report.seconds, 3), "errors": report.errors}))
    else:
        sys.stderr.write(render.redacted(f"indexed {report.docs_added} item(s) from "
                                         f"{render.human_bytes(report.bytes_read)} in {report.seconds:.2f}s") + "\n")
    _after_index_pass(settings, report)
    return EXIT_OK


def _after_index_pass(settings, report) -> None:
    """Warnings for the sources that could not be read, then the opted-in item vectors."""
    from memctl.cli import render

    for error in report.errors:
        sys.stderr.write(render.redacted(f"warning: {error}") + "\n")
    from memctl.recall.embeddings.semantic import embed_if_opted_in

    message = embed_if_opted_in(settings)
    if message:
        sys.stderr.write(render.redacted(message) + "\n")


if __name__ == "__main__":  # `python -m memctl.cli.lean`: the lean path alone (the console script adds the rest)
    code = run(prepare_process(sys.argv[1:]))
    if code is None:
        sys.stderr.write("memctl: error: the lean path answers piped searches and `index refresh` only; "
                         "run memctl for the rest\n")
        code = 2
    sys.exit(code)
