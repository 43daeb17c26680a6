"""The tree follows ARCHITECTURE.md: which package may import which, no import cycle, at most
8 top-level modules, a docstring opening every package, no module over 600 lines.

The rule is read from ARCHITECTURE.md itself (the table of packages and what each imports), so
the document and the test cannot drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "memctl"
MAX_LINES = 600
MAX_TOP_LEVEL_MODULES = 8


def allowed_imports() -> dict[str, set[str]]:
    """package -> the packages it may import, from the drawing in ARCHITECTURE.md."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    drawing = text.split("```")[1]
    rule: dict[str, set[str]] = {}
    for line in drawing.splitlines():
        match = re.match(r"\s+(\w+)/\s.*\bimports: (.+)$", line)
        if not match:
            continue
        package, imports = match.group(1), match.group(2).strip()
        if imports == "nothing":
            rule[package] = set()
        elif imports.startswith("everything"):
            rule[package] = {"*"}
        else:
            rule[package] = {name.strip() for name in imports.split(",")}
    return rule


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every memctl module `name` imports, at top level or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != name}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


def test_the_rule_is_read_from_architecture_md():
    rule = allowed_imports()
    assert set(rule) == {"core", "l4", "longterm", "recall", "learn", "agent", "ops", "serve", "cli"}
    assert rule["core"] == set() and rule["cli"] == {"*"}


def test_every_import_follows_the_package_rule():
    rule, known = allowed_imports(), modules()
    broken = []
    for name, path in known.items():
        source_layer = layer_of(name)
        if source_layer is None:
            continue
        for target in imported_modules(name, path, known):
            target_layer = layer_of(target)
            if target_layer in (None, source_layer) or "*" in rule[source_layer]:
                continue
            if target_layer not in rule[source_layer]:
                broken.append(f"{name} imports {target} ({source_layer} may import {sorted(rule[source_layer])})")
    assert not broken, "\n".join(broken)


def test_no_import_cycle_between_modules():
    known = modules()
    graph = {name: {t for t in imported_modules(name, path, known) if not known[t].name == "__init__.py"}
             for name, path in known.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def test_top_level_holds_at_most_eight_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_every_package_opens_with_what_it_owns():
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        if init.parent != PACKAGE and (not doc or len(doc.split()) < 8):
            missing.append(str(init.relative_to(REPO)))
    assert not missing, f"packages without a paragraph saying what they own: {missing}"


def test_every_layer_package_is_in_architecture_md():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(allowed_imports()), packages ^ set(allowed_imports())


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(REPO)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
