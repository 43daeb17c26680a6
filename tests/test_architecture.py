"""The tree follows ARCHITECTURE.md: which package (and which sub-package of `recall`) may import
which, no import cycle, at most 8 top-level modules, a docstring opening every package, no module
over 600 lines, and no tracked text file naming a module path that MOVES.txt says has moved.

The rule is read from ARCHITECTURE.md itself (the table of packages and what each imports), so
the document and the test cannot drift apart."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "memctl"
MAX_LINES = 600
MAX_TOP_LEVEL_MODULES = 8


def drawing_rules() -> tuple[dict[str, set[str]], dict[str, dict[str, set[str]]]]:
    """The drawing in ARCHITECTURE.md: package -> what it may import, and for a package drawn
    with sub-packages below it (indented further), sub-package -> what it may import. An entry
    `package.module` allows that one module of the package."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    drawing = text.split("```")[1]
    rule: dict[str, set[str]] = {}
    sub_rules: dict[str, dict[str, set[str]]] = {}
    parent = ""
    for line in drawing.splitlines():
        match = re.match(r"(\s+)(\w+)/\s.*\bimports: (.+)$", line)
        if not match:
            continue
        indent, package, imports = len(match.group(1)), match.group(2), match.group(3).strip()
        if imports == "nothing":
            allowed = set()
        elif imports.startswith("everything"):
            allowed = {"*"}
        else:
            allowed = {name.strip() for name in imports.split(",")}
        if indent > 2:
            sub_rules.setdefault(parent, {})[package] = allowed
        else:
            parent = package
            rule[package] = allowed
    return rule, sub_rules


def allowed_imports() -> dict[str, set[str]]:
    """package -> the packages it may import, from the drawing in ARCHITECTURE.md."""
    return drawing_rules()[0]


def permitted(target: str, unit: str, allowed: set[str]) -> bool:
    """Whether `target` (a module, dotted) in `unit` (its package or sub-package) is allowed by
    `allowed`: the whole unit, or that module named as `unit.module`."""
    return "*" in allowed or unit in allowed or target.removeprefix("memctl.").removeprefix("recall.") in allowed \
        or target.removeprefix("memctl.") in allowed


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
    assert set(rule) == {"core", "l4", "longterm", "recall", "learn", "agent", "ops", "serve", "residents", "cli"}
    assert rule["core"] == set() and rule["cli"] == {"*"}
    assert set(drawing_rules()[1]["recall"]) == {"indexing", "ranking", "embeddings"}


def test_every_import_follows_the_package_rule():
    rule, known = allowed_imports(), modules()
    broken = []
    for name, path in known.items():
        source_layer = layer_of(name)
        if source_layer is None:
            continue
        for target in imported_modules(name, path, known):
            target_layer = layer_of(target)
            if target_layer in (None, source_layer) or permitted(target, target_layer, rule[source_layer]):
                continue
            else:
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


def sub_package_of(module: str, package: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["memctl", package] or len(parts) < 3 or not (PACKAGE / package / parts[2]).is_dir():
        return None  # the package itself or one of its top modules (`recall.search`)
    return parts[2]


def test_recall_sub_packages_import_only_what_their_line_names():
    """indexing never imports the ranking or the embeddings; a sub-package never imports the
    modules at recall's top (`search`, `importer`, `show`), which wire the sub-packages together."""
    sub_rules, known = drawing_rules()[1]["recall"], modules()
    assert {p.name for p in (PACKAGE / "recall").iterdir() if (p / "__init__.py").exists()} == set(sub_rules)
    broken = []
    for name, path in known.items():
        source = sub_package_of(name, "recall")
        if source is None:
            continue
        for target in imported_modules(name, path, known):
            if layer_of(target) != "recall" or target == "memctl.recall":
                continue
            unit = sub_package_of(target, "recall")
            if unit == source or (unit is not None and permitted(target, unit, sub_rules[source])):
                continue
            broken.append(f"{name} imports {target} (recall/{source} may import {sorted(sub_rules[source])})")
    assert not broken, "\n".join(broken)


def test_the_modules_others_may_name_import_only_core():
    """A module another package may import by name (`residents.local_socket`, the framing both
    clients use) is a foundation: it imports only `core`, so its importers stay light."""
    rule, known = allowed_imports(), modules()
    named = {f"memctl.{entry}" for allowed in rule.values() for entry in allowed if "." in entry}
    assert named, "the drawing names no single module"
    for module in named:
        targets = {layer_of(t) for t in imported_modules(module, known[module], known)}
        assert targets <= {"core", layer_of(module)}, (module, targets)


def old_paths() -> dict[str, str]:
    moves = {}
    for line in (REPO / "MOVES.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            old, new = (part.strip() for part in line.split("->"))
            moves[old] = new
    return moves


def old_references(moves: dict[str, str]):
    """A function text -> the places in it that name an old path of `moves`: a dotted path, a
    file path (`.py`, with or without `memctl/`) or `from <package> import <module>`. An old
    path that is now a package's path (the ranking module `ranking` became a module of the
    package `ranking`) counts only where it does not go on into that package."""
    children: dict[str, set[str]] = {}
    for new in moves.values():
        children.setdefault(new.rpartition(".")[0], set()).add(new.rpartition(".")[2])
    parents = sorted({old.rpartition(".")[0] for old in moves}, key=len, reverse=True)
    either = "|".join(map(re.escape, parents))
    dotted = re.compile(rf"(?<![\w.])({either})\.(\w+)((?:\.\w+|[ \t]+import[ \t]+\(?\s*\w+)?)")
    slashed = re.compile(rf"(?<![\w/.])(?:memctl/)?({'|'.join(p.split('.', 1)[1].replace('.', '/') for p in parents)})"
                         rf"/(\w+)\.py\b")
    imported = re.compile(rf"from[ \t]+({either})[ \t]+import[ \t]+(\([^)]*\)|[^\n#;\"']*)")

    def old_dotted(match: re.Match) -> bool:
        old = f"{match.group(1)}.{match.group(2)}"
        onward = re.sub(r"^(?:\.|[ \t]+import[ \t]+\(?\s*)", "", match.group(3))
        return old in moves and onward not in children.get(old, set())

    def names(listed: str) -> list[str]:
        listed = re.sub(r"#[^\n]*", "", listed).strip("() \t\n")
        return [item.split()[0] for item in listed.split(",") if item.strip()]

    def places(text: str) -> list[re.Match]:
        hits = [m for m in dotted.finditer(text) if old_dotted(m)]
        hits += [m for m in slashed.finditer(text) if f"memctl.{m.group(1).replace('/', '.')}.{m.group(2)}" in moves]
        hits += [m for m in imported.finditer(text) if any(f"{m.group(1)}.{n}" in moves for n in names(m.group(2)))]
        return hits
    return places


def test_an_old_module_path_is_found_in_every_form_it_takes():
    places = old_references(old_paths())
    # written with @ for "." and ^ for "/", so that neither this file's check nor the rewrite
    # script reads the samples as references
    old = [text.replace("@", ".").replace("^", "/") for text in (
        "import memctl@recall@fuzzy", "see memctl^recall^vectors@py", "in `recall^store@py`",
        "from memctl@recall import search, tuning", "from memctl@recall import (\n    focus,\n)",
        "from memctl@recall@ranking import Ranking", '"memctl@recall@ranking@model_from_root"',
        "-m memctl@recall@semantic_server", "from memctl@core import paths, local_socket",
        "memctl@cli@resident_server", "core^resident_service@py")]
    new = ["import memctl.recall.ranking.fuzzy", "see memctl/recall/embeddings/vectors.py",
           "from memctl.recall import search", "from memctl.recall.ranking import tuning, focus",
           "from memctl.recall.ranking.ranking import Ranking", "memctl.recall.ranking.focus",
           "-m memctl.residents.searcher", "from memctl.residents import service as resident_service",
           "memctl/recall/ranking/ holds", "from memctl.core import paths  # not tuning"]
    assert [text for text in old if not places(text)] == []
    assert [text for text in new if places(text)] == []


def test_no_tracked_text_file_names_a_moved_module_path():
    """Every reference to a module MOVES.txt moved was rewritten (/work/tools/rewrite_moves.py)."""
    places = old_references(old_paths())
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
    found = []
    for relative in filter(None, listed.stdout.decode().split("\0")):
        path = REPO / relative
        if relative == "MOVES.txt" or not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        text = data.decode("utf-8", errors="replace")
        for match in places(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{relative}:{line}: {match.group(0)!r}")
    assert not found, "old module paths (run /work/tools/rewrite_moves.py):\n" + "\n".join(found[:40])
