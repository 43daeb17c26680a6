"""Piped search output: one hit a line, `ref<TAB>layer<TAB>score<TAB>snippet`, with snippets of
native-JSON sessions shown as their text. Shared by the lean path and the full command line."""

from __future__ import annotations

_SCAFFOLD_MARK = ("'type': '", '"type": "', '"role": "', "'}", '"}')
_ESCAPES = {"\\": "\\", "n": " ", "t": " ", "r": "", "'": "'", '"': '"'}


def readable_snippet(text: str) -> str:
    """One line of a hit's snippet for people: escapes decoded and the JSON/repr keys of
    native-format session logs dropped (text of other items is only whitespace-folded)."""
    if any(mark in text for mark in _SCAFFOLD_MARK):
        import re

        text = re.sub(r"\\(\\|n|t|r|'|\")", lambda m: _ESCAPES[m.group(1)], text)
        text = re.sub(r"""^…\w*['"]\s*:\s*['"][^'"]*['"]\s*,""", "…", text)  # a key cut by the window
        text = re.sub(r"""[\[{]*\s*['"](?:type|role|id|name|tool_use_id|signature)['"]\s*:\s*['"][^'"]*['"]\s*,?""", " ", text)
        text = re.sub(r"""['"](?:text|content|thinking|input|arguments)['"]\s*:\s*[\[{]?['"]?""", " ", text)
        text = re.sub(r"""['"]\s*[}\]]+\s*,?|[{\[]\s*(?=[{\[])|[{\[,]?\s*['"]\w*['"]?\s*:?\s*['"]?\w*…$""", " ", text)
    return " ".join(text.split())


def tsv_line(hit) -> str:
    """The piped form of a hit: ref, layer, score, snippet (shared with the full command line)."""
    return f"{hit.ref}\t{hit.layer}\t{hit.score:.3f}\t{readable_snippet(hit.snippet)}"
