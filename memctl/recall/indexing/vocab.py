"""The index's own dictionary: CJK runs cut into the words the index holds."""

from __future__ import annotations

import math

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from memctl.recall.indexing.store import SQLiteStore

MAX_WORD_CHARS = 8


class VocabSegmenter:
    """Cut a CJK run into the words the index holds, jieba-style (best route + sub-words).

    The query side always uses it (no jieba at search time); a small incremental refresh uses it
    too, so a new session does not pay jieba's dictionary load. `index rebuild` uses jieba."""

    def __init__(self, store: SQLiteStore):
        self.store = store
        self.log_total = math.log(max(store.item_count(), 1) + 1)

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
        candidates = sorted({run[i:j] for i in range(len(run)) for j in range(i + 1, min(len(run), i + MAX_WORD_CHARS) + 1)})
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
