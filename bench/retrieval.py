#!/usr/bin/env python3
"""Retrieval recall of `memctl search` on the development sets in ../shared/bench/.

Everything goes through the real command line: `memctl import` of one JSON Lines file per
memory folder (one folder per LoCoMo conversation, one per MemDaily qa_type x scenario pool,
one per LongMemEval question: its haystack of about 50 sessions, one item per user turn),
then one `memctl search --queries` per folder. Beside it, in the same run, the baselines the
benchmark README describes: plain BM25 over lowercase words (English) and character-bigram
BM25 (Chinese), k1 = 1.5, b = 0.75.

    .venv/bin/python bench/retrieval.py [--cv] [--no-semantic] [--bench-dir ../shared/bench]
        [--only locomo|memdaily|longmemeval]
        [--model multilingual-e5-small]
    .venv/bin/python bench/retrieval.py --backend postgres [--sets N] [--only locomo|memdaily]

With the [semantic] extra installed, each memory also gets `memctl index embed` and is searched
twice: lexical (`[ranking] fusion = "none"`) and fused (the defaults); `--model` names the
[semantic] model of every memory (default: the extra's English one). `--cv` first runs the
leave-one-out cross-validation of the ranking rules (bench/retrieval_cv.py) in the same run.

`--backend postgres` (issue #14) builds each memory a second time with its index on a
PostgreSQL server ($MEMCTL_PG_DSN, or a throwaway cluster: bench/pgserver.py), searches it with
the same queries and reports how many queries have the identical top 10 on both backends, and
each backend's time per query; `--sets N` takes the first N memories of each dataset.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, namedtuple
from pathlib import Path

HERE = Path(__file__).resolve().parent
# shared/ beside the checkout (as CI lays it), else /work/shared (a worktree lies deeper)
DEFAULT_BENCH = next((p for p in (HERE.parent.parent / "shared" / "bench", Path("/work/shared/bench")) if p.is_dir()),
                     HERE.parent.parent / "shared" / "bench")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)
SEMANTIC_TOML = ""  # --model: the [semantic] table every memory's memctl.toml carries
FUSED_RANKING = ""  # --fused-ranking: the [ranking] table of the fused run (default: the defaults)


def memctl_command() -> list[str]:
    beside = Path(sys.executable).with_name("memctl")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("memctl")
    if not found:
        sys.exit("memctl is not installed in this Python's environment (pip install -e .)")
    return [found]


# ---------------------------------------------------------------- datasets -> documents and questions

def locomo_sets(path: Path):
    """(name, docs, questions) per conversation; docs are {id, text, date, session, speaker}."""
    for conv in json.loads(path.read_text(encoding="utf-8")):
        sample = conv["sample_id"]
        talk = conv["conversation"]
        docs, turn_ids = [], set()
        for key in sorted(talk, key=lambda k: (len(k), k)):
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(talk[key], list):
                continue
            number = int(match.group(1))
            date = talk.get(f"{key}_date_time", "")
            for turn in talk[key]:
                s, t = (int(x) for x in re.match(r"D(\d+):(\d+)", turn["dia_id"]).groups())
                doc_id = f"{sample}|D{s}:{t}"
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [image: {turn['blip_caption']}]"
                docs.append({"id": doc_id, "text": text, "date": date, "session": f"D{number}",
                             "speaker": turn["speaker"]})
                turn_ids.add(doc_id)
        questions = []
        for number, qa in enumerate(conv["qa"]):
            if qa.get("category") == 5:
                continue
            relevant = set()
            for evidence in qa.get("evidence") or []:
                for s, t in re.findall(r"D:?(\d+):(\d+)", str(evidence)):
                    doc_id = f"{sample}|D{int(s)}:{int(t)}"
                    if doc_id in turn_ids:
                        relevant.add(doc_id)
            if relevant:
                questions.append({"qid": f"{sample}#{number}", "query": qa["question"], "relevant": relevant,
                                  "category": CATEGORIES.get(qa["category"], str(qa["category"]))})
        yield sample, docs, questions


def memdaily_sets(path: Path):
    """(name, docs, questions) per qa_type x scenario pool."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for qa_type, scenarios in data.items():
        for scenario, trajectories in scenarios.items():
            docs, questions = [], []
            for trajectory in trajectories:
                tid = trajectory["tid"]
                for message in trajectory["message_list"]:
                    docs.append({"id": f"{qa_type}|{scenario}|{tid}|{message['mid']}", "text": message["message"],
                                 "date": message.get("time", ""), "session": f"t{tid}"})
                qa = trajectory["QA"]
                relevant = {f"{qa_type}|{scenario}|{tid}|{mid}" for mid in qa.get("target_step_id") or []}
                if relevant:
                    questions.append({"qid": f"{qa_type}|{scenario}|{tid}", "query": qa["question"],
                                      "relevant": relevant, "category": qa_type})
            yield f"{qa_type}/{scenario}", docs, questions


def longmemeval_sets(path: Path):
    """(name, docs, questions) per LongMemEval question: its own haystack, one document per user
    turn (dated by its session), the turns marked `has_answer` its evidence; named
    "NNN/question_id" by its place in the file (the cross-validation's folds are runs of them).
    A question whose evidence is only in assistant turns has none here and is left out."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    for number, entry in enumerate(data):
        qid = entry["question_id"]
        docs, relevant = [], set()
        sessions = zip(entry["haystack_session_ids"], entry["haystack_dates"], entry["haystack_sessions"])
        for at, (session_id, date, turns) in enumerate(sessions):
            for turn_number, turn in enumerate(turns):
                if turn.get("role") != "user" or not turn.get("content", "").strip():
                    continue
                doc_id = f"{qid}|{at}|{turn_number}"
                docs.append({"id": doc_id, "text": turn["content"], "date": date, "session": f"{at}-{session_id}"})
                if turn.get("has_answer"):
                    relevant.add(doc_id)
        if relevant:
            yield f"{number:03d}/{qid}", docs, [{"qid": qid, "query": entry["question"], "relevant": relevant,
                                                 "category": entry["question_type"]}]



# ---------------------------------------------------------------- memctl through its command line

def import_memory(docs: list[dict], workdir: Path, config: str = "") -> Path:
    """A memory folder holding the documents as L6 entries (`memctl init`, `memctl import`);
    `config`: memctl.toml lines added after init (a [store] on the server)."""
    root = workdir / ("memory-server" if config else "memory")
    cmd = memctl_command()
    subprocess.run([*cmd, "--root", str(root), "init"], check=True, capture_output=True)
    write_config(root)
    if config:
        with open(root / "memctl.toml", "a", encoding="utf-8") as handle:
            handle.write("\n" + config)
        subprocess.run([*cmd, "--root", str(root), "init"], check=True, capture_output=True)  # on the server
    items = workdir / "items.jsonl"
    items.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    imported = subprocess.run([*cmd, "--root", str(root), "import", str(items)], capture_output=True)
    if imported.returncode != 0:
        sys.exit(f"memctl import failed: {imported.stderr.decode()}")
    return root


def write_config(root: Path, ranking: str = "") -> None:
    """The memory's memctl.toml: `ranking` lines (a [ranking] table) and --model's [semantic]."""
    config = root / "memctl.toml"
    if ranking or SEMANTIC_TOML:
        config.write_text(ranking + SEMANTIC_TOML, encoding="utf-8")
    else:
        config.unlink(missing_ok=True)


def embed_memory(root: Path) -> bool:
    """`memctl index embed`: True when the memory now has item vectors ([semantic] installed)."""
    done = subprocess.run([*memctl_command(), "--root", str(root), "index", "embed"], capture_output=True)
    return done.returncode == 0


def search_memory(root: Path, questions: list[dict], workdir: Path, k: int, fusion: str | None = None,
                  store: str = "") -> dict[str, list[str]]:
    """One `memctl search --queries` over the questions; `fusion` (and `store`, a [store] section)
    set in the folder's memctl.toml."""
    cmd = memctl_command()
    if fusion is not None:
        write_config(root, f'[ranking]\nfusion = "{fusion}"\n{store}')
    queries = workdir / "queries.jsonl"
    queries.write_text("".join(json.dumps({"qid": q["qid"], "query": q["query"]}, ensure_ascii=False) + "\n"
                               for q in questions), encoding="utf-8")
    found = subprocess.run([*cmd, "--root", str(root), "search", "--queries", str(queries), "--layers", "L6",
                            "-k", str(k), "--json"], capture_output=True)
    if found.returncode not in (0, 1):
        sys.exit(f"memctl search failed: {found.stderr.decode()}")
    for line in found.stderr.decode("utf-8", "replace").splitlines():
        print(f"  memctl: {line}", file=sys.stderr)
    ranked: dict[str, list[str]] = defaultdict(list)
    for line in found.stdout.decode("utf-8").splitlines():
        hit = json.loads(line)
        ranked[hit["qid"]].append(hit["id"])
    return ranked


# ---------------------------------------------------------------- baselines

class BM25:
    def __init__(self, docs: list[list[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tfs = [Counter(d) for d in docs]
        self.lengths = [len(d) for d in docs]
        self.avg = sum(self.lengths) / max(len(docs), 1)
        df = Counter(t for tf in self.tfs for t in tf)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.postings: dict[str, list[int]] = defaultdict(list)
        for i, tf in enumerate(self.tfs):
            for t in tf:
                self.postings[t].append(i)

    def top(self, query: list[str], k: int) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for t in set(query):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                f = self.tfs[i][t]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg)
                scores[i] += idf * f * (self.k1 + 1) / (f + norm)
        return [i for i, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]]


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def char_bigrams(text: str) -> list[str]:
    chars = [c for c in text if not c.isspace() and not re.match(r"[^\w]", c)]
    return [a + b for a, b in zip(chars, chars[1:])] or chars


def run_baseline(docs, questions, analyzer, k: int) -> dict[str, list[str]]:
    index = BM25([analyzer(d["text"]) for d in docs])
    return {q["qid"]: [docs[i]["id"] for i in index.top(analyzer(q["query"]), k)] for q in questions}


# ---------------------------------------------------------------- scoring and report

def recall(ranked: list[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant)


class Tally:
    def __init__(self):
        self.sums: dict[tuple[str, str, int], float] = defaultdict(float)
        self.counts: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, system: str, group: str, ranked: list[str], relevant: set[str]) -> None:
        self.counts[(system, group)] += 1
        for k in KS:
            self.sums[(system, group, k)] += recall(ranked, relevant, k)

    def value(self, system: str, group: str, k: int) -> float:
        return self.sums[(system, group, k)] / max(self.counts[(system, group)], 1)


def evaluate(name: str, sets, analyzer, baseline_name: str, keep: bool, semantic: bool) -> tuple[Tally, list[str]]:
    """memctl lexical (`[ranking] fusion = "none"`), memctl fused (the defaults, with item vectors
    when the [semantic] extra is installed) and the baseline, over every set. A set is
    (name, docs, questions) or (name, docs, questions, root) with its memory built already."""
    tally = Tally()
    systems = ["memctl-lexical"]
    started = time.monotonic()
    for set_name, docs, questions, *built in sets:
        workdir = Path(tempfile.mkdtemp(prefix="memctl-bench-"))
        try:
            root = built[0] if built else import_memory(docs, workdir)
            runs = {"memctl-lexical": search_memory(root, questions, workdir, max(KS), fusion="none")}
            if semantic and (built or embed_memory(root)):
                write_config(root, FUSED_RANKING)
                runs["memctl-fused"] = search_memory(root, questions, workdir, max(KS))
        finally:
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
        runs[baseline_name] = run_baseline(docs, questions, analyzer, max(KS))
        systems = list(runs)
        for q in questions:
            for system, ranked in runs.items():
                tally.add(system, "overall", ranked.get(q["qid"], []), q["relevant"])
                tally.add(system, q["category"], ranked.get(q["qid"], []), q["relevant"])
        print(f"  {set_name}: {len(docs)} items, {len(questions)} questions", file=sys.stderr)
    print(f"{name}: {time.monotonic() - started:.1f}s", file=sys.stderr)
    return tally, systems


class Agreement:
    """Per query: the same top 10 over the index on the server as over SQLite (--backend postgres)."""

    def __init__(self):
        self.same = self.total = 0
        self.seconds = {"files": 0.0, "postgres": 0.0}
        self.differing: list[str] = []

    def add(self, on_files: dict[str, list[str]], on_server: dict[str, list[str]], questions: list[dict]) -> None:
        for q in questions:
            self.total += 1
            if on_files.get(q["qid"], [])[:10] == on_server.get(q["qid"], [])[:10]:
                self.same += 1
            else:
                self.differing.append(q["qid"])

    def report(self, name: str) -> str:
        per_query = {b: 1000 * s / max(self.total, 1) for b, s in self.seconds.items()}
        return (f"{name}: identical top 10 on both backends for {self.same} of {self.total} queries; "
                f"`search --queries` per query: files {per_query['files']:.1f} ms, postgres "
                f"{per_query['postgres']:.1f} ms (each run includes the process start and the index check)"
                + (f"; differing: {', '.join(self.differing[:10])}" if self.differing else ""))


def compare_backends(name: str, sets, dsn: str, keep: bool) -> Agreement:
    """Each memory built twice, its index in SQLite and on the server, searched alike."""
    from pgserver import store_config

    agreement = Agreement()
    os.environ["MEMCTL_PG_DSN"] = dsn
    for number, (set_name, docs, questions, *_) in enumerate(sets):
        workdir = Path(tempfile.mkdtemp(prefix="memctl-bench-"))
        try:
            # one schema per memory of each dataset: LoCoMo's and MemDaily's Nth must not share one
            config = store_config(f"bench{os.getpid()}_{name.lower()}_{number}")
            runs = {}
            for backend, store in (("files", ""), ("postgres", config)):
                root = import_memory(docs, workdir, store)
                started = time.monotonic()
                runs[backend] = search_memory(root, questions, workdir, 10, fusion="none", store=store)
                agreement.seconds[backend] += time.monotonic() - started
            agreement.add(runs["files"], runs["postgres"], questions)
        finally:
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
        print(f"  {set_name}: {len(docs)} items, {len(questions)} questions", file=sys.stderr)
    print(agreement.report(name))
    return agreement


def print_table(title: str, tally: Tally, systems: list[str], groups: list[str]) -> None:
    print(f"\n{title}")
    print(f"{'group':<26}{'n':>6}  " + "  ".join(f"{s + ' R@' + str(k):>16}" for s in systems for k in KS))
    for group in groups:
        n = tally.counts[(systems[0], group)]
        if not n:
            continue
        cells = "  ".join(f"{tally.value(s, group, k):>16.3f}" for s in systems for k in KS)
        print(f"{group:<26}{n:>6}  {cells}")


class Family(namedtuple("Family", "title sets path analyzer baseline table groups")):
    """A development set: its loader and file under the bench folder, the baseline beside memctl
    (its analyzer and name) and the table's title and groups (question types)."""

    __slots__ = ()

    def load(self, bench_dir: Path) -> list:
        return list(self.sets(bench_dir / self.path))


FAMILIES = {
    "locomo": Family("LoCoMo", locomo_sets, "locomo/locomo_dev.json", words, "bm25-words",
                     "LoCoMo, turn level (dev: 5 conversations)", ["overall", *CATEGORIES.values()]),
    "memdaily": Family("MemDaily", memdaily_sets, "memdaily/memdaily_dev.json", char_bigrams, "bm25-bigram",
                       "MemDaily, pooled per qa_type x scenario",
                       ["overall", "simple", "conditional", "comparative", "aggregative", "post_processing", "noisy"]),
    "longmemeval": Family("LongMemEval", longmemeval_sets, "longmemeval/longmemeval_s_dev100.json.gz", words,
                          "bm25-words", "LongMemEval_S, user-turn level (dev: 100 questions, one haystack each)",
                          ["overall", "single-session-user", "single-session-preference", "multi-session",
                           "knowledge-update", "temporal-reasoning", "single-session-assistant"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-dir", type=Path, default=DEFAULT_BENCH)
    parser.add_argument("--only", choices=("locomo", "memdaily", "longmemeval"))
    parser.add_argument("--cv", action="store_true",
                        help="first choose each ranking rule by leave-one-out cross-validation (bench/retrieval_cv.py)")
    parser.add_argument("--no-semantic", action="store_true", help="lexical only, even with the [semantic] extra")
    parser.add_argument("--keep", action="store_true", help="keep the temporary memory folders")
    parser.add_argument("--backend", choices=("postgres",),
                        help="compare the top 10 over the index on a PostgreSQL server with SQLite's")
    parser.add_argument("--sets", type=int, help="only the first N memories of each dataset")
    parser.add_argument("--fusion-only", action="store_true",
                        help="with --cv: cross-validate the fusion alone, from the lexical defaults")
    parser.add_argument("--workdir", type=Path, help="with --cv: build the memories here (or reuse them) and keep them")
    parser.add_argument("--lexical-choices", type=json.loads, default=None,
                        help='with --cv: JSON {fold: {rule: value}}, the lexical rules a full --cv chose without each fold')
    parser.add_argument("--fusions", default="rrf,score",
                        help="with --cv: the fusion rules cross-validated (\"\": none, the command-line tables alone)")
    parser.add_argument("--fused-ranking", default="",
                        help='[ranking] lines of the fused run, e.g. \'fusion = "score"; semantic_weight = 1.0\'')
    parser.add_argument("--cv-passes", type=int, default=3,
                        help="with --cv: passes of coordinate ascent over the rules (1: each rule chosen once, in order)")
    parser.add_argument("--cv-kept", type=Path,
                        help="with --cv: a JSON Lines file of the variants scored (read first, appended to): a "
                             "stopped run resumes where it was")
    parser.add_argument("--cv-grid", choices=("full", "on-off"), default="full",
                        help="with --cv: each lexical rule's values (full), or only off and the default's (on-off: "
                             "whether each rule earns its place, a tenth of the variants)")
    parser.add_argument("--model", default="", help="[semantic] model of every memory (e.g. multilingual-e5-small)")
    parser.add_argument("--hurt-test", choices=("paired", "tolerance"), default="paired",
                        help="with --cv: a training fold is hurt by a fall over TOLERANCE that its paired questions "
                             "tell from noise (paired), or by any fall over TOLERANCE (tolerance: the rule before)")
    args = parser.parse_args()
    global SEMANTIC_TOML, FUSED_RANKING
    SEMANTIC_TOML = f'[semantic]\nmodel = "{args.model}"\n' if args.model else ""
    if args.fused_ranking:
        FUSED_RANKING = "[ranking]\n" + "".join(line.strip() + "\n" for line in args.fused_ranking.split(";"))
    os.environ.pop("MEMCTL_HOME", None)
    semantic = not args.no_semantic
    chosen = [args.only] if args.only else list(FAMILIES)
    sets = {name: FAMILIES[name].load(args.bench_dir)[:args.sets] for name in chosen}
    if args.backend:
        from pgserver import server_dsn

        with server_dsn() as dsn:
            for name, family_sets in sets.items():
                compare_backends(FAMILIES[name].title, family_sets, dsn, args.keep)
        return
    if args.cv:  # the memories are built (and embedded) once, for the cross-validation and the tables
        from retrieval_cv import build_and_validate

        sets, semantic = build_and_validate(sets, import_memory, embed_memory if semantic else None, args.keep,
                                            args.model, lexical_cv=not args.fusion_only, workdir=args.workdir,
                                            lexical_choices=args.lexical_choices,
                                            fusions=tuple(f for f in args.fusions.split(",") if f),
                                            passes=args.cv_passes, paired=args.hurt_test == "paired",
                                            kept=args.cv_kept, on_off=args.cv_grid == "on-off")
    for name, family_sets in sets.items():
        family = FAMILIES[name]
        tally, systems = evaluate(family.title, family_sets, family.analyzer, family.baseline, args.keep, semantic)
        print_table(family.table, tally, systems, family.groups)


if __name__ == "__main__":
    main()
