"""Entry types, their write policies, and what "the same fact" means.

Types come from `[types]` in memctl.toml (defaults in config.DEFAULT_TYPES): a user adds a
type there and it works without code. `merge` types are keyed by (type, topic) and a new
entry supersedes the active one with the same key; `append` types always add, except that a
near-duplicate raises `seen` of the existing entry. One similarity function is shared by
`remember`, the forgotten-fact check and the dream's consolidation, so they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from rapidfuzz import fuzz, process, utils

from memctl.config import Settings
from memctl.entries import Entry
from memctl.errors import UsageError

MERGE = "merge"
APPEND = "append"


@dataclass(frozen=True)
class TypePolicy:
    name: str
    policy: str  # merge | append
    lifespan: str  # long | contextual

    @property
    def merges(self) -> bool:
        return self.policy == MERGE

    @property
    def contextual(self) -> bool:
        return self.lifespan == "contextual"


def known_types(settings: Settings) -> dict[str, TypePolicy]:
    return {
        name: TypePolicy(name, spec.get("policy", APPEND), spec.get("lifespan", "long"))
        for name, spec in settings.types.items()
    }


def policy_for(settings: Settings, type_name: str) -> TypePolicy:
    """The policy of a type; an unknown type is an error that names the known ones."""
    types = known_types(settings)
    if type_name not in types:
        known = ", ".join(sorted(types))
        raise UsageError(
            f"unknown entry type {type_name!r}; known types: {known} "
            f"(add one under [types.{type_name}] in memctl.toml)"
        )
    return types[type_name]


def lifespan_of(types: dict[str, TypePolicy], type_name: str) -> str:
    # entries of a type removed from the config are kept and treated as long-lived
    policy = types.get(type_name)
    return policy.lifespan if policy else "long"


def merge_key(entry: Entry) -> tuple[str, str]:
    return (entry.type, normalize_topic(entry.topic))


def normalize_topic(topic: str) -> str:
    return " ".join(topic.lower().split())


def similarity_threshold(settings: Settings) -> float:
    return float(settings.get("dream", "similarity"))


def normalize(text: str) -> str:
    """Lowercase, punctuation to spaces, whitespace collapsed (CJK characters are kept)."""
    return utils.default_process(text)


def numbers(norm: str) -> frozenset[str]:
    """The words holding digits: "bk-01" and "bk-02", or "3 eggs" and "4 eggs", are different
    facts however similar the rest is, so only texts with the same numbers can be duplicates."""
    return frozenset(w for w in norm.split() if any(c.isdigit() for c in w))


def similarity(a: str, b: str) -> float:
    """0..100: word-order-insensitive edit similarity of the normalized texts (0 if numbers differ)."""
    na, nb = normalize(a), normalize(b)
    if numbers(na) != numbers(nb):
        return 0.0
    return fuzz.token_sort_ratio(na, nb)


def best_match(text: str, candidates: Sequence[str], cutoff: float) -> tuple[int, float] | None:
    """Index and score of the candidate most similar to `text`, if any reaches `cutoff`."""
    if not candidates:
        return None
    found = process.extractOne(
        normalize(text), candidates, scorer=fuzz.token_sort_ratio, processor=normalize, score_cutoff=cutoff
    )
    if found is None:
        return None
    _, score, index = found
    return index, float(score)


def near_duplicate(text: str, entries: Iterable[Entry], cutoff: float) -> tuple[Entry, float] | None:
    wanted = numbers(normalize(text))
    pool = [e for e in entries if numbers(normalize(e.text)) == wanted]
    found = best_match(text, [e.text for e in pool], cutoff)
    if found is None:
        return None
    return pool[found[0]], found[1]
