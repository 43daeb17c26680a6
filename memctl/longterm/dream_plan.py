"""The dream planner (design.md §7): (entries, references, settings, now) -> `Plan`.

Pure: no files, no clock, no lock. Every change carries its reason, and each entry left
alone the rule that kept it (restic's ApplyPolicy). One function per rule, applied in this
order, an entry taken by one rule being out of reach of the next: supersede/contradict
(`_plan_superseded`), consolidate (`_plan_consolidate`, near-duplicates found by
`memctl.longterm.dream_similar`), archive (`_archive_rule`), forget (`_forget_rule`), merge
(`_plan_merge`). Reference counts are folded first (a `refs` change).
"""

from __future__ import annotations

import shlex
import subprocess
from array import array
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Iterator, Sequence

from memctl.core.clock import iso
from memctl.core.config import Settings
from memctl.longterm.dream_refs import Refs, fold, parse_time
from memctl.longterm.dream_rows import view_of
from memctl.longterm.dream_similar import similar_groups
from memctl.core import jsoncodec
from memctl.longterm.entries import Entry, Row, entry_line, new_id
from memctl.longterm.policies import TypePolicy, known_types, lifespan_of, merge_key

OPS = ("consolidate", "archive", "forget", "merge")


class Change:
    """One change a dream makes, with its reason. Its entries are held as their stored lines
    and read again on each use (a million-entry plan holds ~200k of them: a parsed entry costs
    about 1 KB, its line a third of that), or, for entries of L5 as the planner read it, as
    their places there (`At`), read again from L5's lines; `before` and `after` are new lists
    of new entries on each read."""

    __slots__ = ("op", "reason", "_before", "_after", "_before_ids", "_after_ids")

    def __init__(self, op: str, before: list[Entry], after: list[Entry], reason: str) -> None:
        self.op = op  # consolidate | archive | forget | merge | refs
        self.reason = reason  # why, for people: "superseded by m1234", "3× verified", ...
        # before: entries as they are in L5 now (removed, or updated in place);
        # after: new entries, or the updated versions (same ids as `before`)
        if isinstance(before, At):
            self._before, self._before_ids = before, before.ids()
        else:
            self._before, self._before_ids = _packed(before)
        self._after, self._after_ids = _packed(after)

    before = property(lambda self: self._before.entries() if isinstance(self._before, At) else _unpacked(self._before))
    after = property(lambda self: _unpacked(self._after))

    def placed(self, view: "_Folded", positions: list[int]) -> "Change":
        """This change, its `before` held as these places of the planner's view of L5."""
        return Change(self.op, At(view, positions), self.after, self.reason)

    @property
    def before_ids(self) -> tuple[str, ...]:
        return self._before_ids

    @property
    def after_ids(self) -> tuple[str, ...]:
        return self._after_ids

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.op, self.reason, self.before, self._after) == (other.op, other.reason, other.before, other._after)

    def __repr__(self) -> str:
        return f"Change(op={self.op!r}, before={self.before!r}, after={self.after!r}, reason={self.reason!r})"

    @property
    def removed(self) -> list[Entry]:
        after = set(self._after_ids)
        return [e for e in self.before if e.id not in after]

    @property
    def added(self) -> list[Entry]:
        before = set(self._before_ids)
        return [e for e in self.after if e.id not in before]

    @property
    def removed_count(self) -> int:
        after = set(self._after_ids)
        return sum(1 for i in self._before_ids if i not in after)

    @property
    def net_removed(self) -> int:
        before = set(self._before_ids)
        return self.removed_count - sum(1 for i in self._after_ids if i not in before)

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
                "update": [i for i in self._after_ids if i in set(self._before_ids)]}


@dataclass
class Plan:
    now: str
    l5_count: int
    changes: list[Change]
    kept: Sequence[tuple[str, str]]  # (id, the rule that kept it): a list, or `Kept`
    refs: Refs = field(default_factory=Refs)

    @property
    def net_removed(self) -> int:
        return sum(c.net_removed for c in self.changes)

    def counts(self) -> dict[str, int]:
        counts: Counter = Counter()
        for change in self.changes:
            counts[change.op] += change.removed_count if change.op != "refs" else len(change.after_ids)
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


class At:
    """Entries of a change by their places in the planner's view of L5 (its rows keep the file
    as read open: a later step's rename of L5 leaves them readable), each read and folded again
    on use."""

    __slots__ = ("view", "positions")

    def __init__(self, view: "_Folded", positions: list[int]) -> None:
        self.view, self.positions = view, tuple(positions)

    def ids(self) -> tuple[str, ...]:
        return tuple(self.view.id_at(p) for p in self.positions)

    def entries(self) -> list[Entry]:
        return [self.view.at(p) for p in self.positions]


def _packed(entries: list[Entry]) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    return tuple(entry_line(e) for e in entries), tuple(e.id for e in entries)


def _unpacked(lines: tuple[bytes, ...]) -> list[Entry]:
    return [Entry.from_dict(jsoncodec.loads(line)) for line in lines]


def last_written(entry: Entry) -> datetime | None:
    """When the entry was last written. An imported item not rewritten since is as old as its
    own `date` (older imports stamped `created` with the import's time)."""
    own = parse_time(entry.date)
    if own is not None and entry.updated == entry.created:
        created = parse_time(entry.created)
        return min(own, created) if created is not None else own
    stamps = [t for t in (parse_time(entry.updated), parse_time(entry.created), own) if t]
    return max(stamps) if stamps else None


def plan(entries: Sequence[Entry], refs: Refs, settings: Settings, now: datetime,
         ops: Iterable[str] = OPS, history: Sequence[tuple[str, str]] = (),
         summarizer: str | None = None) -> Plan:
    """Every change one dream run would make, with its reason. Pure: no files, no clock."""
    return plan_rows([Row(b"", e) for e in entries], refs, settings, now, ops, history, summarizer)


class _Folded:
    """L5's entries by position in its rows, each with its new references folded in. Rows may
    be lean (`dream_rows.LeanRows`: offsets and ids, the lines left in the file): an entry is
    parsed when a rule needs it and not kept, so the planner holds only what its rules keep
    (a dream of a million entries)."""

    def __init__(self, rows: Sequence[Row], refs: Refs) -> None:
        self.rows, self.refs = view_of(rows), refs
        self.positions = array("i", (k for k, entry_id in self.rows.ids() if entry_id is not None))

    def id_at(self, position: int) -> str:
        return self.rows.id_at(position)

    def at(self, position: int) -> Entry:
        return fold(self.rows.entry_at(position), self.refs)

    def entries(self, skip: set[str]) -> Iterator[tuple[int, Entry]]:
        """(position, entry) of every entry whose id is not in `skip`, in order, the lines read
        in chunks."""
        for position, entry_id, raw in self.rows.entry_lines():
            if entry_id not in skip:
                yield position, fold(self.rows.parse(position, raw), self.refs)

    def twice(self) -> set[str]:
        """The ids on two lines or more."""
        return self.rows.twice()

    def linked_at(self, position: int) -> Entry | None:
        """The entry, or None when its line cannot hold a `supersedes`, `contradicts` or
        `topic` key (most lines, left unparsed). A line with a `\\u` escape is parsed: a key
        may be spelled with one."""
        if self.rows.lean and not self.rows.may_link(position):
            return None
        return self.at(position)


def plan_rows(rows: Sequence[Row], refs: Refs, settings: Settings, now: datetime,
              ops: Iterable[str] = OPS, history: Sequence[tuple[str, str]] = (),
              summarizer: str | None = None) -> Plan:
    """`plan` over L5's rows as a snapshot holds them (lean or not): the same plan, reading each
    entry when a rule needs it instead of holding every entry — the lines that can link
    (supersede), every entry once (consolidate, judging archive and forget on the way), then
    the entries that change."""
    ops = tuple(ops)
    cfg = settings.values["dream"]
    types = known_types(settings)
    view = _Folded(rows, refs)
    changes: list[Change] = []
    updated = [(view.rows.entry_at(p), view.at(p)) for p in view.positions if view.id_at(p) in refs.new]
    if updated:
        changes.append(Change("refs", [b for b, _ in updated], [a for _, a in updated],
                              f"{sum(refs.new[a.id][0] for _, a in updated)} new references"))
    del updated
    taken: set[str] = set()
    stamp = iso(now)

    def take(change: Change) -> None:
        changes.append(change)
        taken.update(change.before_ids)

    if "forget" in ops:
        for change in _plan_superseded(view, types):
            if not taken.intersection(e.id for e in change.before):
                take(change)
    ageing = _Ageing(len(rows), refs, now, ops, types, cfg)
    if "consolidate" in ops:
        for change in _plan_consolidate(view, taken, types, history, cfg, stamp, ageing.judge):
            take(change)
    kept, mergeable = _plan_ageing(view, taken, ageing, take)
    if "merge" in ops:
        for change in _plan_merge([view.at(p) for p in mergeable if view.id_at(p) not in taken],
                                  cfg, stamp, summarizer):
            take(change)
    return Plan(stamp, len(view.positions), changes, kept.without(taken), refs)


class _Ageing:
    """The archive and forget rules and the rule that keeps an entry. They depend on the entry
    alone, so the consolidation pass, which reads every entry anyway, judges each one as it
    goes (`judge`); the ageing pass then reads again only the entries that change."""

    CHANGES, UNJUDGED = -1, -2

    def __init__(self, rows: int, refs: Refs, now: datetime, ops: tuple[str, ...],
                 types: dict[str, TypePolicy], cfg: dict) -> None:
        self.refs, self.ops, self.types, self.cfg = refs, ops, types, cfg
        self.archive_cut = now - timedelta(days=float(cfg["archive_after_days"]))
        self.forget_cut = now - timedelta(days=float(cfg["forget_after_days"]))
        self.floor = float(cfg["merge_min_confidence"])
        self.codes = array("i", [self.UNJUDGED]) * rows  # per row: CHANGES, or a kept verdict's number
        self.verdicts: list[tuple[str, bool]] = []  # (the rule that keeps it, mergeable) by number
        self._numbers: dict[tuple[str, bool], int] = {}

    def change(self, entry: Entry) -> Change | None:
        written = last_written(entry)
        change = _archive_rule(entry, written, self.refs, self.archive_cut, self.types, self.cfg) \
            if "archive" in self.ops else None
        if change is None and "forget" in self.ops:
            change = _forget_rule(entry, written, self.refs, self.forget_cut, self.cfg)
        return change

    def judge(self, position: int, entry: Entry) -> int:
        if self.change(entry) is not None:
            code = self.CHANGES
        else:
            rule = _keep_rule(entry, last_written(entry), self.archive_cut, self.types)
            verdict = (rule, bool(entry.topic) and _number(entry.confidence) >= self.floor)
            code = self._numbers.setdefault(verdict, len(self.verdicts))
            if code == len(self.verdicts):
                self.verdicts.append(verdict)
        self.codes[position] = code
        return code


class Kept(Sequence):
    """(id, the rule that kept it) of each entry a dream leaves in L5, in L5 order — held as
    positions and rule numbers (a million entries: not a million tuples and ids). An id on
    two lines is kept once, at its first line, with its last line's rule (what a dict of
    id -> rule made)."""

    def __init__(self, view: _Folded, rules: list[str]) -> None:
        self._view, self._rules = view, rules
        self._positions = array("i")
        self._codes = array("i")
        self._twice: dict[str, int] = {}  # an id on two lines of L5 -> its place here

    def add(self, position: int, code: int, twice: bool) -> None:
        if twice:
            entry_id = self._view.id_at(position)
            if entry_id in self._twice:
                self._codes[self._twice[entry_id]] = code
                return
            self._twice[entry_id] = len(self._positions)
        self._positions.append(position)
        self._codes.append(code)

    def without(self, ids: set[str]) -> "Kept":
        other = Kept(self._view, self._rules)
        for position, code in zip(self._positions, self._codes):
            if self._view.id_at(position) not in ids:
                other._positions.append(position)
                other._codes.append(code)
        return other

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(len(self)))]
        return self._view.id_at(self._positions[index]), self._rules[self._codes[index]]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((self._view.id_at(p), self._rules[c]) for p, c in zip(self._positions, self._codes))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Kept({list(self)!r})"


def _plan_ageing(view: _Folded, taken: set[str], ageing: _Ageing, take) -> tuple[Kept, list[int]]:
    """Archive, then forget, each entry no earlier rule took, in L5 order; the rule that kept
    each other one, and the positions the merge rule may group."""
    kept = Kept(view, [rule for rule, _ in ageing.verdicts])
    twice = view.twice()
    mergeable: list[int] = []
    for position in view.positions:
        if view.id_at(position) in taken:
            continue
        code = ageing.codes[position]
        if code == ageing.UNJUDGED:
            code = ageing.judge(position, view.at(position))
        if code == ageing.CHANGES:
            take(ageing.change(view.at(position)).placed(view, [position]))
            continue
        kept.add(position, code, bool(twice) and view.id_at(position) in twice)
        if ageing.verdicts[code][1]:
            mergeable.append(position)
    return kept, mergeable


def _archive_rule(entry: Entry, written: datetime | None, refs: Refs, cut: datetime,
                  types: dict[str, TypePolicy], cfg: dict) -> Change | None:
    """Archive a contextual entry last written before the cut and not referenced since."""
    if lifespan_of(types, entry.type) != "contextual" or written is None or written >= cut:
        return None
    if refs.count_since(entry.id, cut) or _ref_after(entry, cut):
        return None
    return Change("archive", [entry], [], f"contextual, no reference in {cfg['archive_after_days']} days")


def _forget_rule(entry: Entry, written: datetime | None, refs: Refs, cut: datetime, cfg: dict) -> Change | None:
    """Forget an entry last written before the cut with fewer references since than the floor."""
    if written is None or written >= cut:
        return None
    recent = max(refs.count_since(entry.id, cut), _ref_after(entry, cut))
    if recent >= int(cfg["forget_min_refs"]):
        return None
    return Change("forget", [entry], [],
                  f"{recent} references in {cfg['forget_after_days']} days (< {cfg['forget_min_refs']})")


def _ref_after(entry: Entry, cut: datetime) -> int:
    last = parse_time(entry.last_ref)
    return 1 if last is not None and last >= cut else 0


def _keep_rule(entry: Entry, written: datetime | None, archive_cut: datetime, types) -> str:
    if written is None:
        return "no date"
    if written >= archive_cut:
        return f"written {written.date()}"
    return f"{entry.refs} references, last {entry.last_ref[:10] or 'never'}; lifespan {lifespan_of(types, entry.type)}"


def _plan_superseded(view: _Folded, types: dict[str, TypePolicy]) -> Iterator[Change]:
    """Forget entries a newer one supersedes or contradicts, and older versions of a merge key."""
    links: list[tuple[str, str, str]] = []  # (entry id, "superseded" or "contradicted", target id)
    groups: dict[tuple[str, str], list[tuple[int, int, str]]] = defaultdict(list)  # (order, position, stamp)
    for order, position in enumerate(view.positions):
        entry = view.linked_at(position)
        if entry is None:
            continue
        contradicts = entry.extra.get("contradicts") or []
        for word, targets in (("superseded", entry.supersedes),
                              ("contradicted", contradicts if isinstance(contradicts, list) else [contradicts])):
            links.extend((entry.id, word, target) for target in targets)
        policy = types.get(entry.type)
        if entry.topic and policy is not None and policy.merges:
            groups[merge_key(entry)].append((order, position, entry.updated or entry.created or ""))
    targets = {target for _, _, target in links}
    by_id = {view.id_at(p): p for p in view.positions if view.id_at(p) in targets}  # the last line of an id
    for entry_id, word, target in links:
        if target in by_id and target != entry_id:
            yield Change("forget", At(view, [by_id[target]]), [], f"{word} by {entry_id}")
    for members in groups.values():
        if len(members) < 2:
            continue
        keep_order, keep_position, _ = max(members, key=lambda m: (m[2], m[0]))
        keep_id = view.id_at(keep_position)
        for order, position, _ in members:
            if order != keep_order:
                yield Change("forget", At(view, [position]), [], f"superseded by newer {keep_id}")


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


def _plan_consolidate(view: _Folded, taken: set[str], types: dict[str, TypePolicy],
                      history: Sequence[tuple[str, str]], cfg: dict, stamp: str,
                      seen: Callable[[int, Entry], Any]) -> Iterator[Change]:
    """Near-duplicates among the entries no earlier rule took (of types that do not merge by
    topic) and the recent history lines, each group of at least `consolidate_min` sightings
    becoming one entry. Each entry read is shown to `seen` (position, entry) too."""
    minimum = int(cfg["consolidate_min"])
    appendable = array("i")  # the positions of the texts compared, in order

    def texts() -> Iterator[str]:
        for position, entry in view.entries(taken):
            seen(position, entry)
            if not (entry.type in types and types[entry.type].merges):
                appendable.append(position)
                yield entry.text
        yield from (text for _, text in history)

    groups = similar_groups(texts(), float(cfg["similarity"]))
    compared = len(appendable)
    for group in groups:
        place = {}  # each member (by identity) -> its position in L5
        members = [view.at(appendable[i]) for i in group if i < compared]
        for i, entry in zip((i for i in group if i < compared), members):
            place[id(entry)] = appendable[i]
        lines = [history[i - compared] for i in group if i >= compared]
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
        yield Change("consolidate", At(view, [place[id(e)] for e in same]), [merged], f"{count}× verified")


def _short(text: str, limit: int = 70) -> str:
    from memctl.core.redact import redact  # before the cut: a cut secret no longer looks like one

    flat = " ".join(redact(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
