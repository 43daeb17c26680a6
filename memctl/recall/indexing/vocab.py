"""The index's own dictionary: CJK runs cut into the words the index holds."""

from __future__ import annotations

import math

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.indexing.store import SQLiteStore

MAX_WORD_CHARS = 8
MAX_PREFETCH = 50_000  # candidate words asked for at once (a bigger batch asks run by run, as before)


class VocabSegmenter:
    """Cut a CJK run into the words the index holds, jieba-style (best route + sub-words).

    The query side always uses it (no jieba at search time); a small incremental refresh uses it
    too, so a new session does not pay jieba's dictionary load. `index rebuild` uses jieba."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.log_total = math.log(max(store.item_count(), 1) + 1)
        self._prefetched: dict[str, int] = {}  # candidate -> document frequency (0: not in the index)

    def prefetch(self, texts: list[str]) -> None:
        """The candidate words of every CJK run of `texts` looked up in one question to the
        store, before the runs are cut one by one (on a server each lookup is a round trip:
        issue #30). The vocabulary does not change until the writer's finish, so the answers
        are the ones each run's own lookup would get."""
        from memctl.recall.indexing.text import CJK_RUN

        wanted: set[str] = set()
        for text in texts:
            for run in CJK_RUN.findall(text):
                wanted.update(_candidates(run[:200]))
        wanted.difference_update(self._prefetched)
        if not wanted or len(wanted) > MAX_PREFETCH:
            return
        found = self.store.document_frequencies(sorted(wanted))
        self._prefetched.update({word: found.get(word, 0) for word in wanted})

    def __call__(self, run: str) -> list[str]:
        run = run[:200]
        known = self._known_substrings(run)
        words = self._best_route(run, known)
        out = []
        for word in words:
            if len(word) > 2:
                out.extend(word[i:i + 2] for i in range(len(word) - 1) if word[i:i + 2] in known)
            if len(word) > 3:
                out.extend(word[i:i + 3] for i in range(len(word) - 2) if word[i:i + 3] in known)
            out.append(word)
        return out

    def _known_substrings(self, run: str) -> dict[str, int]:
        candidates = sorted(_candidates(run))
        kept = self._prefetched
        if kept and all(word in kept for word in candidates):
            return {word: kept[word] for word in candidates if kept[word]}
        return self.store.document_frequencies(candidates)

    def _best_route(self, run: str, known: dict[str, int]) -> list[str]:
        n = len(run)
        best: list[tuple[float, int]] = [(0.0, n)] * (n + 1)
        for i in range(n - 1, -1, -1):
            options = []
            for j in range(i + 1, min(n, i + MAX_WORD_CHARS) + 1):
                word = run[i:j]
                if word in known or j == i + 1:
                    weight = math.log(known.get(word, 0) + 1) - self.log_total - (0 if word in known else 5)
                    options.append((weight + best[j][0], j))
            best[i] = max(options)
        words, i = [], 0
        while i < n:
            j = best[i][1]
            words.append(run[i:j])
            i = j
        return words


def _candidates(run: str) -> set[str]:
    """Every substring of a run up to MAX_WORD_CHARS long: the words it may hold."""
    return {run[i:j] for i in range(len(run)) for j in range(i + 1, min(len(run), i + MAX_WORD_CHARS) + 1)}
