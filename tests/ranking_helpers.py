"""What the end-to-end ranking tests share: a memory of given items imported through the
installed `memctl`, and the ids a search ranks first."""

from __future__ import annotations

import json


def import_items(run, root, items: list[dict]) -> None:
    """`memctl init` and `memctl import` of `items` (JSON Lines) into a new memory at `root`."""
    assert run("init", root=root).returncode == 0
    path = root.parent / "items.jsonl"
    path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    assert run("import", str(path), root=root).returncode == 0


def ranked_ids(run, root, query: str, k: int = 5) -> list[str]:
    """The ids of an L6 search's best k, in order."""
    result = run("search", "--layers", "L6", "--json", "-k", str(k), query, root=root)
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["id"] for line in result.stdout.decode().splitlines()]


def own_sessions(**texts: str) -> list[dict]:
    """id=text items, each in a session of its own (s1, s2, … in order)."""
    return [{"id": key, "text": text, "session": f"s{n}"} for n, (key, text) in enumerate(texts.items(), 1)]


def others(*texts: str) -> list[dict]:
    """Items about other things, each its own session: the background a ranking test needs so
    that its words are not in every item (BM25's IDF)."""
    return [{"id": f"other{n}", "text": text, "session": f"o{n}"} for n, text in enumerate(texts)]
