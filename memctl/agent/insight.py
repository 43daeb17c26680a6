"""L1, the insight index: `global_mem_insight.txt`, rebuilt from the real files and linted.

The shape is GenericAgent's (samples/genericagent/memory_example/global_mem_insight.txt):
a title, a pointer line, `L0:`/`L2:`/`L3:`/`L4:` lines naming what exists, scene lines for
the most referenced long-term topics, and the user's `[RULES]` block, kept byte for byte.
An agent reads this file on every turn, so it has hard limits ([insight] max_lines and
max_bytes, default 30 lines and 1 KB), points only at files that exist, and holds no secret.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from memctl.core import clock
from memctl.core.config import Layout
from memctl.core.fsutil import atomic_write_bytes, ensure_private_dir
from memctl.longterm.store import open_store
from memctl.core.errors import NotFound
from memctl.core.redact import find_secrets, redact
from memctl.agent.insight_merge import EMPTY_L2, RECENT_LABEL, is_generated_scene, merge, split_head

TITLE = "# [Global Memory Insight]"
RULES_HEADING = b"[RULES]"
META_SOP = "memory_management_sop"
WRAP = 100  # bytes per L3 line before it continues on a `| ` line
CAPS = {"l2": 12, "l3": 16, "scenes": 6, "recent": 3}
L4_LINE = "L4: L4_raw_sessions/ historical sessions (memctl search, memctl show)"
# folders of the root that are memctl's own, not task records
_NOT_L3 = {"L4_raw_sessions", "working", "temp", "__pycache__"}
_ANNOTATED = re.compile(r"^(?P<name>[^()]+?)\s*(?:\((?P<note>[^()]*)\))?$")
_L2_HEADING = re.compile(r"^##\s*\[(?P<name>[^\]]+)\]\s*$")
_FILE_LIKE = re.compile(r"^[\w.\-/]+$")


@dataclass
class Topic:
    name: str
    refs: int
    entries: int


@dataclass
class Inputs:
    """Everything L1 is built from, read from the files of one root."""

    l0: list[str]
    l2: list[str]
    l3: list[str]  # names as L1 shows them: `deploy_sop` (.md), `notes_digest.py`, `scripts/`
    has_l4: bool
    topics: list[Topic]
    notes: dict[str, str]  # L3 name -> annotation kept from the current L1
    pointer: str
    written_labels: set[str] = field(default_factory=set)  # labels of scene items memctl did not write
    current: str = ""  # the L1 being rebuilt ('' when there is none): its other lines are kept
    recent: list[str] = field(default_factory=list)  # the newest sessions, `NAME(request)` (insight_l4)


@dataclass
class Rebuild:
    text: str
    lines: int
    bytes: int
    counts: dict[str, int]  # how many items of each part were shown
    totals: dict[str, int]  # how many there were
    warnings: list[str] = field(default_factory=list)


@dataclass
class Violation:
    line: int  # 0: the file as a whole
    kind: str  # lines, bytes, ghost, secret, shape
    message: str


# ---------------------------------------------------------------- reading the layers


def l2_sections(layout: Layout) -> list[str]:
    if not layout.global_mem.is_file():
        return []
    names = []
    for line in layout.global_mem.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _L2_HEADING.match(line.strip())
        if match and match.group("name").strip() not in names:
            names.append(match.group("name").strip())
    return names


def l3_names(layout: Layout) -> list[str]:
    """*.md (shown without the suffix), *.py and sub-folders of the root, newest first."""
    found = []
    for path in layout.root.iterdir():
        if path.name.startswith(".") or path.is_symlink():
            continue
        if path.is_dir():
            if path.name not in _NOT_L3:
                found.append((path.stat().st_mtime, path.name + "/"))
        elif path.suffix == ".md":
            found.append((path.stat().st_mtime, path.stem))
        elif path.suffix == ".py":
            found.append((path.stat().st_mtime, path.name))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [name for _, name in found]


def top_topics(layout: Layout, limit: int = 50) -> list[Topic]:
    """L5 topics by total references (then by number of entries)."""
    refs: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for entry in open_store(layout).active.iter():  # the files, or the server's rows
        topic = " ".join(str(entry.topic or "").split())
        if not topic:
            continue
        counts[topic] += 1
        try:
            refs[topic] += max(int(entry.refs or 0), 0)
        except (TypeError, ValueError):
            pass
    ranked = sorted(counts, key=lambda t: (-refs[t], -counts[t], t))
    return [Topic(t, refs[t], counts[t]) for t in ranked[:limit]]


def _current_notes(text: str) -> dict[str, str]:
    """Annotations a person or agent wrote on L3 items (`backup_restore_sop(bk-02 403)`)."""
    notes = {}
    for _, item in _items_of(text, "L3"):
        match = _ANNOTATED.match(item)
        if match and match.group("note"):
            notes[match.group("name").strip()] = match.group("note").strip()
    return notes


def _pointer_line(layout: Layout) -> str:
    # GenericAgent's agents run beside memory/ and read this exact line
    where = "../memory/" if layout.root.name == "memory" else f"{layout.root}/"
    l2 = "Read L2" if layout.global_mem.is_file() else "Read"
    return f"{l2} or ls {where} for L3 when needed; memctl search QUERY for L4/L5"


def gather(layout: Layout) -> Inputs:
    if not layout.root.is_dir():
        raise NotFound(f"{layout.root} is not a memory folder yet; run `memctl init`")
    from memctl.agent.insight_l4 import recent_session_items

    current = layout.insight.read_bytes() if layout.insight.is_file() else b""
    current_text = current.decode("utf-8", "replace")
    l0 = [META_SOP] if (layout.root / f"{META_SOP}.md").is_file() else []
    return Inputs(
        l0=l0,
        l2=l2_sections(layout),
        l3=_curated_order(l3_names(layout), current_text),
        has_l4=layout.l4_dir.is_dir(),
        topics=top_topics(layout),
        notes=_current_notes(current_text),
        pointer=_pointer_line(layout),
        written_labels=_written_labels(current_text),
        current=current.decode("utf-8", "surrogateescape"),
        recent=recent_session_items(layout) if layout.l4_dir.is_dir() else [],
    )


def _written_labels(current_text: str) -> set[str]:
    """Labels of the scene items a person or agent wrote (`Deploy/CI: deploy_sop(blue-green)`):
    memctl adds no scene of its own under the same label."""
    labels = set()
    head, _ = split_head(current_text)
    for line in head[1:]:
        if ":" in line and not is_generated_scene(line) and not re.match(r"^(L\d|\||#)", line):
            labels |= {item.partition(":")[0].strip().lower() for item in line.split("|") if ":" in item}
    return labels


def _curated_order(names: list[str], current_text: str) -> list[str]:
    """Names the current L1 already lists keep their order; the rest follow, newest first."""
    present = set(names)
    kept = []
    for _, item in _items_of(current_text, "L3"):
        match = _ANNOTATED.match(item)
        name = match.group("name").strip() if match else item
        if name in present and name not in kept:
            kept.append(name)
    return kept + [n for n in names if n not in kept]


# ---------------------------------------------------------------- rendering


def _clean(items: Iterable[str]) -> list[str]:
    """Drop items that would carry a secret or break the line format."""
    return [i for i in items if i and "|" not in i and "\n" not in i and not find_secrets(i)]


def _joined(label: str, items: list[str], total: int, hint: str) -> list[str]:
    """`label: a | b | c`, wrapped with `| ` continuation lines, `+N more` when cut."""
    if total > len(items):
        items = [*items, f"+{total - len(items)} more{hint}"]
    lines = [f"{label}: " + (items[0] if items else "(none)")]
    for item in items[1:]:
        candidate = f"{lines[-1]} | {item}"
        if len(candidate.encode("utf-8")) <= WRAP:
            lines[-1] = candidate
        else:
            lines.append(f"| {item}")
    return lines


def _scene_items(inputs: Inputs, l3: list[str], scrub: Callable[[str], str]) -> list[str]:
    """Scene items memctl derives from the most referenced L5 topics."""
    items: list[str] = []
    labels = set(inputs.written_labels)
    for topic in inputs.topics:
        label = scrub(topic.name)[:32].replace("|", "/").replace(":", " ").strip()
        if not label or "[REDACTED" in label or label.lower() in labels:
            continue
        target = _l3_for_topic(topic.name, l3) or "L5"
        note = f"{topic.refs} refs" if topic.refs else f"{topic.entries} entries"
        items.append(f"{label}: {target}({note})")
    return items


def _l3_for_topic(topic: str, l3: list[str]) -> str | None:
    key = re.sub(r"\W+", "_", topic.lower()).strip("_")
    if len(key) < 3:
        return None
    for name in l3:
        if key in name.lower():
            return name
    return None


def _l4_lines(recent: list[str]) -> list[str]:
    """The L4 line, and what the newest sessions were about on `| recent:` lines below it."""
    if not recent:
        return [L4_LINE]
    first, *rest = _joined(RECENT_LABEL.rstrip(": "), recent, len(recent), "")
    return [L4_LINE, f"| {first}", *rest]


def render_parts(inputs: Inputs, n_l2: int, n_l3: int, n_scenes: int,
                 scrub: Callable[[str], str] = redact, n_recent: int = CAPS["recent"]) -> dict[str, list[str]]:
    """The lines memctl generates, by part: pointer, L0, L2, L3, L4, scenes."""
    l2 = _clean(inputs.l2)
    l3 = _clean(inputs.l3)
    shown = []
    for name in l3[:n_l3]:
        note = inputs.notes.get(name, "")
        note = "" if find_secrets(note) or "|" in note else note
        shown.append(f"{name}({note})" if note else name)
    scenes = _scene_items(inputs, l3, scrub)[:n_scenes]
    parts = {
        "title": [TITLE],
        "pointer": [inputs.pointer],
        "L0": ["L0(META-SOP): " + (" | ".join(inputs.l0) if inputs.l0 else "built in; `memctl rules` prints it")],
        "L2": _joined("L2", l2[:n_l2], len(l2), " in global_mem.txt") if l2 else [],
        "L3": _joined("L3", shown, len(l3), " (ls)") if l3 else [],
        "L4": _l4_lines(_clean(inputs.recent)[:n_recent]) if inputs.has_l4 else [],
        "scenes": [" | ".join(scenes[i : i + 2]) for i in range(0, len(scenes), 2)],
    }
    return {part: [scrub(line) for line in lines] for part, lines in parts.items()}


def render(inputs: Inputs, n_l2: int, n_l3: int, n_scenes: int, scrub: Callable[[str], str] = redact,
           n_recent: int = CAPS["recent"]) -> str:
    """The new L1: the current one with memctl's parts merged in, or a fresh one."""
    parts = render_parts(inputs, n_l2, n_l3, n_scenes, scrub, n_recent)
    if inputs.current.strip():
        return merge(inputs.current, parts)
    lines = [*parts["title"], *parts["pointer"], *parts["L0"], *parts["L2"], *parts["L3"], *parts["L4"]]
    if parts["scenes"]:
        lines += ["", *parts["scenes"]]
    return "\n".join(lines) + "\n"


def measure(text: str) -> tuple[int, int]:
    data = text.encode("utf-8", "surrogateescape")
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    return lines, len(data)


def build(inputs: Inputs, max_lines: int = 30, max_bytes: int = 1024, scrub: Callable[[str], str] = redact) -> Rebuild:
    """The largest L1 that fits: scene lines give way first, then L3, then L2 names. Lines
    memctl did not write are never dropped: when they alone break the limits, L1 keeps them,
    keeps its index whole, and the result says so in a warning."""
    warnings = []
    if find_secrets(inputs.current):
        # the rule "no secret in L1" outranks "every written line byte for byte"
        inputs.current = scrub(inputs.current)
        warnings.append("L1 held a secret; it was redacted")
    counts = dict(CAPS)
    floors = [("recent", 1), ("scenes", 2), ("l3", 6), ("l2", 4), ("scenes", 0), ("recent", 0), ("l3", 0), ("l2", 0)]
    text = _render_counts(inputs, counts, scrub)
    for part, floor in floors:
        while not _fits(text, max_lines, max_bytes) and counts[part] > floor:
            counts[part] -= 1
            text = _render_counts(inputs, counts, scrub)
    if not _fits(text, max_lines, max_bytes):
        counts = {**CAPS, "scenes": 0, "recent": 1}  # the newest session still: what the agent last did
        text = _render_counts(inputs, counts, scrub)
        lines, size = measure(text)
        warnings.append(f"L1 is {lines} lines / {size} bytes, over its {max_lines} lines / {max_bytes} bytes, "
                        f"because of lines memctl did not write; they are kept: shorten them by hand")
    lines, size = measure(text)
    totals = {"l2": len(inputs.l2), "l3": len(inputs.l3), "scenes": len(inputs.topics), "recent": len(inputs.recent)}
    shown = {k: min(counts[k], totals[k]) for k in counts}
    return Rebuild(text=text, lines=lines, bytes=size, counts=shown, totals=totals, warnings=warnings)


def _render_counts(inputs: Inputs, counts: dict[str, int], scrub: Callable[[str], str]) -> str:
    return render(inputs, counts["l2"], counts["l3"], counts["scenes"], scrub, counts["recent"])


def _fits(text: str, max_lines: int, max_bytes: int) -> bool:
    lines, size = measure(text)
    return lines <= max_lines and size <= max_bytes


def rebuild(layout: Layout, max_lines: int = 30, max_bytes: int = 1024, scrub: Callable[[str], str] = redact) -> Rebuild:
    """Compute the new L1 (the caller writes `result.text` to layout.insight under the lock)."""
    return build(gather(layout), max_lines, max_bytes, scrub)


# ---------------------------------------------------------------- writing, with the previous file kept

BACKUPS_KEPT = 20


def backup_dir(layout: Layout) -> Path:
    return layout.state_dir / "insight"


def write_rebuilt(layout: Layout, text: str) -> Path | None:
    """Replace L1 by `text`, after copying the current file into .memctl/insight/ (the caller
    holds the lock). Returns the copy, or None when nothing changed (and nothing was written)."""
    data = text.encode("utf-8", "surrogateescape")
    current = layout.insight.read_bytes() if layout.insight.is_file() else None
    if current == data:
        return None
    saved = _save_backup(layout, current) if current is not None else None
    atomic_write_bytes(layout.insight, data)
    return saved


def restore_previous(layout: Layout) -> Path:
    """Put back the L1 that the last change replaced (the current one is kept in turn)."""
    backups = _backups(layout)
    if not backups:
        raise NotFound(f"no earlier L1 in {backup_dir(layout)}; `insight rebuild` keeps one each time it changes L1")
    previous = backups[-1]
    data = previous.read_bytes()
    if layout.insight.is_file() and layout.insight.read_bytes() != data:
        _save_backup(layout, layout.insight.read_bytes())
    atomic_write_bytes(layout.insight, data)
    return previous


def _backups(layout: Layout) -> list[Path]:
    folder = backup_dir(layout)
    return sorted(folder.glob("global_mem_insight.*.txt")) if folder.is_dir() else []


def _save_backup(layout: Layout, data: bytes) -> Path:
    folder = ensure_private_dir(backup_dir(layout))
    path = folder / f"global_mem_insight.{clock.now():%Y%m%dT%H%M%S%f}.txt"
    atomic_write_bytes(path, data)
    for old in _backups(layout)[:-BACKUPS_KEPT]:
        old.unlink(missing_ok=True)
    return path


def refresh_after_archive(settings, new_sessions: int, wait_seconds: float = 5.0) -> str | None:
    """Rebuild an existing L1 after an archive run that added sessions, under the writer lock
    (the previous L1 goes to .memctl/insight/, as with `insight rebuild`). A one-line warning
    when it could not be rebuilt; None otherwise."""
    from memctl.core.errors import MemctlError
    from memctl.core.fsutil import WriterLock
    from memctl.core.redact import redactor_for

    layout = settings.layout
    if not new_sessions or not layout.insight.is_file():
        return None
    limits = (settings.get("insight", "max_lines"), settings.get("insight", "max_bytes"))
    try:
        with WriterLock(layout.lock, wait_seconds=wait_seconds):
            result = rebuild(layout, *limits, scrub=redactor_for(settings))
            write_rebuilt(layout, result.text)
    except (OSError, MemctlError) as exc:
        return f"L1 not rebuilt after archiving ({exc}); run `memctl insight rebuild`"
    return None


# ---------------------------------------------------------------- lint


def _items_of(text: str, label: str) -> list[tuple[int, str]]:
    """(line number, item) of an `L3: a | b` line and its `| c` continuation lines."""
    items = []
    inside = False
    for number, line in enumerate(text.splitlines(), start=1):
        head = re.match(rf"^{label}(?:\([^)]*\))?:\s*(.*)$", line)
        if head:
            inside = True
            rest = head.group(1)
        elif inside and line.startswith("|"):
            rest = line[1:]
        else:
            inside = False
            continue
        items += [(number, item.strip()) for item in rest.split("|") if item.strip()]
    return items


def _is_more(item: str) -> bool:
    return item.startswith(("+", "…", "..."))


def _exists_l3(root: Path, name: str) -> bool:
    name = name.strip()
    if not name or name.startswith("/") or ".." in name.split("/"):
        return False
    path = root / name.rstrip("/")
    # GenericAgent names an L3 item without its suffix: `keychain` is keychain.py, .md or keychain/
    return path.exists() or (root / f"{name}.md").is_file() or (root / f"{name}.py").is_file()


def _pointer_violations(root: Path, layout: Layout, text: str) -> list[Violation]:
    found = []
    for label in ("L0", "L3"):
        for number, item in _items_of(text, label):
            match = _ANNOTATED.match(item)
            name = match.group("name").strip() if match else item
            if _is_more(name) or not _FILE_LIKE.match(name):
                continue  # prose such as "built in; `memctl rules` prints it"
            if not _exists_l3(root, name):
                found.append(Violation(number, "ghost", f"{label} points at {name!r}, which does not exist"))
    sections = set(l2_sections(layout))
    for number, item in _items_of(text, "L2"):
        if _is_more(item) or item.lower() in EMPTY_L2:
            continue
        if item not in sections:
            where = "global_mem.txt" if layout.global_mem.is_file() else "global_mem.txt (missing)"
            found.append(Violation(number, "ghost", f"L2 names section [{item}], which is not in {where}"))
    for number, line in enumerate(text.splitlines(), start=1):
        l4 = re.match(r"^L4:\s*(\S+)", line)
        if l4 and _FILE_LIKE.match(l4.group(1)) and not (root / l4.group(1).rstrip("/")).exists():
            found.append(Violation(number, "ghost", f"L4 points at {l4.group(1)!r}, which does not exist"))
    found += _scene_violations(root, text)
    return found


def _scene_items_of(text: str) -> list[tuple[int, str]]:
    """(line number, item) of scene lines: `Label: target(note) | …` between the L lines and [RULES]."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("[RULES]"):
            break
        if number <= 2 or re.match(r"^(L\d|\||#)", line) or ":" not in line:
            continue
        items += [(number, item.strip()) for item in line.split("|") if item.strip()]
    return items


def _scene_target_missing(root: Path, name: str) -> bool:
    """A scene target that names a file (`x_sop`, `x.py`, `dir/`) which is not there."""
    if re.fullmatch(r"L\d", name) or not _FILE_LIKE.match(name):
        return False
    return bool(re.search(r"(_sop|\.md|\.py|\.txt|\.json|/)$", name)) and not _exists_l3(root, name)


def _scene_violations(root: Path, text: str) -> list[Violation]:
    found = []
    for number, item in _scene_items_of(text):
        _, _, target = item.partition(":")
        match = _ANNOTATED.match(target.strip())
        name = match.group("name").strip() if match else target.strip()
        if _scene_target_missing(root, name):
            found.append(Violation(number, "ghost", f"scene line points at {name!r}, which does not exist"))
    return found


def check_text(layout: Layout, data: bytes, max_lines: int = 30, max_bytes: int = 1024) -> list[Violation]:
    text = data.decode("utf-8", "replace")
    found = []
    lines, size = measure(data.decode("utf-8", "surrogateescape"))
    if lines > max_lines:
        found.append(Violation(max_lines + 1, "lines", f"{lines} lines; the limit is {max_lines}"))
    if size > max_bytes:
        found.append(Violation(0, "bytes", f"{size} bytes; the limit is {max_bytes}"))
    if not text.startswith(TITLE):
        found.append(Violation(1, "shape", f"the first line should be {TITLE!r}"))
    found += _pointer_violations(layout.root, layout, text)
    starts = _line_starts(text)
    for finding in find_secrets(text):
        number = _line_of(starts, finding.start)
        found.append(Violation(number, "secret", f"holds what looks like a {finding.kind}; remove it"))
    return sorted(found, key=lambda v: (v.line, v.kind))


def check(layout: Layout, max_lines: int = 30, max_bytes: int = 1024) -> list[Violation]:
    """Every violation of the L1 file of `layout` (it must exist)."""
    if not layout.insight.is_file():
        raise NotFound(f"{layout.insight} does not exist; `memctl insight rebuild` creates it")
    return check_text(layout, layout.insight.read_bytes(), max_lines, max_bytes)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    import bisect

    return bisect.bisect_right(starts, offset)
