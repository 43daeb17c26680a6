"""The dream pass (design.md §7): consolidate, archive, forget and merge L5 entries.

`plan()` is a pure function of (entries, refs, settings, now) returning a `Plan`: every
change with its reason, and for each untouched entry the rule that kept it (restic's
ApplyPolicy). `run()` plans without the lock, checks the guard rail, then applies the plan in
short locked steps: each step re-reads L5, applies only the changes whose entries are still
byte-for-byte what was planned, and writes L6, the audit log and L5. Changes that no longer
apply (a `remember` touched their entries meanwhile) are re-planned from a fresh read.

Every change is a line in `dream_log.jsonl`: run id, op, ids, before, after, reason, and the
position of each removed entry, which is what lets `undo()` put L5 back byte for byte and
drop exactly the L6 lines the run appended.

Reference counts: `.memctl/refs.log` lines (`<ISO time>\\t<entry id>`, see entries.py) after
the offset kept in `.memctl/refs.offset` are folded into `refs`/`last_ref`; the whole log
gives the counts inside the archive and forget windows.

Consolidation scales by blocking: each text's rarest tokens (Latin words, CJK bigrams) name
candidate buckets, and only members of one bucket are compared, by rapidfuzz in C
(`process.extract` with a score cutoff) — never all pairs in Python.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator, Sequence

from rapidfuzz import fuzz, process

from memctl.core.clock import iso
from memctl.core.config import Layout, Settings
from memctl.longterm.entries import (
    Entry,
    Row,
    Snapshot,
    append_entries,
    entry_line,
    new_id,
    read_snapshot,
    row_for,
    write_rows,
)
from memctl.core.errors import LockBusy, MemctlError, NotFound, UsageError
from memctl.core.fsutil import (WriterLock, append_durably, atomic_write_text, ensure_private_dir,
                                 open_lock_file, try_lock)
from memctl.longterm.policies import TypePolicy, features, known_types, lifespan_of, merge_key, normalize
from memctl.longterm.refs import read_refs

OPS = ("consolidate", "archive", "forget", "merge")
STEP_CHANGES = 1000  # changes applied per locked step (at least): keeps each lock hold short
MAX_STEPS = 6
MAX_REPLANS = 2
DEFAULT_STEP_WAIT = 60.0
STEP_POLL = 0.002  # flock is not fair: poll often, or a stream of remembers starves the dream
HISTORY_SESSIONS = 50  # "recent" L4 history: the last N session blocks
MAX_BUCKET = 400
OVERLAP = 0.6  # token overlap assumed between near-duplicates, for the prefix length
MAX_PREFIX = 4
WINDOW = 64  # neighbours compared inside an oversized bucket, by sorted length
REASONS = {"consolidate": "consolidated", "archive": "archived", "forget": "forgotten", "merge": "merged"}


class GuardRail(MemctlError):
    """A run would remove more of L5 than the configured share."""


@dataclass
class DreamOptions:
    ops: tuple[str, ...] = OPS
    force: bool = False
    summarizer: str | None = None
    lock_wait: float = 0.0


@dataclass
class Refs:
    """What the reference log says: new references to fold, and counts inside the windows."""

    new: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (count, last time)
    recent: dict[str, list[str]] = field(default_factory=dict)  # id -> ISO times (whole log)
    offset_before: int = 0
    offset_after: int = 0

    def count_since(self, entry_id: str, since: datetime) -> int:
        return sum(1 for t in self.recent.get(entry_id, ()) if _parse_time(t) and _parse_time(t) >= since)


@dataclass
class Change:
    op: str  # consolidate | archive | forget | merge | refs
    before: list[Entry]  # entries as they are in L5 now (removed, or updated in place)
    after: list[Entry]  # new entries, or the updated versions (same ids as `before`)
    reason: str  # why, for people: "superseded by m1234", "3× verified", ...

    @property
    def removed(self) -> list[Entry]:
        after = {e.id for e in self.after}
        return [e for e in self.before if e.id not in after]

    @property
    def added(self) -> list[Entry]:
        before = {e.id for e in self.before}
        return [e for e in self.after if e.id not in before]

    @property
    def net_removed(self) -> int:
        return len(self.removed) - len(self.added)

    def describe(self) -> list[str]:
        if self.op == "refs":
            return [f"would fold references: {len(self.after)} entries ({self.reason})"]
        if self.added:
            new = self.added[0]
            head = [f"would {self.op}: {len(self.removed)} entries -> new entry {new.id} ({self.reason}): {_short(new.text)}"]
            return head + [f"  from {e.id}: {_short(e.text)}" for e in self.removed]
        return [f"would {self.op}: {e.id} ({self.reason}): {_short(e.text)}" for e in self.removed]

    def to_dict(self) -> dict:
        return {"op": self.op, "reason": self.reason, "remove": [e.id for e in self.removed],
                "add": [e.to_dict() for e in self.added],
                "update": [e.id for e in self.after if e.id in {b.id for b in self.before}]}


@dataclass
class Plan:
    now: str
    l5_count: int
    changes: list[Change]
    kept: list[tuple[str, str]]  # (id, the rule that kept it)
    refs: Refs = field(default_factory=Refs)

    @property
    def net_removed(self) -> int:
        return sum(c.net_removed for c in self.changes)

    def counts(self) -> dict[str, int]:
        counts: Counter = Counter()
        for change in self.changes:
            counts[change.op] += len(change.removed) if change.op != "refs" else len(change.after)
        return dict(counts)

    def totals_text(self) -> str:
        counts = self.counts()
        ops = ", ".join(f"{op} {counts.get(op, 0)}" for op in OPS)
        return (f"plan: {ops}; L5 {self.l5_count} -> {self.l5_count - self.net_removed} "
                f"({len(self.kept)} kept)")

    def to_dict(self) -> dict:
        return {"now": self.now, "l5_entries": self.l5_count, "counts": self.counts(),
                "net_removed": self.net_removed, "changes": [c.to_dict() for c in self.changes],
                "kept": len(self.kept)}


@dataclass
class DreamReport:
    run: str
    counts: dict[str, int]
    skipped: int
    replans: int
    steps: int
    l5_before: int
    l5_after: int
    longest_step: float = 0.0  # seconds the writer lock was held by the longest step

    def summary(self) -> str:
        ops = ", ".join(f"{op} {self.counts.get(op, 0)}" for op in OPS)
        extra = f"; {self.skipped} changes skipped (L5 changed underneath)" if self.skipped else ""
        return f"dream {self.run}: {ops}; L5 {self.l5_before} -> {self.l5_after}{extra}"

    def to_dict(self) -> dict:
        return {"run": self.run, "counts": self.counts, "skipped": self.skipped, "replans": self.replans,
                "steps": self.steps, "longest_step_s": round(self.longest_step, 3),
                "l5_before": self.l5_before, "l5_after": self.l5_after}


@dataclass
class UndoReport:
    run: str
    of: str
    undone: int
    conflicts: list[str]

    def to_dict(self) -> dict:
        return {"run": self.run, "undid": self.of, "changes": self.undone, "conflicts": self.conflicts}


def parse_only(text: str | None) -> tuple[str, ...]:
    if not text:
        return OPS
    ops = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise UsageError(f"--only: unknown operation {', '.join(bad)}; choose from {', '.join(OPS)}")
    return ops


# --- time helpers


def _parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is not None:
        value = value.astimezone().replace(tzinfo=None)
    return value


def _last_written(entry: Entry) -> datetime | None:
    stamps = [t for t in (_parse_time(entry.updated), _parse_time(entry.created), _parse_time(entry.date)) if t]
    return max(stamps) if stamps else None


# --- references


def read_offset(layout: Layout) -> int:
    try:
        return int((layout.state_dir / "refs.offset").read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def write_offset(layout: Layout, offset: int) -> None:
    ensure_private_dir(layout.state_dir)
    atomic_write_text(layout.state_dir / "refs.offset", f"{offset}\n")


def load_refs(layout: Layout) -> Refs:
    offset = read_offset(layout)
    everything, end = read_refs(layout.refs_log, 0)
    refs = Refs(offset_before=offset, offset_after=end)
    for when, entry_id in everything:
        refs.recent.setdefault(entry_id, []).append(when)
    fresh, end2 = read_refs(layout.refs_log, offset)
    refs.offset_after = end2
    counts: dict[str, int] = Counter()
    last: dict[str, str] = {}
    for when, entry_id in fresh:
        counts[entry_id] += 1
        if when > last.get(entry_id, ""):
            last[entry_id] = when
    refs.new = {i: (n, last[i]) for i, n in counts.items()}
    return refs


def fold(entry: Entry, refs: Refs) -> Entry:
    """The entry with the new references added (pure; the same result in plan and apply)."""
    found = refs.new.get(entry.id)
    if not found:
        return entry
    count, last = found
    return replace(entry, refs=entry.refs + count, last_ref=max(entry.last_ref or "", last), extra=dict(entry.extra))


# --- the planner


def plan(entries: Sequence[Entry], refs: Refs, settings: Settings, now: datetime,
         ops: Iterable[str] = OPS, history: Sequence[tuple[str, str]] = (),
         summarizer: str | None = None) -> Plan:
    """Every change one dream run would make, with its reason. Pure: no files, no clock."""
    ops = tuple(ops)
    cfg = settings.values["dream"]
    types = known_types(settings)
    changes: list[Change] = []
    folded = [fold(e, refs) for e in entries]
    updated = [(b, a) for b, a in zip(entries, folded) if a is not b]
    if updated:
        changes.append(Change("refs", [b for b, _ in updated], [a for _, a in updated],
                              f"{sum(refs.new[a.id][0] for _, a in updated)} new references"))
    taken: set[str] = set()
    kept: dict[str, str] = {}
    stamp = iso(now)

    def take(change: Change) -> None:
        changes.append(change)
        taken.update(e.id for e in change.before)

    if "forget" in ops:
        for change in _plan_superseded(folded, types):
            if not taken.intersection(e.id for e in change.before):
                take(change)
    if "consolidate" in ops:
        appendable = [e for e in folded if e.id not in taken and not (e.type in types and types[e.type].merges)]
        for change in _plan_consolidate(appendable, history, cfg, stamp):
            take(change)
    archive_cut = now - timedelta(days=float(cfg["archive_after_days"]))
    forget_cut = now - timedelta(days=float(cfg["forget_after_days"]))
    for entry in folded:
        if entry.id in taken:
            continue
        written = _last_written(entry)
        if "archive" in ops and lifespan_of(types, entry.type) == "contextual":
            recent = refs.count_since(entry.id, archive_cut) or _ref_after(entry, archive_cut)
            if written is not None and written < archive_cut and recent == 0:
                take(Change("archive", [entry], [], f"contextual, no reference in {cfg['archive_after_days']} days"))
                continue
        if "forget" in ops and written is not None and written < forget_cut:
            recent = max(refs.count_since(entry.id, forget_cut), _ref_after(entry, forget_cut))
            if recent < int(cfg["forget_min_refs"]):
                take(Change("forget", [entry], [],
                            f"{recent} references in {cfg['forget_after_days']} days (< {cfg['forget_min_refs']})"))
                continue
        kept[entry.id] = _keep_rule(entry, written, archive_cut, types)
    if "merge" in ops:
        for change in _plan_merge([e for e in folded if e.id not in taken], cfg, stamp, summarizer):
            take(change)
            for e in change.before:
                kept.pop(e.id, None)
    return Plan(stamp, len(entries), changes, [(i, r) for i, r in kept.items() if i not in taken], refs)


def _ref_after(entry: Entry, cut: datetime) -> int:
    last = _parse_time(entry.last_ref)
    return 1 if last is not None and last >= cut else 0


def _keep_rule(entry: Entry, written: datetime | None, archive_cut: datetime, types) -> str:
    if written is None:
        return "no date"
    if written >= archive_cut:
        return f"written {written.date()}"
    return f"{entry.refs} references, last {entry.last_ref[:10] or 'never'}; lifespan {lifespan_of(types, entry.type)}"


def _plan_superseded(entries: Sequence[Entry], types: dict[str, TypePolicy]) -> Iterator[Change]:
    """Forget entries a newer one supersedes or contradicts, and older versions of a merge key."""
    by_id = {e.id: e for e in entries}
    for entry in entries:
        contradicts = entry.extra.get("contradicts") or []
        for word, targets in (("superseded", entry.supersedes),
                              ("contradicted", contradicts if isinstance(contradicts, list) else [contradicts])):
            for target in targets:
                if target in by_id and target != entry.id:
                    yield Change("forget", [by_id[target]], [], f"{word} by {entry.id}")
    groups: dict[tuple[str, str], list[tuple[int, Entry]]] = defaultdict(list)
    for order, entry in enumerate(entries):
        policy = types.get(entry.type)
        if entry.topic and policy is not None and policy.merges:
            groups[merge_key(entry)].append((order, entry))
    for members in groups.values():
        if len(members) < 2:
            continue
        _, keep = max(members, key=lambda m: (m[1].updated or m[1].created or "", m[0]))
        for _, entry in members:
            if entry is not keep:
                yield Change("forget", [entry], [], f"superseded by newer {keep.id}")


def _plan_merge(entries: Sequence[Entry], cfg: dict, stamp: str, summarizer: str | None) -> Iterator[Change]:
    floor = float(cfg["merge_min_confidence"])
    groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry.topic and _number(entry.confidence) >= floor:
            groups[merge_key(entry)].append(entry)
    for (type_name, _), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda e: (e.created or "", e.id))
        texts = list(dict.fromkeys(e.text.strip() for e in members))
        text = _summarize(summarizer, texts) if summarizer else "; ".join(texts)
        merged = Entry(
            id=new_id(), text=text, type=type_name, topic=members[-1].topic,
            confidence=max(_number(e.confidence) for e in members),
            refs=sum(e.refs for e in members), last_ref=max((e.last_ref for e in members), default=""),
            created=min((e.created for e in members if e.created), default=stamp), updated=stamp,
            source="; ".join(dict.fromkeys(e.source for e in members if e.source)),
            seen=sum(e.seen for e in members), merged_from=[e.id for e in members],
        )
        yield Change("merge", list(members), [merged],
                     f"{len(members)} {type_name} entries on {members[-1].topic!r} with confidence >= {floor:g}")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _summarize(command: str, texts: list[str]) -> str:
    """Pipe the texts (one a line) through an external command; fall back to joining them."""
    try:
        done = subprocess.run(shlex.split(command), input="\n".join(texts), capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "; ".join(texts)
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else "; ".join(texts)


# --- consolidation: blocking + rapidfuzz

def similar_groups(texts: Sequence[str], cutoff: float) -> list[list[int]]:
    """Groups (index lists, ≥ 2) of texts whose word-sorted edit similarity to the group's
    centre reaches `cutoff`. Candidates come from blocking only: texts with the same numbers
    that share a pair of their rarest shared tokens (prefix filtering)."""
    norms = [normalize(t) for t in texts]
    keys = [" ".join(sorted(n.split())) for n in norms]
    feats = [features(n) for n in norms]
    df: Counter = Counter()
    for ts, _ in feats:
        df.update(ts)
    # a token no other text has cannot find a duplicate; rank the shared ones, rarest first
    shared = sorted((t for t, n in df.items() if n > 1), key=lambda t: (df[t], t))
    rank = {t: r for r, t in enumerate(shared)}
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for index, (ts, nums) in enumerate(feats):
        # prefix filtering: texts sharing >= OVERLAP of their tokens share one of their
        # len - ceil(OVERLAP * len) + 1 rarest tokens; nums in the key: different numbers never meet
        ranked = sorted([rank[t] for t in ts if t in rank])
        if not ranked:
            buckets[(nums, -1, keys[index])].append(index)  # nothing shared: exact text only
            continue
        prefix = min(MAX_PREFIX, len(ranked) - math.ceil(OVERLAP * len(ranked)) + 1)
        for token in ranked[:max(prefix, 1)]:
            buckets[(nums, token)].append(index)
    parent = list(range(len(texts)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for members in buckets.values():
        if len(members) < 2:
            continue
        if len(members) > MAX_BUCKET:  # a pair of common words: compare length neighbours only
            members = sorted(members, key=lambda i: len(keys[i]))
            chunks = [members[k:k + WINDOW * 2] for k in range(0, len(members), WINDOW)]
        else:
            chunks = [members]
        for chunk in chunks:
            if len(chunk) == 2:
                if fuzz.ratio(keys[chunk[0]], keys[chunk[1]], score_cutoff=cutoff):
                    _union(parent, find, chunk[0], chunk[1])
                continue
            choices = [keys[j] for j in chunk]
            for pos, i in enumerate(chunk[:-1]):
                for _, _, k in process.extract(keys[i], choices[pos + 1:], scorer=fuzz.ratio,
                                                score_cutoff=cutoff, limit=None):
                    _union(parent, find, i, chunk[pos + 1 + k])
    components: dict[int, list[int]] = defaultdict(list)
    for index in range(len(texts)):
        components[find(index)].append(index)
    groups = []
    for members in components.values():
        if len(members) >= 2:
            groups.extend(_refine(members, keys, cutoff))
    return groups


def _union(parent: list[int], find, a: int, b: int) -> None:
    ra, rb = find(a), find(b)
    if ra != rb:
        parent[rb] = ra


def _refine(members: list[int], keys: list[str], cutoff: float) -> list[list[int]]:
    """Keep the members close to the group's centre, so a chain A~B~C does not glue A to C."""
    if len(members) == 2:
        return [members]
    if len(members) <= 40:
        best, best_score = members[0], -1.0
        for i in members:
            score = sum(s for _, s, _ in process.extract(keys[i], [keys[j] for j in members], scorer=fuzz.ratio,
                                                           limit=None))
            if score > best_score:
                best, best_score = i, score
    else:
        best = max(members, key=lambda i: len(keys[i]))
    close = [members[k] for _, _, k in process.extract(keys[best], [keys[j] for j in members], scorer=fuzz.ratio,
                                                         score_cutoff=cutoff, limit=None)]
    close.sort()
    rest = [m for m in members if m not in set(close)]
    out = [close] if len(close) >= 2 else []
    if len(rest) >= 2:
        out.extend(_refine(rest, keys, cutoff))
    return out


def _plan_consolidate(entries: Sequence[Entry], history: Sequence[tuple[str, str]], cfg: dict,
                      stamp: str) -> Iterator[Change]:
    minimum = int(cfg["consolidate_min"])
    texts = [e.text for e in entries] + [text for _, text in history]
    for group in similar_groups(texts, float(cfg["similarity"])):
        members = [entries[i] for i in group if i < len(entries)]
        lines = [history[i - len(entries)] for i in group if i >= len(entries)]
        if not members:
            continue
        by_type: dict[str, list[Entry]] = defaultdict(list)
        for entry in members:
            by_type[entry.type].append(entry)
        type_name, same = max(by_type.items(), key=lambda kv: (len(kv[1]), kv[0]))
        count = sum(max(int(e.seen or 1), 1) for e in same) + len(lines)
        if count < minimum:
            continue
        centre = max(same, key=lambda e: (e.seen, _number(e.confidence), len(e.text), e.created or ""))
        sources = list(dict.fromkeys([e.source for e in same if e.source] + [f"L4:{s}" for s, _ in lines]))
        merged = Entry(
            id=new_id(), text=centre.text, type=type_name,
            topic=centre.topic or next((e.topic for e in same if e.topic), ""),
            confidence=max(_number(e.confidence) for e in same), refs=sum(e.refs for e in same),
            last_ref=max((e.last_ref for e in same), default=""),
            created=min((e.created for e in same if e.created), default=stamp), updated=stamp,
            source="; ".join(sources), seen=count, consolidated_from=[e.id for e in same],
            note=f"{count}× verified",
        )
        if lines:
            merged.extra["history"] = [s for s, _ in lines]
        yield Change("consolidate", same, [merged], f"{count}× verified")


def recent_history(layout: Layout, sessions: int = HISTORY_SESSIONS) -> list[tuple[str, str]]:
    """(session, text) for the history lines of the last sessions in all_histories.txt."""
    path = layout.histories
    if not path.exists():
        return []
    try:
        from memctl.l4.history import iter_history_blocks
    except ImportError:
        return []
    blocks = list(iter_history_blocks(path))[-sessions:]
    out = []
    for name, lines in blocks:
        for text in lines:
            text = re.sub(r"^\s*(\[USER\]:|\[Agent\])\s*", "", text).strip()
            if len(text) >= 8:
                out.append((name, text))
    return out


# --- guard rail


def check_guard(plan_: Plan, settings: Settings, force: bool) -> None:
    share = float(settings.get("dream", "max_remove_share"))
    removing = plan_.net_removed
    if plan_.l5_count == 0 or removing <= share * plan_.l5_count or force:
        return
    counts = plan_.counts()
    detail = ", ".join(f"{op} {counts[op]}" for op in OPS if counts.get(op))
    raise GuardRail(
        f"dream stopped, nothing changed: it would remove {removing} of {plan_.l5_count} L5 entries "
        f"({removing / plan_.l5_count:.0%}; {detail}), more than [dream] max_remove_share = {share:g}. "
        "Review with `memctl dream --dry-run`, then rerun with --force (or raise max_remove_share)."
    )


# --- running


@contextlib.contextmanager
def dream_lock(layout: Layout) -> Iterator[None]:
    """Only one dream at a time (separate from the writer lock, which it takes in short steps)."""
    fd = open_lock_file(layout.state_dir / "dream.lock")
    try:
        if not try_lock(fd):
            raise LockBusy("another memctl dream is running on this memory; retry later")
        yield
    finally:
        os.close(fd)


def plan_now(settings: Settings, now: datetime, options: DreamOptions) -> Plan:
    layout = settings.layout
    snapshot = read_snapshot(layout.long_term)
    history = recent_history(layout) if "consolidate" in options.ops else []
    return plan(snapshot.entries, load_refs(layout), settings, now, options.ops, history, options.summarizer)


def run(settings: Settings, now: datetime, options: DreamOptions) -> DreamReport:
    layout = settings.layout
    run_id = f"d-{now.strftime('%Y%m%dT%H%M%S')}-{new_id('')[:6]}"
    with dream_lock(layout):
        snapshot = read_snapshot(layout.long_term)
        refs = load_refs(layout)
        history = recent_history(layout) if "consolidate" in options.ops else []
        first = plan(snapshot.entries, refs, settings, now, options.ops, history, options.summarizer)
        check_guard(first, settings, options.force)
        l5_before = first.l5_count
        wait = max(options.lock_wait, DEFAULT_STEP_WAIT)
        _audit(layout, [{"run": run_id, "at": iso(now), "op": "start", "plan": first.counts(),
                         "refs_offset": [refs.offset_before, refs.offset_after]}])
        counts: Counter = Counter()
        steps, longest = 0, 0.0
        current_plan, replans, skipped = first, 0, 0
        while True:
            applied, skipped_now, snapshot, held = _apply(layout, current_plan, snapshot, run_id, now, wait, steps)
            steps += len(held)
            longest = max([longest] + held)
            for change in applied:
                counts[change.op] += len(change.after) if change.op == "refs" else len(change.removed)
            if current_plan is first and read_offset(layout) != refs.offset_after:
                with WriterLock(layout.lock, wait_seconds=wait, poll=STEP_POLL):
                    write_offset(layout, refs.offset_after)
            if not skipped_now or replans >= MAX_REPLANS:
                skipped = skipped_now
                break
            replans += 1
            snapshot = read_snapshot(layout.long_term)
            current_plan = plan(snapshot.entries, Refs(), settings, now, options.ops, history, options.summarizer)
            if current_plan.net_removed + sum(c.net_removed for c in applied) > \
                    float(settings.get("dream", "max_remove_share")) * l5_before and not options.force:
                break
        final = snapshot
        _audit(layout, [{"run": run_id, "at": iso(now), "op": "end", "counts": dict(counts), "skipped": skipped,
                         "replans": replans}])
    return DreamReport(run_id, dict(counts), skipped, replans, steps, l5_before,
                       sum(1 for r in final.rows if r.entry is not None), longest)


def _apply(layout: Layout, plan_: Plan, planned: Snapshot, run_id: str, now: datetime,
           wait: float, first_step: int = 0) -> tuple[list[Change], int, Snapshot, list[float]]:
    """Apply the plan in locked steps; a change applies only if its entries are unchanged."""
    expected = {row.entry.id: row.raw for row in planned.rows if row.entry is not None}
    refs_first = [c for c in plan_.changes if c.op == "refs"]
    others = [c for c in plan_.changes if c.op != "refs"]
    batches = [refs_first] if refs_first else []
    # every step costs a pass over L5 whatever its size: at most MAX_STEPS of them
    size = max(STEP_CHANGES, math.ceil(len(others) / MAX_STEPS))
    batches += [others[i:i + size] for i in range(0, len(others), size)]
    applied: list[Change] = []
    skipped = 0
    snapshot = planned
    stamp = iso(now)
    held: list[float] = []
    for number, batch in enumerate(batches):
        with WriterLock(layout.lock, wait_seconds=wait, poll=STEP_POLL):
            locked_at = time.monotonic()
            snapshot = read_snapshot(layout.long_term, previous=snapshot)
            rows = snapshot.rows
            position = {row.entry.id: k for k, row in enumerate(rows) if row.entry is not None}
            good, records = [], []
            for change in batch:
                if change.op == "refs":
                    # additive: fold into whatever the entry is now
                    live = [rows[position[e.id]].entry for e in change.before if e.id in position]
                    change = Change("refs", live, [fold(e, plan_.refs) for e in live], change.reason)
                    if not live:
                        continue
                elif any(e.id not in position or rows[position[e.id]].raw != expected.get(e.id)
                         for e in change.before):
                    skipped += 1
                    continue
                good.append(change)
            if not good:
                continue
            removed_ids = {e.id for c in good for e in c.removed}
            anchors = _anchors(rows, removed_ids)
            new_rows: list[Row] = []
            replacements = {e.id: e for c in good for e in c.after if e.id in position}
            for row in rows:
                entry_id = row.entry.id if row.entry is not None else None
                if entry_id in removed_ids:
                    continue
                if entry_id in replacements:
                    row = row_for(replacements[entry_id])
                new_rows.append(row)
            new_rows += [row_for(e) for c in good for e in c.added]
            to_l6 = [replace(e, left_at=stamp, reason=REASONS[c.op], note=c.reason, run=run_id, extra=dict(e.extra))
                     for c in good for e in c.removed]
            for c in good:
                records.append({"run": run_id, "at": stamp, "op": c.op, "step": first_step + len(held),
                                "ids": [e.id for e in c.before] + [e.id for e in c.added],
                                "before": [_line_dict(rows[position[e.id]]) for e in c.before],
                                "after": [e.to_dict() for e in c.after], "reason": c.reason,
                                "anchors": {e.id: anchors.get(e.id) for e in c.removed}})
            # order: L6 copy and audit first, L5 last — a crash leaves duplicates, never a loss
            append_entries(layout.cold_archive, to_l6)
            _audit(layout, records)
            snapshot = write_rows(layout.long_term, new_rows)
            if batch is refs_first and plan_.refs.offset_after != plan_.refs.offset_before:
                write_offset(layout, plan_.refs.offset_after)
            held.append(time.monotonic() - locked_at)
        applied.extend(good)
        for c in good:
            for e in c.after:
                expected[e.id] = entry_line(e)
    return applied, skipped, snapshot, held


def _anchors(rows: list[Row], removed: set[str]) -> dict[str, str | None]:
    """For each removed id, the id of the parsed row before it (None: first)."""
    anchors: dict[str, str | None] = {}
    previous = None
    for row in rows:
        if row.entry is None:
            continue
        if row.entry.id in removed:
            anchors[row.entry.id] = previous
        previous = row.entry.id
    return anchors


def _line_dict(row: Row) -> dict:
    return json.loads(row.raw)


def _audit(layout: Layout, records: list[dict]) -> None:
    if records:
        append_durably(layout.dream_log, b"".join((json.dumps(r, ensure_ascii=False) + "\n").encode() for r in records))


# --- undo


def read_log(layout: Layout) -> list[dict]:
    out = []
    if not layout.dream_log.exists():
        return out
    for raw in layout.dream_log.read_bytes().splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def undo(settings: Settings, run_id: str, now: datetime, wait: float) -> UndoReport:
    """Put back every change of a dream run: L5 rows in their old places, its L6 lines dropped."""
    layout = settings.layout
    log = read_log(layout)
    records = [r for r in log if r.get("run") == run_id and r.get("op") in OPS + ("refs",)]
    if not any(r.get("run") == run_id for r in log):
        raise NotFound(f"no run {run_id} in {layout.dream_log.name}; `memctl status` lists the recent runs")
    if any(r.get("op") == "undo" and r.get("of") == run_id for r in log):
        raise UsageError(f"run {run_id} was already undone")
    start = next((r for r in log if r.get("run") == run_id and r.get("op") == "start"), {})
    undo_id = "u-" + new_id("")
    conflicts: list[str] = []
    with WriterLock(layout.lock, wait_seconds=wait):
        snapshot = read_snapshot(layout.long_term)
        rows = list(snapshot.rows)
        steps: dict[int, list[dict]] = defaultdict(list)
        for record in records:
            steps[int(record.get("step", 0))].append(record)
        for number in sorted(steps, reverse=True):
            rows = _undo_step(rows, steps[number], conflicts)
        write_rows(layout.long_term, rows)
        l6 = read_snapshot(layout.cold_archive)
        write_rows(layout.cold_archive, [r for r in l6.rows if r.entry is None or r.entry.run != run_id])
        offsets = start.get("refs_offset")
        if offsets and read_offset(layout) == offsets[1]:
            write_offset(layout, offsets[0])
        _audit(layout, [{"run": undo_id, "at": iso(now), "op": "undo", "of": run_id, "changes": len(records),
                         "conflicts": conflicts}])
    return UndoReport(undo_id, run_id, len(records) - len(conflicts), conflicts)


def _undo_step(rows: list[Row], records: list[dict], conflicts: list[str]) -> list[Row]:
    """Revert one locked step: drop what it added, revert updates, re-insert what it removed
    after the same neighbour it had (anchors may be other entries of the step)."""
    before = [b for r in records for b in r.get("before") or [] if isinstance(b, dict)]
    after = [a for r in records for a in r.get("after") or [] if isinstance(a, dict)]
    before_ids = {b["id"] for b in before}
    added = {a["id"] for a in after if a["id"] not in before_ids}
    updated = {a["id"] for a in after if a["id"] in before_ids}
    old_by_id = {b["id"]: b for b in before}
    out = []
    for row in rows:
        entry_id = row.entry.id if row.entry is not None else None
        if entry_id in added:
            continue
        out.append(_row_from_dict(old_by_id[entry_id]) if entry_id in updated else row)
    anchors: dict[str, str | None] = {}
    for record in records:
        anchors.update(record.get("anchors") or {})
    present = {r.entry.id for r in out if r.entry is not None}
    # each removed entry follows its old neighbour (one follower per anchor within a step)
    follower: dict[str | None, dict] = {}
    for old in before:
        if old["id"] in updated:
            continue
        if old["id"] in present:
            conflicts.append(f"{old['id']} is already back in L5")
            continue
        follower[anchors.get(old["id"])] = old
    placed: set[str] = set()
    result: list[Row] = []

    def emit_chain(anchor: str | None) -> None:
        while anchor in follower:
            old = follower.pop(anchor)
            result.append(_row_from_dict(old))
            placed.add(old["id"])
            anchor = old["id"]

    emit_chain(None)
    for row in out:
        result.append(row)
        if row.entry is not None:
            emit_chain(row.entry.id)
    for anchor, old in list(follower.items()):  # its neighbour is gone: put it back at the end
        if old["id"] not in placed:
            conflicts.append(f"{old['id']}: its neighbour {anchor} is gone; put back at the end")
            result.append(_row_from_dict(old))
            emit_chain(old["id"])
    return result


def _row_from_dict(data: dict) -> Row:
    return Row((json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8"), Entry.from_dict(data))


def _short(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
