"""The ranking's internal bounds, in one place (memctl.recall.search and its stages read them
from here at call time, so a benchmark or a test sets each on this one module).

The ranking's weights (session context, neighbours, session feedback, how many matches lend
their score, the Chinese term pieces, semantic fusion) are not here: they are `[ranking]` in
memctl.toml, with their one set of defaults in memctl.core.config.DEFAULTS, and reach the
stages as the search's memctl.recall.ranking.ranking.Ranking.

The stages: candidates (memctl.recall.ranking.candidates), weighted BM25 (memctl.recall.ranking.rescoring),
session context, session feedback and neighbouring turns (memctl.recall.ranking.context), the typo
fallbacks for a word the index does not hold (memctl.recall.ranking.fuzzy)."""

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
TYPED_ANSWERS_READ = 30  # the best candidates whose texts the expected-answer and the date stages read
SESSIONS_SCORED = 30  # beyond it, score the sessions of the best candidates only
SESSIONS_RANKED = 200  # up to SMALL_SESSION_DOCS: the best this many session documents per term weight
