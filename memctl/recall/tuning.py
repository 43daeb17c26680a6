"""Every number the ranking uses, in one place (memctl.recall.search and its stages read them
from here at call time, so a benchmark or a test sets each on this one module).

The stages: candidates (memctl.recall.candidates), weighted BM25 (memctl.recall.rescoring),
session context, session feedback and neighbouring turns (memctl.recall.context), the typo
fallback (memctl.recall.fuzzy)."""

SESSION_WEIGHT = 0.5
NEIGHBOUR_WEIGHT = 0.3
NEIGHBOUR_SOURCES = 30
LAYER_PRIORITY_STEP = 0.05  # a mode's first layer wins ties over its second, and so on
MIN_CANDIDATES = 200
MAX_CANDIDATES = 20_000
COMMON_TERM_SHARE = 0.1  # at scale, terms in more than this share of items carry almost no signal
COMMON_TERM_MIN_ITEMS = 50_000
MAX_QUERY_TERMS = 64
SMALL_INDEX_ITEMS = 20_000  # below this, every match is ranked
RANK_ALL_LIMIT = 2_000  # above this many expected matches, bound the ranking work
NEWEST_MATCHES = 500
SMALL_SESSION_DOCS = 500  # up to this many session documents, rank them all (FTS5 bm25, one statement per weight)
SESSIONS_SCORED = 30  # beyond it, score the sessions of the best candidates only
SESSIONS_RANKED = 200  # up to SMALL_SESSION_DOCS: the best this many session documents per term weight
ITEMS_RESCORED = 100  # weighted terms: the best candidates are scored again (memctl.recall.scoring)
FEEDBACK_WEIGHT = 0.6  # session feedback: share of a strong match's score its session's related items get
FEEDBACK_SOURCES = 3  # the best this many matches (with a session) lend their score
FEEDBACK_SPAN = 8  # to items of their session at most this many rows before or after them
