"""Documents made ready for the index: redacted, then tokenized, in batches, on every core
when the work is big enough to pay for a process pool (an `index rebuild`, a first build),
in this process otherwise (a refresh after a few sessions).

Either way a batch goes through the same function (`prepare_batch`), and the writer inserts
the batches in the order they were given, so an index built in parallel has the same rows,
rowids and terms as one built serially (tests/test_index_build.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter, deque

from memctl.recall.indexing.core_sample import CoreSample, forced_preparers, usable_cores
from memctl.recall.indexing.text import Tokenizer

TYPE_CHECKING = False  # typing costs ~20 ms to import, paid by every search
if TYPE_CHECKING:
    from typing import Sequence

    from memctl.recall.indexing.documents import Doc, IndexOptions

# Batches are measured in characters, a non-ASCII text's counted three times (`text_size`:
# about the bytes it was read as, as the pass's expected bytes are, and nearer its work: a CJK
# character costs far more than an ASCII one to prepare; counted once, a Chinese build had a
# third as many batches, its last one kept a worker busy alone for a fifth of a second)
BATCH_CHARS = 256_000  # text per batch: big enough that a worker's round trip is noise
# a pool costs ~0.1 s to start (fork, each worker's segmenter): below this much text (in
# characters seen, or in bytes the pass expects to read), one core
PARALLEL_AFTER_CHARS = 2_000_000


# What FTS5's tokenizer (unicode61, store.FTS_TOKENIZE) keeps in a token exactly as memctl
# wrote it: ASCII terms (lowercase letters, digits, '-_.'), the lowercase letters of Latin-1,
# Latin Extended-A/B, IPA, Greek, Cyrillic and Latin Extended Additional, and the CJK
# ideographs of Unicode 3.0 (all in SQLite's Unicode 6.1 tables, the oldest FTS5 has) but
# those FTS5 folds further (`ς` to `σ`, `ſ` to `s`, the Greek symbol forms `ϐϑϕϖϰϱϵ`, `ẛ`).
# A body with any other character may hold a term FTS5 cuts or folds otherwise
# (tests/test_index_build.py checks every character of the class against this SQLite).
# Compiled at its first non-ASCII body (~0.8 ms, which every search process paid at import).
_FTS5_MAY_CUT_OTHERWISE = ("[^\x00-\x7f\u00c0-\u02af\u0370-\u04ff\u1e00-\u1eff\u3400-\u4db5"
                           "\u4e00-\u9fa5]|[\u017f\u03c2\u03d0\u03d1\u03d5\u03d6\u03f0\u03f1\u03f5\u1e9b]")


def fts5_keeps_terms(body: str) -> bool:
    """Whether FTS5's terms of `body` are memctl's (`body.split()`): then a new index can take
    its document frequencies from FTS5 (memctl.recall.indexing.writer)."""
    return body.isascii() or re.search(_FTS5_MAY_CUT_OTHERWISE, body) is None


def text_size(text: str) -> int:
    """A text's size for batching (see BATCH_CHARS), without encoding it (`isascii` is O(1))."""
    return len(text) if text.isascii() else 3 * len(text)


class SessionText:
    """A compressed session's text, given to the writer uncut: its documents are cut where the
    batch is prepared (memctl.recall.indexing.documents.session_docs), in a worker for a big build, so
    the writer's process (the one part of a build on a single core) only reads and inserts."""

    __slots__ = ("name", "text")

    def __init__(self, name: str, text: str):
        self.name, self.text = name, text

    def __len__(self) -> int:
        return text_size(self.text)


class Prepared:
    """One batch's results, in the batch's order: the redacted text of each document (None
    where redaction changed nothing), its index body (terms joined by spaces), how many of
    the batch's documents hold each term, the surface words that may enter the typo table
    (`surface_candidates`) not given before in this pass, and the documents cut from each
    SessionText of the batch (`cut`, in order).

    When the batch goes into a new index, the frequencies count only the documents in `odd`
    (their positions in the batch): those whose terms FTS5 may not keep as they are; the
    writer takes the others' from FTS5 itself."""

    __slots__ = ("texts", "bodies", "document_frequencies", "words", "odd", "cut")

    def __init__(self, texts: list[str | None], bodies: list[str], document_frequencies: dict[str, int],
                 words: set[str], odd: list[int] | None = None, cut: list[list[Doc]] | None = None):
        self.texts, self.bodies = texts, bodies
        self.document_frequencies, self.words = document_frequencies, words
        self.odd = odd if odd is not None else []
        self.cut = cut if cut is not None else []

    def __reduce__(self):
        # From a worker, terms and words travel as one newline-joined string each (neither
        # holds whitespace): pickling thousands of small strings one by one cost the writer,
        # which unpickles every batch, ~10% of a Latin build. Cut documents travel as tuples.
        return (_unpack, (self.texts, self.bodies, "\n".join(self.document_frequencies),
                          list(self.document_frequencies.values()), "\n".join(self.words), self.odd,
                          [[_doc_fields(doc) for doc in docs] for docs in self.cut]))


def _doc_fields(doc: Doc) -> tuple:
    return (doc.ref, doc.layer, doc.text, doc.date, doc.type, doc.item_id, doc.session, doc.in_context)


def _unpack(texts: list[str | None], bodies: list[str], terms: str, counts: list[int], words: str,
            odd: list[int], cut: list[list[tuple]]) -> Prepared:
    from memctl.recall.indexing.documents import Doc

    return Prepared(texts, bodies, dict(zip(terms.split("\n") if terms else (), counts)),
                    set(words.split("\n")) if words else set(), odd,
                    [[Doc(*fields) for fields in docs] for docs in cut])


def surface_candidates(words: set[str]) -> set[str]:
    """The surface words the typo table can keep (memctl.recall.indexing.writer lowercases them)."""
    return {word for word in words if len(word) >= 4 and word.isalpha()}


class BatchOptions:
    """How one pass prepares its batches: the index options, whether it goes into a new index
    (document frequencies then come from FTS5: `Prepared`), and the words this process has
    already given in the pass (a word is sent once, not once per batch)."""

    __slots__ = ("index", "new_index", "words_given")
    WORDS_GIVEN_LIMIT = 200_000  # past it, forget them (ids and hashes never repeat): a word given twice is harmless

    def __init__(self, index: IndexOptions, new_index: bool = False):
        self.index, self.new_index = index, new_index
        self.words_given: set = set()  # words (str) and ASCII chunks (bytes: Tokenizer.body)

    def new_words(self, tokenizer: Tokenizer) -> set[str]:
        """The surface candidates the tokenizer collected that this process has not given yet."""
        if len(self.words_given) > self.WORDS_GIVEN_LIMIT:
            self.words_given.clear()
        return surface_candidates(tokenizer.take_words(self.words_given))


def cut_sessions(parts: Sequence[str | SessionText]) -> tuple[list[str], list[list[Doc]]]:
    """The documents' texts of a batch's parts (a SessionText is cut into its documents here),
    and the documents cut from each SessionText."""
    if all(isinstance(part, str) for part in parts):
        return list(parts), []
    from memctl.recall.indexing.documents import session_docs

    texts: list[str] = []
    cut: list[list[Doc]] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        else:
            docs = session_docs(part.name, part.text)
            cut.append(docs)
            texts.extend(doc.text for doc in docs)
    return texts, cut


def prepare_batch(tokenizer: Tokenizer, options: IndexOptions | BatchOptions,
                  parts: Sequence[str | SessionText]) -> Prepared:
    """Cut, redact and tokenize a batch: documents' texts, and sessions' texts cut into
    documents first (the one definition of a document's terms)."""
    from memctl.core.redact import batch_checks, redact  # here, not at the top: a search never needs its patterns

    texts, cut = cut_sessions(parts)
    batch = options if isinstance(options, BatchOptions) else BatchOptions(options)
    redacting, extra_patterns = batch.index.redact_enabled, batch.index.extra_patterns
    shown: list[str | None] = []
    bodies: list[str] = []
    odd: list[int] = []
    frequencies: Counter[str] = Counter()
    checks = batch_checks(texts) if redacting else ()
    for text in texts:
        redacted = redact(text, extra_patterns, checks) if redacting else text
        body = tokenizer.body(redacted)
        if not batch.new_index or not fts5_keeps_terms(body):
            frequencies.update(set(body.split()))
            odd.append(len(bodies))
        shown.append(None if redacted == text else redacted)
        bodies.append(body)
    words = batch.new_words(tokenizer)
    return Prepared(shown, bodies, dict(frequencies), words, odd if batch.new_index else [], cut)


# ---------------------------------------------------------------- the pool's side

# Set just before the fork: each worker starts with this process's tokenizer as it is
# (copy-on-write), caches warmed by the batch this process prepared first, not a new one. A
# segmenter not loaded yet is loaded by each worker on its first CJK run, on both cores at
# once (and never, when the text has none). Each worker keeps its own copy of the pass's
# BatchOptions (the words it has given).
_WORKER: tuple[Tokenizer, BatchOptions] | None = None
WORKER_NICENESS = 5  # the writer's inserts are the one serial part of a build: on a full core, it comes first


def _serve(connection, inherited: list) -> None:
    """A worker: prepare each batch the writer sends, send back its Prepared (or the error),
    until the writer says stop or is gone. A thread takes the batches off the pipe as they
    come, so the writer can hand over the next batch while this one is prepared (a writer
    blocked sending it while this worker is blocked sending a big result would wait for each
    other otherwise)."""
    import queue
    import threading

    for other in inherited:  # the other workers' ends: the writer's death must read as EOF here
        other.close()
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    tokenizer, options = _WORKER
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_take_batches, args=(connection, inbox), daemon=True).start()
    while (parts := inbox.get()) is not None:
        try:
            result = prepare_batch(tokenizer, options, parts)
        except Exception as exc:  # noqa: BLE001 - the writer raises it, where the user sees it
            result = exc
        try:
            connection.send(result)
        except OSError:
            return


def _take_batches(connection, inbox) -> None:
    """The worker's batches into `inbox` as they arrive; None when the writer says stop or is
    gone, or a batch cannot be read (the worker ends: the writer reads that as its failure)."""
    while True:
        try:
            parts = connection.recv()
        except Exception:  # noqa: BLE001 - EOF, a closed pipe, a batch that cannot be unpickled
            parts = None
        inbox.put(parts)
        if parts is None:
            return


def _worker_gone() -> None:
    from memctl.core.errors import WriteFailed

    raise WriteFailed("a process preparing the index's documents ended without its results: "
                      "the index was not written") from None


class ForkedWorkers:
    """Forked processes that prepare batches, with no helper thread in the writer's process:
    a batch goes to the worker with the fewest in hand (the next in turn among those) and
    results are read back in the order sent, by the thread that sends. (multiprocessing.Pool's
    result thread took the GIL from the writer around its SQLite steps: the writer's CPU grew
    ~50% beside a pool, bench/RESULTS.md.) Up to `depth` batches in a worker's hands: the
    next one waits in the worker (its receiving thread, `_serve`) while it prepares this one,
    so it never sits idle while the writer inserts. A writer that prepares too (fewer workers
    than preparers) gives one: its hands are full sooner, and it prepares instead of waiting."""

    def __init__(self, count: int, depth: int = 2):
        self.depth = depth
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._connections: list = []
        self._processes: list = []
        self._order: deque[int] = deque()  # the workers holding a batch, in the order sent
        self.sent = self.received = 0
        try:
            for _ in range(count):
                mine, theirs = context.Pipe()
                process = context.Process(target=_serve, args=(theirs, [*self._connections, mine]), daemon=True)
                process.start()
                theirs.close()
                self._connections.append(mine)
                self._processes.append(process)
        except BaseException:
            self.stop(at_once=True)
            raise

    @property
    def count(self) -> int:
        return len(self._connections)

    def free(self) -> bool:
        """Whether a worker has fewer than `depth` batches in hand."""
        return len(self._order) < self.count * self.depth

    def ready(self) -> bool:
        """Whether the oldest batch's result has started to arrive (reading it will not wait long)."""
        return bool(self._order) and self._connections[self._order[0]].poll()

    def send(self, parts: list[str | SessionText]) -> None:
        """To the worker with the fewest batches in hand, the next in turn among them (one must
        have room: `free`)."""
        turns = [n % self.count for n in range(self.sent, self.sent + self.count)]
        worker = min(turns, key=self._order.count)
        try:
            self._connections[worker].send(parts)
        except OSError:
            _worker_gone()
        self._order.append(worker)
        self.sent += 1

    def receive(self) -> Prepared:
        """The oldest batch's result (the error it raised, raised here)."""
        connection = self._connections[self._order.popleft()]
        self.received += 1
        try:
            result = connection.recv()
        except (EOFError, OSError):
            _worker_gone()
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self, at_once: bool) -> None:
        """End the workers: after their last batch, or at once (what they hold is dropped)."""
        for connection in self._connections:
            if not at_once:
                with contextlib.suppress(OSError):
                    connection.send(None)
            connection.close()
        for process in self._processes:
            if at_once:
                process.terminate()
            process.join()
        self._connections, self._processes = [], []
        self._order.clear()


# ---------------------------------------------------------------- the writer's side

class Preparer:
    """Takes batches in order, gives back (batch, Prepared) in the same order: at once when it
    works in this process, a few batches later when a pool works on them.

    With a pool, this process prepares a batch itself rather than wait long for a worker (all
    workers' hands full, the oldest result not expected soon): the cores stay busy whichever
    side is slower.
    The first batches of a pass known to be big wait, unprepared, while the pool decides how
    busy the cores are (`CoreSample`: the few milliseconds the pass takes to read them), then
    go to the pool; a pass that grows big without saying so prepares its first batches here
    while the sample runs."""

    FIRST_BATCH_CHARS = 64_000  # the writer starts inserting this soon
    LAST_BATCHES = 4  # the pass's end is cut into batches this much smaller, so no core waits long
    HELD_HERE = 1  # batches prepared here waiting for an older worker's result, at most
    HELD_WHILE_SAMPLING = 8  # batches that wait for the pool at a big pass's start, at most
    QUIET_OTHERS = 0.5  # cores other processes keep busy, below which a pool forks a worker per core
    PREPARE_HERE_AFTER = 0.5  # prepare here when the wait for a worker is longer than this share of doing it
    WORKER_SLOWER = 1.15  # a worker's rate against this process's (its caches colder, pages copied on write)
    RESAMPLE_CHARS = 32_000_000  # a big pass that went serial looks at the cores again after this much text

    def __init__(self, tokenizer: Tokenizer, options: IndexOptions, workers: int | None = None,
                 new_index: bool = False):
        self.tokenizer = tokenizer
        if tokenizer is not None:  # None: a writer that only removes (a purge's)
            tokenizer.start_pass()
        self.options = BatchOptions(options, new_index)
        self.workers = workers  # None: decided when the pass is big enough to want a pool
        self.chars_seen = 0
        self.expected_bytes = 0  # what the pass will read, when it knows (a rebuild does)
        self._pool: ForkedWorkers | None = None
        self._sample: CoreSample | None = None
        self._here = 0  # batches prepared here while the sample was too short to tell
        # [batch, Prepared or None: in a worker's hands, when the worker should be done], oldest first
        self._in_flight: deque = deque()
        self._held: list[tuple[list, list, int]] = []  # (batch, texts, chars) waiting for the sample (_sampling)
        self._seconds_per_char = 8e-8  # preparing here (Latin; measured from the first batch on)
        self._serial_since = 0  # chars_seen when the pass last decided to stay serial
        self._resample: CoreSample | None = None

    def expect(self, byte_count: int) -> None:
        """How much the pass will read: a big pass starts sampling the cores now."""
        self.expected_bytes = byte_count
        if self._big() and self.workers is None and self._sample is None:
            self._sample = CoreSample()

    def batch_chars(self) -> int:
        """How much text the next batch should hold: little for the first of a big pass, less
        towards its end (the last batches' preparing and inserting are not overlapped)."""
        if not self._big():
            return BATCH_CHARS
        least = min(BATCH_CHARS, self.FIRST_BATCH_CHARS)
        if self.chars_seen == 0:
            return least
        left = self.expected_bytes - self.chars_seen
        if left <= 0:  # a pass of unknown size (or one that read more than it said)
            return BATCH_CHARS
        return max(least // 2, min(BATCH_CHARS, left // self.LAST_BATCHES))

    def submit(self, batch: list, texts: list[str]) -> list[tuple[list, Prepared]]:
        """Hand over one batch (anything: it comes back untouched) and its texts; returns the
        batches that are ready, oldest first."""
        chars = sum(text_size(part) if isinstance(part, str) else len(part) for part in texts)
        if self._sampling():
            self.chars_seen += chars
            self._held.append((batch, texts, chars))
            return []
        return self._release_held() + self._hand_over(batch, texts, chars)

    def _sampling(self) -> bool:
        """Whether a batch should wait, unprepared, while the sample of the cores runs: the first
        batches of a pass known to be big, up to HELD_WHILE_SAMPLING of them. Prepared here,
        the first batch kept the workers from starting for its whole time (a Chinese build's
        first 64k characters, with the segmenter's start: 0.27 s on one core); held, it goes to
        the pool with the others (each worker loads the segmenter itself, both at once)."""
        return (self._pool is None and self.workers is None and self._sample is not None and self._big()
                and len(self._held) < self.HELD_WHILE_SAMPLING and not self._sample.telling(0)
                and self.tokenizer.portable())

    def _release_held(self) -> list[tuple[list, Prepared]]:
        """The batches held while the sample ran, handed over in order (the pool decided now)."""
        if not self._held:
            return []
        held, self._held = self._held, []
        if self.workers is None:
            self.workers = usable_cores(self._sample)
        self.chars_seen -= sum(chars for _, _, chars in held)  # counted again as each is handed over
        return [ready for batch, texts, chars in held for ready in self._hand_over(batch, texts, chars)]

    def _hand_over(self, batch: list, texts: list[str], chars: int) -> list[tuple[list, Prepared]]:
        pool = self._pool_if_worth_it()
        self.chars_seen += chars
        if pool is None:
            return [(batch, self._prepare_here(texts, chars))]
        ready = self._take_ready()
        if not pool.free():
            if self._sooner_here(chars):
                self._in_flight.append([batch, self._prepare_here(texts, chars), 0.0])
                return ready + self._take_ready()
            ready.append(self._collect_oldest())
        pool.send(texts)
        expected = time.perf_counter() + chars * self._seconds_per_char * self.WORKER_SLOWER
        self._in_flight.append([batch, None, expected])
        return ready

    def _prepare_here(self, texts: list, chars: int) -> Prepared:
        started = time.perf_counter()
        prepared = prepare_batch(self.tokenizer, self.options, texts)
        if chars >= 10_000:  # this process's rate, for `_sooner_here` (wall time: what waiting costs)
            rate = (time.perf_counter() - started) / chars
            self._seconds_per_char = (self._seconds_per_char + rate) / 2
        return prepared

    def _sooner_here(self, chars: int) -> bool:
        """Whether to prepare this batch here rather than wait for the oldest worker's: only
        while the wait would be long. A worker that finishes while this process prepares sits
        idle until it is given its next batch, so preparing here whenever the worker is busy
        left it idle a third of the time (bench/RESULTS.md)."""
        if sum(1 for entry in self._in_flight if entry[1] is not None) >= self.HELD_HERE:
            return False
        wait = self._in_flight[0][2] - time.perf_counter()  # the oldest is a worker's (_take_ready)
        return wait > self.PREPARE_HERE_AFTER * chars * self._seconds_per_char

    def drain(self) -> list[tuple[list, Prepared]]:
        """The batches still held or in the pool's hands, oldest first."""
        ready = self._release_held()
        return ready + [self._collect_oldest() for _ in range(len(self._in_flight))]

    def close(self) -> None:
        """Stop the pool (at once when a batch failed: its results are of no use)."""
        self._held.clear()
        if self._pool is not None:
            self._pool.stop(at_once=bool(self._in_flight))
            self._pool = None
            self._in_flight.clear()

    def _take_ready(self) -> list[tuple[list, Prepared]]:
        """The oldest batches whose results are here already, without waiting."""
        ready = []
        while self._in_flight and (self._in_flight[0][1] is not None or self._pool.ready()):
            ready.append(self._collect_oldest())
        return ready

    def _collect_oldest(self) -> tuple[list, Prepared]:
        batch, prepared, _ = self._in_flight.popleft()
        return batch, prepared if prepared is not None else self._pool.receive()

    def _big(self) -> bool:
        return max(self.chars_seen, self.expected_bytes) >= PARALLEL_AFTER_CHARS

    def _pool_if_worth_it(self):
        if self._pool is not None:
            return self._pool
        if not self.tokenizer.portable() or not self._big():
            return None
        if self.workers is None:
            if self._sample is None:  # a pass of unknown size that has grown big: this batch here, then decide
                self._sample = CoreSample()
                return None
            if not self._sample.telling(self._here):
                self._here += 1  # a pass that grew big: its next batches here while the sample runs
                return None
            self.workers = usable_cores(self._sample)
            self._serial_since = self.chars_seen
        if self.workers < 2 and self._stays_serial():
            return None
        import multiprocessing

        if "fork" not in multiprocessing.get_all_start_methods():
            self.workers = 0  # a spawned worker re-imports everything and reloads the dictionary
            return None
        global _WORKER
        _WORKER = (self.tokenizer, BatchOptions(self.options.index, self.options.new_index))
        count = self._workers_to_fork()
        self._pool = ForkedWorkers(count, depth=2 if count >= self.workers else 1)
        return self._pool

    def _stays_serial(self) -> bool:
        """Whether a big pass that decided on one core keeps to it. A busy second at its start
        (another command ending) kept a 1 GB rebuild on one core for its whole length: 222 s
        where two workers took 153 (bench/RESULTS.md). So every RESAMPLE_CHARS of text it
        samples the cores again (while its next batch is prepared) and forks the pool when
        they are free now. MEMCTL_INDEX_WORKERS, when set, is kept."""
        if forced_preparers() is not None or self.workers == 0:
            return True
        if self._resample is None:
            if self.chars_seen - self._serial_since >= self.RESAMPLE_CHARS:
                self._resample = CoreSample()
            return True
        if not self._resample.telling(0):
            return True
        self._sample, self._resample = self._resample, None
        self._serial_since = self.chars_seen
        self.workers = usable_cores(self._sample)
        return self.workers < 2

    def _workers_to_fork(self) -> int:
        """A worker for every usable core while the other cores are quiet: this process's
        inserts, reads and unpickling keep it busy, so a worker fewer (this process preparing
        when it would wait) left a core idle for much of a build (1 GB on 2 cores: 157 s
        against 113 s; 8 MB Latin: the workers sat idle a third of the time). The workers run
        niced, so this process, the one serial part, has its core when it needs it. Beside
        other work (a core's worth), one fewer: this process prepares too. MEMCTL_INDEX_WORKERS,
        when set, is taken as it is: the command plus N-1 workers."""
        others = self._sample.others(self.workers) if self._sample is not None else None
        if forced_preparers() is None and (others or 0.0) < self.QUIET_OTHERS:
            return self.workers
        return self.workers - 1
