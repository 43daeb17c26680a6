"""Leave-one-out cross-validation of memctl's ranking rules (bench/retrieval.py --cv).

Folds: each LoCoMo conversation, each MemDaily scenario (roles, items, places: all of its
qa_type pools), each run of 25 LongMemEval questions in the file's order (lme-1 … lme-4; each
question is a memory of its own). Each fold's memories are built once through the real command line (`memctl
import`, and `memctl index embed` when the [semantic] extra is installed); the ranking variants
are then run in-process (memctl.recall.search.Searcher with a memctl.recall.ranking.ranking.Ranking),
so that a variant costs the queries alone.

Selection, for each held-out fold: start from the defaults and, one rule at a time, take the
value with the best mean R@10 over the other folds (each fold weighing the same) among the
values that hurt none of those folds against the rule turned off — a rule that helps one fold
and hurts another is not kept. A fold is hurt when its R@10 falls by more than TOLERANCE and the
fall is more than noise: the per-question differences, paired, put their mean below zero by
more than Z_HURT standard errors (a one-sided test at 5%). Before, any fall over TOLERANCE
counted (`Scores(units, paired=False)`, `bench/retrieval.py --hurt-test tolerance`), and in
MemDaily's 200-question folds, where the same wording is asked of a dozen trajectories, two
questions moving one way and none the other were enough to keep a rule out.

That is one pass; coordinate ascent repeats the passes (each rule chosen again given the others' current values) until a pass changes no
rule or PASSES passes were made (`--cv-passes 1`: the single pass of the runs before). The
held-out fold is then scored with what was chosen without it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from memctl.core.config import DEFAULTS, Layout
from memctl.recall.embeddings import semantic as semantic_signal
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.search import NOTHING_ASKED, SearchRequest, Searcher

K = 10
# Less than one question's worth in the smallest fold (LoCoMo conv-30: 81 questions, 1/81 = 0.012)
# is not taken as a rule hurting a fold: it is the noise of the measure.
TOLERANCE = 0.01
# ... and a fall that the questions' paired differences do not tell from noise (one-sided, 5%) is not either
Z_HURT = 1.645
# Coordinate ascent stops after this many passes even if a rule still moves (it cannot loop forever
# on a near-tie); a pass that changes no rule ends it earlier.
PASSES = 3

# rule -> (value meaning "off", candidate values); the order is the order of selection.
# [ranking] piece_backoff is not among them: it is how a Chinese piece counts (only where its
# word is missing), not a weight fitted to data; run as a rule of its own it is 0.542 against
# 0.582 (bench/RESULTS.md, "A query's question, and a Chinese word's pieces").
LEXICAL_RULES: dict[str, tuple[object, tuple]] = {
    "session_weight": (0.0, (0.0, 0.3, 0.5, 0.7)),
    "session_prior": (0.0, (0.0, 0.3, 0.5, 1.0)),  # the session scaling the item's own score
    "neighbour_weight": (0.0, (0.0, 0.15, 0.3, 0.45)),
    "feedback_weight": (0.0, (0.0, 0.3, 0.6, 0.9)),
    "cjk_char_weight": (1.0, (1.0, 0.15, 0.3, 0.45)),
    "answer_type_weight": (0.0, (0.0, 0.1, 0.2, 0.3, 0.5)),
    "aside_weight": (1.0, (1.0, 0.1, 0.3, 0.5)),
    "date_weight": (0.0, (0.0, 0.5, 1.0, 2.0)),  # past 2 a tripled score acts nearly as a filter
}
# per fusion rule (reported side by side): the weight of the item vectors, the share of their
# in-context vectors in the cosine, then for rrf its k (the "off" value of rrf_k is the default,
# 60: the choice is kept only if it beats it)
CONTEXT_SHARES = (0.0, 0.3, 0.5, 0.7, 1.0)
FUSED_NEIGHBOURS = (0.0, 0.1, 0.2, 0.3)
SEMANTIC_RULES: dict[str, dict[str, tuple[object, tuple]]] = {
    "rrf": {"semantic_weight": (0.0, (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5)),
            "semantic_context": (0.0, CONTEXT_SHARES),
            "fused_neighbour_weight": (0.0, FUSED_NEIGHBOURS),
            "rrf_k": (60, (5, 10, 20, 30, 60, 100))},
    "score": {"semantic_weight": (0.0, (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0)),
              "semantic_context": (0.0, CONTEXT_SHARES),
              "fused_neighbour_weight": (0.0, FUSED_NEIGHBOURS)},
}
# a rule that changes what the others' values mean (score fusion's rescaling of the cosines sets the
# scale of its weight): not one more coordinate of the ascent, where a new scale is tried at the
# weight chosen for the old one and loses, but chosen outside it, each value with the other rules
# ascended under it (kept as choose_rule keeps a value: a better training mean, no training fold
# hurt, as choose_rule judges it, against the "off" value)
OUTER_RULES: dict[str, dict[str, tuple[object, tuple]]] = {
    "score": {"semantic_normalisation": ("minmax", ("zscore",))},
}


# each memory's fold: a LoCoMo conversation is its own, a MemDaily pool ("qa_type/scenario") its scenario's,
# a LongMemEval question ("NNN/question_id", its place in the file) a run of LONGMEMEVAL_RUN of them
LONGMEMEVAL_RUN = 25
FOLD_OF = {"locomo": lambda name: name, "memdaily": lambda name: name.split("/")[1],
           "longmemeval": lambda name: f"lme-{int(name.split('/')[0]) // LONGMEMEVAL_RUN + 1}"}
DATASET_TITLES = {"locomo": "LoCoMo", "memdaily": "MemDaily", "longmemeval": "LongMemEval"}


class Unit:
    """One memory folder: its questions and the fold it belongs to."""

    def __init__(self, name: str, fold: str, dataset: str, root: Path, questions: list[dict]):
        self.name, self.fold, self.dataset, self.root, self.questions = name, fold, dataset, root, questions
        self.searcher: Searcher | None = None

    def open(self) -> Searcher:
        if self.searcher is None:
            self.searcher = Searcher(Layout(self.root), refresh=False)
            memoize_lexical_stage(self.searcher)
        return self.searcher


def build_units(sets, dataset: str, fold_of, workdir: Path, import_memory) -> list[Unit]:
    """The memories, imported once (a memory of a kept work folder is reused: --workdir).
    `import_memory` None: reuse only; a memory missing is an error, and nothing is removed."""
    units = []
    for number, (name, docs, questions) in enumerate(sets):
        folder = workdir / f"{dataset}-{number}"
        imported = folder / "memory" / "archive.jsonl"  # L6: what `memctl import` wrote
        if imported.is_file() and imported.stat().st_size:
            root = imported.parent
        elif import_memory is None:
            raise SystemExit(f"{folder}: no memory built here; run bench/retrieval.py --cv --only {dataset} "
                             f"--workdir {workdir} first")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            root = import_memory(docs, folder)
        units.append(Unit(name, fold_of(name), dataset, root, questions))
        print(f"  built {name}: {len(docs)} items", file=sys.stderr)
    return units


def embed(units: list[Unit], embed_memory) -> bool:
    """Item vectors in every memory (`memctl index embed`); False without the [semantic] extra."""
    if embed_memory is None:
        return False
    for unit in units:
        if not embed_memory(unit.root):
            print("  no item vectors: the [semantic] extra is not installed (or its model failed)", file=sys.stderr)
            return False
    return True


class QueryMemo:
    """The encoder with its query vectors kept: every variant asks the same queries of the same
    model, so each is embedded once per run instead of once per variant."""

    def __init__(self, encoder):
        self.encoder, self.vectors = encoder, {}

    def __getattr__(self, name):
        return getattr(self.encoder, name)

    def encode_query(self, text: str):
        if text not in self.vectors:
            self.vectors[text] = self.encoder.encode_query(text)
        return self.vectors[text]


def memoize_query_vectors() -> None:
    load, loaded = semantic_signal._encoder, {}

    def encoder(ranking, batch_pass: bool = False):
        key = (ranking.semantic_option("model"), batch_pass)
        if key not in loaded:
            loaded[key] = QueryMemo(load(ranking, batch_pass))
        return loaded[key]

    semantic_signal._encoder = encoder


FUSION_FIELDS = {"fusion": "none", "semantic_weight": 0.0, "rrf_k": 60, "semantic_context": 0.0,
                 "fused_neighbour_weight": 0.0, "semantic_normalisation": "minmax"}


def memoize_lexical_stage(searcher: Searcher) -> None:
    """The fusion variants differ after the lexical stage alone (memctl.recall.search.Searcher:
    lexical candidates, then SemanticSignal.fuse): its candidates are computed once per query
    and lexical ranking, and each variant fuses copies of them (fuse rescores hits in place).
    Only the last MEMO_RANKINGS lexical rankings' are kept: a lexical cross-validation scores
    each ranking once, and keeping every one of them filled 13 GB."""
    import copy
    from collections import OrderedDict

    lexical, memo = searcher._lexical, OrderedDict()

    def cached(terms, filters, k, asked=NOTHING_ASKED):
        lexical_ranking = searcher.ranking._replace(**FUSION_FIELDS)
        hits_of = memo.setdefault(lexical_ranking, {})
        memo.move_to_end(lexical_ranking)
        while len(memo) > MEMO_RANKINGS:
            memo.popitem(last=False)
        key = (tuple(terms), k, asked)
        if key not in hits_of:
            hits_of[key] = lexical(terms, filters, k, asked)
        return [copy.copy(hit) for hit in hits_of[key]]

    searcher._lexical = cached


MEMO_RANKINGS = 4


class FoldScores:
    """What the selection reads of the folds: each one's R@10 under a ranking (`fold_value`), and
    whether a variant hurts a fold against a reference. Knowing fold means alone, a fall of more
    than TOLERANCE hurts."""

    def fold_value(self, ranking: Ranking, fold: str) -> float:
        raise NotImplementedError

    def hurts(self, variant: Ranking, reference: Ranking, fold: str) -> bool:
        return self.fold_value(variant, fold) < self.fold_value(reference, fold) - TOLERANCE


def significant_fall(variant: list[float], reference: list[float]) -> bool:
    """Whether the per-question differences (paired) fall by more than TOLERANCE on average and
    by more than Z_HURT standard errors of their mean."""
    diffs = [v - r for v, r in zip(variant, reference)]
    if not diffs:
        return False
    mean = sum(diffs) / len(diffs)
    if mean >= -TOLERANCE:
        return False
    variance = sum((d - mean) ** 2 for d in diffs) / max(len(diffs) - 1, 1)
    error = (variance / len(diffs)) ** 0.5
    return error == 0 or mean / error < -Z_HURT


class Scores(FoldScores):
    """Per-question R@10 of each ranking variant, computed once per variant; `paired`: a fold
    is hurt only by a significant fall (`significant_fall`), else by any fall over TOLERANCE."""

    def __init__(self, units: list[Unit], paired: bool = True, kept: Path | None = None):
        """`kept`: a JSON Lines file of the variants scored before over the same memories and
        questions (read first, appended to), so that a run stopped halfway resumes there."""
        self.units, self.paired = units, paired
        self.folds = list(dict.fromkeys(u.fold for u in units))
        self.cache: dict[Ranking, dict[str, list[float]]] = {}
        self.kept = kept
        self.loaded = read_kept(kept, K) if kept else {}

    def recalls(self, ranking: Ranking) -> dict[str, list[float]]:
        """fold -> each question's R@10, in the folds' order."""
        if ranking not in self.cache and repr(ranking) in self.loaded:
            self.cache[ranking] = self.loaded[repr(ranking)]
        if ranking not in self.cache:
            import time

            started = time.monotonic()
            per_fold: dict[str, list[float]] = defaultdict(list)
            for unit in self.units:
                searcher = unit.open()
                searcher.ranking = ranking
                for q in unit.questions:
                    hits = searcher.search(SearchRequest(q["query"], k=K, layers=("L6",)))
                    found = {h.item_id for h in hits}
                    per_fold[unit.fold].append(len(found & q["relevant"]) / len(q["relevant"]))
            self.cache[ranking] = dict(per_fold)
            print(f"  variant {len(self.cache)} scored in {time.monotonic() - started:.0f}s", file=sys.stderr)
            if self.kept:
                import json

                with open(self.kept, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"k": K, "ranking": repr(ranking), "recalls": per_fold}) + "\n")
        return self.cache[ranking]

    def of(self, ranking: Ranking) -> dict[str, tuple[float, int]]:
        """fold -> (sum of R@10, questions)."""
        return {fold: (sum(values), len(values)) for fold, values in self.recalls(ranking).items()}

    def hurts(self, variant: Ranking, reference: Ranking, fold: str) -> bool:
        if not self.paired:
            return super().hurts(variant, reference, fold)
        return significant_fall(self.recalls(variant)[fold], self.recalls(reference)[fold])

    def fold_value(self, ranking: Ranking, fold: str) -> float:
        s, n = self.of(ranking)[fold]
        return s / n if n else 0.0

    def pooled(self, pairs: list[tuple[str, Ranking]]) -> float:
        """Question-weighted R@10 of each fold under its own ranking."""
        total = count = 0.0
        for fold, ranking in pairs:
            s, n = self.of(ranking)[fold]
            total, count = total + s, count + n
        return total / count if count else 0.0


def read_kept(path: Path, k: int) -> dict[str, dict[str, list[float]]]:
    """repr(ranking) -> fold -> recalls, of the variants a file of Scores(kept=) holds at R@k."""
    import json

    if not path.is_file():
        return {}
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by a kill
            continue
        if row.get("k") == k:
            found[row["ranking"]] = row["recalls"]
    return found


def choose_rule(scores: Scores, rule: str, off, values: tuple, train: list[str], chosen: Ranking) -> Ranking:
    """The best value of one rule given the others' values in `chosen` (see the docstring); a tie
    goes to "off", then to the earlier value."""
    without = chosen._replace(**{rule: off})
    best, best_mean = without, sum(scores.fold_value(without, f) for f in train) / len(train)
    for value in values:
        variant = chosen._replace(**{rule: value})
        mean = sum(scores.fold_value(variant, fold) for fold in train) / len(train)
        if mean > best_mean + 1e-12 and not any(scores.hurts(variant, without, f) for f in train):
            best, best_mean = variant, mean
    return best


def ascend(scores: Scores, rules: dict, train: list[str], start: Ranking, passes: int) -> list[Ranking]:
    """Coordinate ascent on the training folds: the ranking after each pass, the last one chosen."""
    history, chosen = [], start
    for _ in range(passes):
        before = chosen
        for rule, (off, values) in rules.items():
            chosen = choose_rule(scores, rule, off, values, train, chosen)
        history.append(chosen)
        if chosen == before:
            break
    return history


def ascend_outer(scores: Scores, rules: dict, outer: dict, train: list[str], start: Ranking,
                 passes: int) -> list[Ranking]:
    """The ascent under each value of the outer rule (at most one: OUTER_RULES); the history of
    the value kept."""
    if not outer:
        return ascend(scores, rules, train, start, passes)
    (rule, (off, values)), = outer.items()
    kept = ascend(scores, rules, train, start._replace(**{rule: off}), passes)
    reference = kept[-1]
    best_mean = sum(scores.fold_value(reference, f) for f in train) / len(train)
    for value in values:
        history = ascend(scores, rules, train, start._replace(**{rule: value}), passes)
        mean = sum(scores.fold_value(history[-1], fold) for fold in train) / len(train)
        if mean > best_mean + 1e-12 and not any(scores.hurts(history[-1], reference, f) for f in train):
            kept, best_mean = history, mean
    return kept


def select(scores: Scores, rules: dict, train: list[str], start: Ranking, passes: int = PASSES,
           outer: dict | None = None) -> Ranking:
    return ascend_outer(scores, rules, outer or {}, train, start, passes)[-1]


def cross_validate(scores: Scores, rules: dict, start: Ranking, passes: int,
                   outer: dict | None = None) -> dict[str, list[Ranking]]:
    """held-out fold -> the ranking after each pass of the ascent without it (the last: chosen)."""
    return {fold: ascend_outer(scores, rules, outer or {}, [f for f in scores.folds if f != fold], start, passes)
            for fold in scores.folds}


def report_passes(scores: Scores, rules: dict, histories: dict[str, list[Ranking]], datasets: dict[str, list[str]]) -> None:
    """Per held-out fold, what each pass chose; the first pass alone is the one-pass selection."""
    print("coordinate ascent, per held-out fold (R@10 of the held-out fold after each pass):")
    for fold, history in histories.items():
        steps = "; ".join(f"pass {i + 1}: {describe(r, rules)} -> {scores.fold_value(r, fold):.3f}"
                          for i, r in enumerate(history))
        print(f"  {fold}: {steps}")
    for dataset, folds in datasets.items():
        if folds:
            one_pass = scores.pooled([(f, histories[f][0]) for f in folds])
            ascent = scores.pooled([(f, histories[f][-1]) for f in folds])
            print(f"{dataset}: cv R@{K} one pass {one_pass:.3f}, coordinate ascent {ascent:.3f} "
                  f"(at most {max(len(histories[f]) for f in folds)} passes)")


def describe(ranking: Ranking, rules: dict) -> str:
    return " ".join(f"{rule}={getattr(ranking, rule)}" for rule in rules)


def report(title: str, scores: Scores, rules: dict, start: Ranking, datasets: dict[str, list[str]],
           passes: int = PASSES, outer: dict | None = None) -> Ranking:
    """Print the folds, the choice made without each, its ablations; return the all-folds choice."""
    histories = cross_validate(scores, rules, start, passes, outer)
    chosen = {fold: history[-1] for fold, history in histories.items()}
    final = select(scores, rules, scores.folds, start, passes, outer)
    rules = {**rules, **(outer or {})}  # reported like the others from here on
    print(f"\n{title}: cross-validated R@{K} (each fold scored with the rules chosen without it)")
    print(f"{'fold':<14}{'n':>5}  {'defaults':>9}{'cv':>9}  " + "".join(f"{'-' + r[:10]:>12}" for r in rules)
          + "   chosen without the fold")
    for fold in scores.folds:
        ranking = chosen[fold]
        n = scores.of(ranking)[fold][1]
        ablations = "".join(f"{scores.fold_value(ranking._replace(**{r: off}), fold):>12.3f}"
                            for r, (off, _) in rules.items())
        print(f"{fold:<14}{n:>5}  {scores.fold_value(start, fold):>9.3f}{scores.fold_value(ranking, fold):>9.3f}  "
              f"{ablations}   {describe(ranking, rules)}")
    for dataset, folds in datasets.items():
        if not folds:
            continue
        cv = scores.pooled([(f, chosen[f]) for f in folds])
        defaults = scores.pooled([(f, start) for f in folds])
        worst = min(folds, key=lambda f: scores.fold_value(chosen[f], f))
        print(f"{dataset}: cv R@{K} {cv:.3f} (defaults {defaults:.3f}); worst fold {worst} "
              f"{scores.fold_value(chosen[worst], worst):.3f}")
    print("per rule, R@10 with minus without it (all-folds choice), per fold:")
    for rule, (off, _) in rules.items():
        deltas = " ".join(f"{f}:{scores.fold_value(final, f) - scores.fold_value(final._replace(**{rule: off}), f):+.3f}"
                          for f in scores.folds)
        print(f"  {rule}={getattr(final, rule)}: {deltas}")
    print(f"chosen on all folds: {describe(final, rules)}")
    report_passes(scores, rules, histories, datasets)
    return final


def leave_one_family_out(scores: Scores, rules: dict, start: Ranking, datasets: dict[str, list[str]],
                         passes: int = PASSES, outer: dict | None = None) -> dict[str, Ranking]:
    """dataset -> the rules chosen on the other datasets' folds alone (issue #33: a rule fit to one
    dataset's question style passes every fold of that dataset, so each is also held out whole)."""
    chosen = {}
    for dataset, folds in datasets.items():
        train = [f for f in scores.folds if f not in folds]
        if folds and train:
            chosen[dataset] = select(scores, rules, train, start, passes, outer)
    return chosen


def report_families(title: str, scores: Scores, rules: dict, start: Ranking, datasets: dict[str, list[str]],
                    passes: int = PASSES, outer: dict | None = None) -> dict[str, Ranking]:
    """Print each dataset scored with the rules chosen without it, and what each rule of `start`
    adds on each dataset (with minus without it; `+`/`-` a rise or fall beyond noise, the paired
    test of significant_fall): a rule earns its place by a rise beyond noise on at least two."""
    chosen = leave_one_family_out(scores, rules, start, datasets, passes, outer)
    print(f"\n{title}: leave one dataset out (each scored with the rules chosen on the others' folds)")
    for dataset, ranking in chosen.items():
        folds = datasets[dataset]
        per_fold = " ".join(f"{f} {scores.fold_value(ranking, f):.3f}" for f in folds)
        print(f"{dataset}: R@{K} {scores.pooled([(f, ranking) for f in folds]):.3f} (defaults "
              f"{scores.pooled([(f, start) for f in folds]):.3f}; {per_fold})   {describe(ranking, rules)}")
    print(f"per rule at the defaults, R@{K} with minus without it, per dataset (+/-: beyond noise):")
    for rule, (off, _) in rules.items():
        without = start._replace(**{rule: off})
        cells = [f"{dataset} {rule_effect(scores, start, without, folds)}" for dataset, folds in datasets.items() if folds]
        print(f"  {rule}={getattr(start, rule)}: " + ("off at the defaults" if without == start else ", ".join(cells)))
    return chosen


def rule_effect(scores: Scores, ranking: Ranking, without: Ranking, folds: list[str]) -> str:
    """R@K with minus without, pooled over the folds, marked + or - when beyond noise."""
    on = [v for f in folds for v in scores.recalls(ranking)[f]]
    off = [v for f in folds for v in scores.recalls(without)[f]]
    mark = "-" if significant_fall(on, off) else "+" if significant_fall(off, on) else ""
    return f"{(sum(on) - sum(off)) / max(len(on), 1):+.3f}{mark}"


def nested_report(title: str, scores: Scores, rules: dict, starts: dict[str, Ranking],
                  datasets: dict[str, list[str]], passes: int = PASSES, outer: dict | None = None) -> None:
    """Fully held out: each fold's lexical rules as chosen without it (`starts`, from a lexical
    --cv run), then the fusion chosen without it on top of them."""
    print(f"\n{title}: nested R@{K} (lexical rules and fusion both chosen without the fold)")
    chosen = {}
    for fold in scores.folds:
        chosen[fold] = select(scores, rules, [f for f in scores.folds if f != fold], starts[fold], passes, outer)
        off = chosen[fold]._replace(**{r: v for r, (v, _) in rules.items()})
        print(f"{fold:<14}lexical {scores.fold_value(off, fold):.3f}  fused {scores.fold_value(chosen[fold], fold):.3f}"
              f"   {describe(chosen[fold], rules)}")
    for dataset, folds in datasets.items():
        if folds:
            lexical = scores.pooled([(f, chosen[f]._replace(**{r: v for r, (v, _) in rules.items()})) for f in folds])
            print(f"{dataset}: nested lexical {lexical:.3f}, fused {scores.pooled([(f, chosen[f]) for f in folds]):.3f}")


def on_or_off(rules: dict, start: Ranking) -> dict:
    """Each rule's grid cut to its "off" value and its value in `start` (the defaults): whether
    each rule earns its place, at a tenth of the grid's cost (`bench/retrieval.py --cv-grid on-off`)."""
    return {rule: (off, tuple(dict.fromkeys((off, getattr(start, rule))))) for rule, (off, _) in rules.items()}


def build_and_validate(sets: dict[str, list], import_memory, embed_memory, keep: bool, model: str = "",
                       lexical_cv: bool = True, workdir: Path | None = None,
                       lexical_choices: dict[str, dict] | None = None, fusions: tuple[str, ...] = ("rrf", "score"),
                       passes: int = PASSES, paired: bool = True, kept: Path | None = None,
                       on_off: bool = False):
    """Build every memory once (`sets`: dataset -> its sets, the datasets of FOLD_OF), cross-validate
    the lexical rules, then (with item vectors) the fusion (`model`: the memories' [semantic] model;
    with one that reads Chinese, the MemDaily folds are fused and cross-validated too); returns the
    sets with their memories, as dataset -> [(name, docs, questions, root)], and whether they have
    vectors. The memories are removed at exit unless `keep`."""
    import atexit

    if workdir is not None:
        keep = True
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="memctl-cv-"))
    if keep:
        print(f"memories kept in {workdir}", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    units = [unit for dataset, family_sets in sets.items()
             for unit in build_units(family_sets, dataset, FOLD_OF[dataset], workdir, import_memory)]
    semantic = embed(units, embed_memory)
    datasets = {DATASET_TITLES[dataset]: list(dict.fromkeys(u.fold for u in units if u.dataset == dataset))
                for dataset in sets}
    scores = Scores(units, paired, kept)
    memoize_query_vectors()
    start = Ranking(fusion="none", semantic=tuple({**DEFAULTS["semantic"], "model": model}.items()))
    try:
        rules = on_or_off(LEXICAL_RULES, start) if on_off else LEXICAL_RULES
        if lexical_cv and sum(1 for folds in datasets.values() if folds) > 1:  # first: the cheaper of the two
            report_families("Lexical rules", scores, rules, start, datasets, passes)
        lexical = report("Lexical rules", scores, rules, start, datasets, passes) if lexical_cv else start
        # an English-only model leaves Chinese queries unfused: then only the English folds move
        if semantic_signal.reads_chinese(start):
            fused, fused_sets = scores, datasets
        else:
            fused = Scores([u for u in units if u.dataset != "memdaily"], paired)
            fused_sets = {title: folds for title, folds in datasets.items() if title != "MemDaily"}
        for fusion in fusions if semantic else ():
            outer = OUTER_RULES.get(fusion, {})
            report(f"Semantic fusion {fusion!r} (the lexical rules as chosen above; {', '.join(d for d, f in fused_sets.items() if f)} folds)",
                   fused, SEMANTIC_RULES[fusion], lexical._replace(fusion=fusion), fused_sets, passes, outer)
            if lexical_choices:
                starts = {f: lexical._replace(fusion=fusion, **lexical_choices.get(f, {})) for f in fused.folds}
                nested_report(f"Semantic fusion {fusion!r}", fused, SEMANTIC_RULES[fusion], starts, fused_sets, passes,
                              outer)
    finally:
        for unit in units:
            if unit.searcher is not None:
                unit.searcher.close()
    return with_memories(sets, units), semantic


def with_memories(sets: dict[str, list], units: list[Unit]) -> dict[str, list]:
    """dataset -> [(name, docs, questions, root)]: each dataset's sets beside its own units (a zip
    over one iterator of all the units took one unit too many at the end of each dataset, so the
    next one's memories met the wrong documents and their BM25 column read 0.000)."""
    return {dataset: [(unit.name, docs, unit.questions, unit.root)
                      for unit, (_, docs, _) in zip([u for u in units if u.dataset == dataset], family_sets)]
            for dataset, family_sets in sets.items()}
