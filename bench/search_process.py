#!/usr/bin/env python3
"""Where one `memctl search` process spends its time (issue #31), beside tantivy fed memctl's
own tokens, on a memory built by bench/search_scale.py (`--keep`).

Prints, for the queries of one language (search_scale's 25 English or 25 Chinese):

1. processes, CPU (user + system) median over the queries: a bare interpreter (`python -c
   pass`, and with `-I`: no site, no editable-install finder), an interpreter importing exactly
   the modules a search process ends up with (its `sys.modules`, recorded at its exit), the
   whole `memctl search` piped, and a tantivy process (import, open, the same terms, 5 hits
   and their texts);
2. in-process, the index open: each stage of a search (the functions memctl.recall.search
   calls, wrapped by timers here; no change to memctl), in ms per query and in µs per
   candidate, and tantivy's query with the same terms and 5 stored texts; then both as CPU
   time (`time.process_time`), their rounds interleaved — on a loaded machine the wall time
   of a sub-millisecond query is mostly the wait for a core, the CPU time is not;
3. the number of candidates each query ranked.

The tantivy index is written once from the memctl index's rows (`fts.body`, memctl's own
tokens, split on whitespace; the item's text stored) into --tantivy-dir, and reused.

    nice -n 10 .venv/bin/python bench/search_scale.py --sizes 100M --zh-share 0 --keep --no-rates --workdir /tmp/en
    nice -n 10 .venv/bin/python bench/search_process.py --root /tmp/en/memory-100M --lang en

Needs `pip install tantivy` (a bench-only dependency; without it the tantivy rows are left out).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from search_scale import child_env, make_queries, memctl_exe, timed_process_cpu  # noqa: E402

STAGES = ("searched_focus", "aside_terms", "expected_answer", "named_period", "candidates", "weigh_terms",
          "favour_typed_answers", "favour_dated", "session_scores", "blend", "with_session_feedback",
          "with_neighbours", "by_layer_priority", "make_snippet")
TANTIVY_QUERY = """
import sys, tantivy
index = tantivy.Index.open(sys.argv[1])
index.register_tokenizer("ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
searcher = index.searcher()
query = index.parse_query(sys.argv[2], ["body"])
for _, address in searcher.search(query, 5).hits:
    print(searcher.doc(address)["text"][0])
"""


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def process_cpu(commands: list[list[str]], env: dict) -> float:
    """The median CPU seconds of these processes, each run once."""
    return statistics.median(timed_process_cpu(command, env)[4] for command in commands)


def search_modules(exe_python: str, root: Path, query: str, env: dict) -> list[str]:
    """The modules a `memctl search` process holds at its exit."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as out:
        code = ("import atexit, sys\n"
                f"atexit.register(lambda: open({out.name!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
                f"sys.argv = ['memctl', '--root', {str(root)!r}, 'search', {query!r}]\n"
                "from memctl.entry import main\nsys.exit(main())\n")
        subprocess.run([exe_python, "-c", code], env=env, stdout=subprocess.DEVNULL, check=False)
        return [name for name in out.read().split() if name != "__main__"]


def tantivy_build(root: Path, directory: Path) -> None:
    """memctl's rows, bodies as memctl tokenized them, into a tantivy index (once)."""
    import tantivy

    if (directory / "meta.json").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", tokenizer_name="ws")
    builder.add_text_field("text", stored=True, tokenizer_name="raw", index_option="basic")
    index = tantivy.Index(builder.build(), path=str(directory))
    index.register_tokenizer("ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    db = sqlite3.connect(f"file:{root / '.memctl' / 'index.sqlite'}?mode=ro", uri=True)
    rows = db.execute("SELECT fts.body, items.text FROM items JOIN fts ON fts.rowid = items.rowid")
    for body, text in rows:
        writer.add_document(tantivy.Document(body=body.split(" ", 1)[-1], text=text))
    writer.commit()
    writer.wait_merging_threads()
    db.close()


def query_terms(root: Path, queries: list[str]) -> list[str]:
    """The terms memctl searches each query by (its plan), as one tantivy query string."""
    from memctl.core.config import Layout
    from memctl.recall.search import Searcher

    searcher = Searcher(Layout(root), refresh=False)
    try:
        return [" ".join(f'"{t}"' for t in searcher.plan(q, 80).terms) for q in queries]
    finally:
        searcher.close()


class StageTimers:
    """Wraps the stage functions memctl.recall.search calls, and inside the candidates stage the
    store's reads and the Python BM25 (`candidates.` rows, nested in `candidates`); sums each
    one's time. Counts the candidates ranked and the rows the Python BM25 scored."""

    def __init__(self):
        import memctl.recall.ranking.candidates as candidates
        import memctl.recall.search as search
        from memctl.recall.indexing.store import SQLiteStore

        self.spent: dict[str, float] = {}
        self.candidates: list[int] = []
        self.scored: list[int] = []
        targets = [(search, name, name) for name in STAGES if hasattr(search, name)]
        targets += [(search.Searcher, "plan", "plan"), (search.Searcher, "_load_texts", "load_texts"),
                    (candidates, "python_bm25", "candidates.python_bm25"), (candidates, "hydrate", "candidates.hydrate")]
        targets += [(SQLiteStore, name, f"candidates.store.{name}") for name in
                    ("matching_item_ids", "newest_matching_item_ids", "ranked_item_scores", "document_frequencies")]
        self.originals = [(owner, name, getattr(owner, name)) for owner, name, _ in targets]
        for owner, name, label in targets:
            setattr(owner, name, self._timed(label, getattr(owner, name)))

    def _timed(self, label, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                result = function(*args, **kwargs)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.perf_counter() - started
            if label == "candidates":
                self.candidates.append(len(result[0]))
            elif label == "candidates.python_bm25":
                self.scored.append(len(args[2]))
            return result
        return timed

    def restore(self) -> None:
        for owner, name, function in self.originals:
            setattr(owner, name, function)


def in_process(root: Path, queries: list[str], rounds: int) -> tuple[dict[str, float], float, StageTimers, float]:
    """(ms per query of each stage, ms per query in all, the timers (their counts), open ms)."""
    from memctl.core.config import Layout
    from memctl.recall.search import SearchRequest, Searcher

    started = time.perf_counter()
    searcher = Searcher(Layout(root), refresh=False)
    opened = time.perf_counter() - started
    for query in queries:  # warm: the page cache and the tokenizer's caches, as a second search finds them
        searcher.search(SearchRequest(query))
    timers = StageTimers()
    started = time.perf_counter()
    try:
        for _ in range(rounds):
            for query in queries:
                searcher.search(SearchRequest(query))
    finally:
        timers.restore()
        searcher.close()
    count = rounds * len(queries)
    total = (time.perf_counter() - started) / count * 1000
    stages = {name: spent / count * 1000 for name, spent in timers.spent.items()}
    return stages, total, timers, opened * 1000


def tantivy_in_process(directory: Path, terms: list[str], rounds: int) -> float:
    import tantivy

    index = tantivy.Index.open(str(directory))
    index.register_tokenizer("ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
    searcher = index.searcher()
    times = []
    for _ in range(rounds + 1):
        for text in terms:
            started = time.perf_counter()
            for _, address in searcher.search(index.parse_query(text, ["body"]), 5).hits:
                searcher.doc(address)["text"]
            times.append(time.perf_counter() - started)
    return median_ms(times[len(terms):])


def cpu_side_by_side(root: Path, queries: list[str], directory: Path | None, terms: list[str],
                     rounds: int) -> tuple[float, float]:
    """(memctl, tantivy) in-process CPU ms per query (`time.process_time`: on a loaded machine
    the wall time of a query is mostly the wait for a core), their rounds interleaved so that
    both meet the same load; each side warmed once first, the best round of each kept."""
    from memctl.core.config import Layout
    from memctl.recall.search import SearchRequest, Searcher

    searcher = Searcher(Layout(root), refresh=False)
    index = None
    if directory is not None:
        import tantivy

        index = tantivy.Index.open(str(directory))
        index.register_tokenizer("ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
        tantivy_searcher = index.searcher()

    def memctl_round() -> float:
        started = time.process_time()
        for query in queries:
            searcher.search(SearchRequest(query))
        return (time.process_time() - started) / len(queries) * 1000

    def tantivy_round() -> float:
        started = time.process_time()
        for text in terms:
            for _, address in tantivy_searcher.search(index.parse_query(text, ["body"]), 5).hits:
                tantivy_searcher.doc(address)["text"]
        return (time.process_time() - started) / len(terms) * 1000

    try:
        ours, theirs = [], []
        for round_ in range(rounds + 1):
            ours.append(memctl_round())
            theirs.append(tantivy_round() if index is not None else float("nan"))
        return min(ours[1:]), min(theirs[1:])
    finally:
        searcher.close()


def paired(exe: str, baseline: str, root: Path, queries: list[str], rounds: int, env: dict) -> None:
    """Both memctls' search processes, one after the other for each query: the machine's load
    weighs on both alike, and the median of the differences says what changed."""
    ours, theirs = [], []
    for _ in range(rounds):
        for query in queries:
            ours.append(timed_process_cpu([exe, "--root", str(root), "search", query], env)[4])
            theirs.append(timed_process_cpu([baseline, "--root", str(root), "search", query], env)[4])
    difference = statistics.median(b - a for a, b in zip(ours, theirs))
    print(f"paired, {len(ours)} processes each: {exe} {median_ms(ours):.1f} ms CPU, {baseline} "
          f"{median_ms(theirs):.1f} ms; median of the differences {difference * 1000:+.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="a memory with its index (search_scale.py --keep)")
    parser.add_argument("--lang", choices=("en", "zh"), default="en")
    parser.add_argument("--queries", type=int, default=25, help="how many of the language's queries")
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds over the queries")
    parser.add_argument("--tantivy-dir", type=Path, help="where tantivy's index is kept (default: beside --root)")
    parser.add_argument("--memctl", metavar="EXE", help="the memctl to time (default: the one beside this Python)")
    parser.add_argument("--baseline", metavar="EXE", help="also an older memctl, its processes interleaved with "
                                                          "--memctl's (query by query, --rounds times): paired CPU")
    args = parser.parse_args()
    env, exe = child_env(), args.memctl or memctl_exe()
    en, zh = make_queries(7)
    queries = (en if args.lang == "en" else zh)[:args.queries]
    try:
        import tantivy  # noqa: F401
        have_tantivy = True
    except ImportError:
        have_tantivy = False
        print("tantivy is not installed (pip install tantivy): its rows are left out")
    tantivy_dir = args.tantivy_dir or args.root.parent / f"tantivy-{args.root.name}"
    if have_tantivy:
        started = time.process_time()
        tantivy_build(args.root, tantivy_dir)
        print(f"tantivy index at {tantivy_dir} ({time.process_time() - started:.1f} CPU-s to write, 0 if reused)")
    terms = query_terms(args.root, queries)
    modules = search_modules(sys.executable, args.root, queries[0], env)
    imports = "import importlib\nfor name in %r:\n    try: importlib.import_module(name)\n    except Exception: pass\n" % modules
    load = os.getloadavg()[0]
    rows = {
        "python -c pass": process_cpu([[sys.executable, "-c", "pass"]] * len(queries), env),
        "python -I -c pass": process_cpu([[sys.executable, "-I", "-c", "pass"]] * len(queries), env),
        f"python importing a search's {len(modules)} modules": process_cpu([[sys.executable, "-c", imports]] * len(queries), env),
        "memctl search (piped)": process_cpu([[exe, "--root", str(args.root), "search", q] for q in queries], env),
    }
    if have_tantivy:
        rows["tantivy process (same terms, 5 texts)"] = process_cpu(
            [[sys.executable, "-c", TANTIVY_QUERY, str(tantivy_dir), t] for t in terms], env)
    print(f"\n[{args.root}, {args.lang}, {len(queries)} queries, load {load:.1f}-{os.getloadavg()[0]:.1f}]")
    print("process CPU, median:")
    for name, cpu in rows.items():
        print(f"  {name:45s} {cpu * 1000:6.1f} ms")
    if args.baseline:
        paired(exe, args.baseline, args.root, queries, args.rounds, env)
    stages, total, timers, opened = in_process(args.root, queries, args.rounds)
    candidates = timers.candidates[:len(queries)]
    scored = timers.scored[:len(queries)] or [0]
    print(f"in-process: open {opened:.1f} ms; a search {total:.2f} ms (mean of {args.rounds} rounds); "
          f"candidates ranked per query: median {statistics.median(candidates):.0f}, max {max(candidates)}; "
          f"rows scored by the Python BM25: median {statistics.median(scored):.0f}, max {max(scored)}")
    per_candidate = 1000 / max(1.0, statistics.mean(candidates))
    for name, ms in sorted(stages.items(), key=lambda item: (item[0].split(".")[0] != "candidates", -item[1])):
        print(f"  {name:40s} {ms:7.3f} ms/query  {ms * per_candidate:8.2f} µs/candidate")
    top = sum(ms for name, ms in stages.items() if "." not in name)
    print(f"  {'(the rest)':40s} {total - top:7.3f} ms/query")
    if have_tantivy:
        print(f"tantivy in-process: {tantivy_in_process(tantivy_dir, terms, args.rounds):.2f} ms/query (median)")
    ours, theirs = cpu_side_by_side(args.root, queries, tantivy_dir if have_tantivy else None, terms, args.rounds)
    print(f"in-process CPU, rounds interleaved, best of {args.rounds}: memctl {ours:.2f} ms/query, "
          f"tantivy {theirs:.3f} ms/query: {ours / theirs:.1f}x")
    print(json.dumps({"rows_ms": {k: round(v * 1000, 1) for k, v in rows.items()},
                      "stages_ms": {k: round(v, 3) for k, v in stages.items()}, "search_ms": round(total, 3)}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
