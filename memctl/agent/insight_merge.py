"""Rebuilding an L1 that already exists without losing a line of it.

memctl owns only the lines it generates: its pointer line, the index lines (`L0:`, `L2:`,
`L3:`, `L4:` and their `| ` continuations) and the scene lines it derived from L5 (items
noted `(N refs)` or `(N entries)`). Every other line - the header, GenericAgent's own pointer
line, scene lines a person or the agent wrote, free notes, the `[RULES]` block - stays byte
for byte where it is, in its language, whether or not its target exists (`verify` warns
about those). An index line whose items are still the same names is kept as written too,
so a second rebuild is a fixpoint: it finds nothing to change.
"""

from __future__ import annotations

import re

INDEX_LABELS = ("L0", "L2", "L3", "L4")
RECENT_LABEL = "recent: "  # the L4 line's continuation naming the newest sessions (insight_l4)
_INDEX_LINE = re.compile(r"^(L[0-4])(?:\([^)]*\))?:")
_MEMCTL_POINTER = re.compile(r"^Read(?: L2)? or ls \S+ for L3 when needed; memctl search ")
_LOOKS_LIKE_POINTER = re.compile(r"\bls\b.*L3|L3.*\bls\b")  # GenericAgent's: `需要时read L2 或 ls ../memory/ 查L3`
_GENERATED_SCENE = re.compile(r"^[^:|]+: [^|()]+\(\d+ (?:refs|entries)\)$")
EMPTY_L2 = {"现空", "空", "暂无", "无", "(none)", "none", "empty"}


def split_head(text: str) -> tuple[list[str], str]:
    """The lines before `[RULES]`, and the rest from `[RULES]` on (exactly)."""
    at = 0 if text.startswith("[RULES]") else text.find("\n[RULES]") + 1
    head, rules = (text[:at], text[at:]) if at > 0 or text.startswith("[RULES]") else (text, "")
    lines = head.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines, rules


def is_generated_scene(line: str) -> bool:
    items = [item.strip() for item in line.split("|") if item.strip()]
    return bool(items) and all(_GENERATED_SCENE.match(item) for item in items)


def _names(lines: list[str]) -> list[str]:
    """The names an index block points at (annotations and `+N more` aside), in order."""
    text = " | ".join(re.sub(r"^(L\d)(?:\([^)]*\))?:", "", line, count=1).lstrip("|") for line in lines)
    names = []
    for item in text.split("|"):
        item = re.sub(r"\([^()]*\)$", "", item.strip().removeprefix(RECENT_LABEL)).strip()
        if item and not item.startswith(("+", "…", "...")) and item not in EMPTY_L2:
            names.append(item.split()[0])
    return names


def _blocks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """The head cut into (kind, lines): an index block per label, pointer, scene, or keep."""
    blocks: list[tuple[str, list[str]]] = []
    for number, line in enumerate(lines):
        index = _INDEX_LINE.match(line)
        if index:
            blocks.append((index.group(1), [line]))
        elif line.startswith("|") and blocks and blocks[-1][0] in INDEX_LABELS:
            blocks[-1][1].append(line)
        elif number > 0 and _MEMCTL_POINTER.match(line):
            blocks.append(("pointer", [line]))
        elif number > 0 and is_generated_scene(line):
            blocks.append(("scene", [line]))
        else:
            blocks.append(("keep", [line]))
    return blocks


def merge(current: str, parts: dict[str, list[str]]) -> str:
    """The current L1 with memctl's parts (`pointer`, `L0`..`L4`, `scenes`: lines each) put in.

    A part replaces its block in place (unless the block names the same things); a part the
    file lacks goes after the last index line; generated scenes go where the first was, or at
    the end of the head. The `[RULES]` block and every line memctl did not write stay."""
    lines, rules = split_head(current)
    if not lines or not lines[0].startswith("#"):
        lines[0:0] = parts.get("title", [])
    if not any(_LOOKS_LIKE_POINTER.search(line) or _MEMCTL_POINTER.match(line) for line in lines[1:3]):
        lines[1:1] = parts.get("pointer", [])
    out: list[str] = []
    placed: set[str] = set()
    scene_at = None
    last_index = 0
    for kind, block in _blocks(lines):
        if kind == "keep":
            out += block
            continue
        if kind == "scene":
            scene_at = len(out) if scene_at is None else scene_at
            continue
        if kind in placed:  # a second block of one label is a person's: kept as written
            out += block
            continue
        placed.add(kind)
        new = parts.get(kind, [])
        same = kind in INDEX_LABELS and _names(block) == _names(new)
        out += block if same else new
        last_index = len(out) if kind in INDEX_LABELS else last_index
    missing = [line for label in INDEX_LABELS if label not in placed for line in parts.get(label, [])]
    if missing:
        at = last_index or min(len(out), 1 + ("pointer" in placed))
        out[at:at] = missing
        scene_at = scene_at + len(missing) if scene_at is not None and scene_at >= at else scene_at
    scenes = parts.get("scenes", [])
    if scenes and scene_at is not None:
        out[scene_at:scene_at] = scenes
    elif scenes:
        while out and out[-1] == "":
            out.pop()
        out += ["", *scenes] + ([""] if rules else [])
    return "\n".join(out) + "\n" + rules
