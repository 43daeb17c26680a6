"""The operations `memctl serve` offers, one function each, shared by MCP and the HTTP API.

Each takes the server (`service.Service`), the caller (`Caller`: the key's name, scope and
namespace; stdio MCP calls as the local user) and the arguments as a JSON object, checked
against the operation's JSON schema first, and returns a JSON-able dict. Writes go through
the server's batcher (memctl.serve.batcher); reads run over the pure modules: `recall`
search and show, `agent.compose`, `agent.recent`.

A namespace key sees only the entries of its namespace: its searches and composes read L5
(and L6 when asked) and drop every other entry; a ref outside it is refused (403).
"""

from __future__ import annotations

from memctl.core.errors import NotFound, UsageError
from memctl.serve.keys import SCOPES, ScopeRefused, check_name
from memctl.serve.schemas import OPERATION_SCHEMAS, check_arguments

NAMESPACE_LAYERS = ("L5", "L6")
DEFAULT_TYPE = "event"
SESSION_TEXT_LIMIT = 1 << 20  # bytes of an archived session `get` returns
AUDIT_SCAN = 1 << 20  # bytes at the end of the audit log `audit` reads


class Caller:
    __slots__ = ("name", "scope", "namespace")

    def __init__(self, name: str, scope: str, namespace: str = "") -> None:
        self.name, self.scope, self.namespace = name, scope, namespace

    def require(self, scope: str) -> None:
        if SCOPES.index(self.scope) < SCOPES.index(scope):
            raise ScopeRefused(f"key {self.name!r} has scope {self.scope}; this operation needs {scope}")

    def namespace_for(self, asked: str | None) -> str:
        """The namespace a call works in: the key's own, or for an unbound caller the one asked."""
        if asked:
            check_name(asked, "namespace")
        if not self.namespace:
            return asked or ""
        if asked and asked != self.namespace:
            raise ScopeRefused(f"key {self.name!r} is bound to namespace {self.namespace!r}")
        return self.namespace


LOCAL = Caller("local", "admin")  # stdio MCP: the user who started the server


class Operation:
    __slots__ = ("name", "scope", "run", "destructive", "writes")

    def __init__(self, name: str, scope: str, run, destructive: bool = False, writes: bool | None = None) -> None:
        self.name, self.scope, self.run, self.destructive = name, scope, run, destructive
        self.writes = scope != "read" if writes is None else writes

    @property
    def schema(self) -> dict:
        return OPERATION_SCHEMAS[self.name]

    @property
    def read_only(self) -> bool:
        return not self.writes


def call(service, name: str, arguments, caller: Caller) -> dict:
    operation = OPERATIONS.get(name)
    if operation is None:
        raise NotFound(f"no operation {name!r}; the operations are {', '.join(OPERATIONS)}")
    return operation.run(service, checked(name, arguments, caller), caller)


def checked(name: str, arguments, caller: Caller) -> dict:
    """The arguments of a known operation, once the caller's scope allows it and they fit its schema."""
    caller.require(OPERATIONS[name].scope)
    return check_arguments(name, arguments)


# --- writes


def remember(service, args: dict, caller: Caller) -> dict:
    request, namespace = remember_request(args, caller)
    return remembered(service.write_remember(request, caller, namespace), namespace)


def remember_request(args: dict, caller: Caller):
    """The RememberRequest of checked arguments, and the namespace it is written in."""
    from memctl.longterm.remember import RememberRequest

    namespace = caller.namespace_for(args.get("namespace"))
    extra = {"key": caller.name}
    if namespace:
        extra["namespace"] = namespace
    request = RememberRequest(args["text"], args.get("type") or DEFAULT_TYPE, _topic(args.get("topic"), namespace),
                              args.get("confidence", 5), source=f"serve:{caller.name}", extra=extra)
    return request, namespace


def remembered(result, namespace: str) -> dict:
    """A remember's answer."""
    data = result.to_dict()
    if namespace:
        data["namespace"] = namespace
    return data


def _topic(topic: str | None, namespace: str) -> str:
    """A namespace's topics are its own: `NS/topic`, so that one namespace's preference never
    supersedes another's of the same name (merge types keep one entry per type and topic)."""
    if not topic or not topic.strip() or not namespace:
        return topic or ""
    return f"{namespace}/{topic.strip()}"


def forget(service, args: dict, caller: Caller) -> dict:
    from memctl.core import clock
    from memctl.longterm.forget import forget_ids

    entry_id = _entry_id(args["ref"], "L5")
    _check_may_change(service, entry_id, caller)
    reason = args.get("reason") or f"forgotten through memctl serve by {caller.name}"

    def work():
        return forget_ids(service.settings, [entry_id], reason, clock.now(), service.lock_wait)[1]

    result = service.write_alone(work, "forget", caller)
    if not result.forgotten:
        raise NotFound(f"no active entry {entry_id!r} in L5")
    return {"forgotten": result.forgotten, "run": result.run, "restore": f"restore {{\"ref\": \"L6:{entry_id}\"}}"}


def restore(service, args: dict, caller: Caller) -> dict:
    from memctl.core import clock
    from memctl.longterm.forget import restore as restore_entry

    entry_id = _entry_id(args["ref"], "L6")
    _check_may_change(service, entry_id, caller)

    def work():
        return restore_entry(service.settings, entry_id, clock.now(), service.lock_wait)

    entry = service.write_alone(work, "restore", caller)
    return {"restored": entry.id, "entry": service.scrubbed_entry(entry.to_dict())}


def _entry_id(ref: str, layer: str) -> str:
    prefix, sep, rest = ref.partition(":")
    if sep and prefix in ("L5", "L6"):
        ref = rest
    if not ref.strip():
        raise UsageError(f"give the ref of an entry, e.g. {layer}:ID")
    return ref.strip()


def _check_entry_namespace(service, entry_id: str, caller: Caller) -> None:
    if caller.namespace and service.namespace_of(entry_id) != caller.namespace:
        raise ScopeRefused(f"{entry_id} is not an entry of namespace {caller.namespace!r}")


def _check_may_change(service, entry_id: str, caller: Caller) -> None:
    """forget and restore: a write key changes the entries of its own namespace only (an
    unbound key: the entries of none); an unbound admin key any entry."""
    if caller.scope == "admin" and not caller.namespace:
        return
    found = service.namespace_of(entry_id)
    if found != caller.namespace:
        where = f"namespace {found!r}" if found else "no namespace"
        raise ScopeRefused(f"{entry_id} is an entry of {where}; key {caller.name!r} may change only "
                           + (f"namespace {caller.namespace!r}" if caller.namespace else "entries of no namespace")
                           + " (an admin key may change any)")


# --- reads


def search(service, args: dict, caller: Caller) -> dict:
    namespace = caller.namespace_for(args.get("namespace"))
    k = args.get("k") or int(service.settings.get("search", "k"))
    layers = tuple(args.get("layers") or ())
    hits = service.search(args["query"], k, _layers_for(layers, namespace), namespace)
    # how the search read words the memory does not hold (a typo corrected, a prefix completed),
    # as `search --json` reports them: an agent must not take bk-02's facts for bk-03's
    return {"query": service.scrub(args["query"]), **service.scrubbed_value(hits.readings()),
            "hits": [service.scrubbed_hit(hit.to_json()) for hit in hits]}


def _layers_for(layers: tuple[str, ...], namespace: str) -> tuple[str, ...]:
    if not namespace:
        return layers
    outside = [layer for layer in layers if layer not in NAMESPACE_LAYERS]
    if outside:
        raise ScopeRefused(f"a namespace holds entries only (L5, L6), not {', '.join(outside)}")
    return layers or ("L5",)


def get(service, args: dict, caller: Caller) -> dict:
    from memctl.core import jsoncodec
    from memctl.recall.show import find_item

    ref = args["ref"].strip()
    item = find_item(service.settings.layout, ref)  # an id alone: L5, then L6
    if item is None:
        item = _session_item(service, ref, caller)
    if item.layer in NAMESPACE_LAYERS:
        _check_entry_namespace(service, item.key, caller)
        return {"ref": f"{item.layer}:{item.key}", "layer": item.layer,
                "entry": service.scrubbed_entry(jsoncodec.loads(item.text))}
    if caller.namespace:
        raise ScopeRefused(f"a namespace key reads its namespace's entries only, not {item.layer}")
    if item.layer == "L4-session":
        item = _session_item(service, item.key, caller)
    return {"ref": ref, "layer": item.layer, "text": service.scrub(item.text)}


def _session_item(service, ref: str, caller: Caller):
    from memctl.l4.sessions import find_session, write_compressed
    from memctl.recall.show import Item

    if caller.namespace:
        raise NotFound(f"no entry {ref!r} in namespace {caller.namespace!r}")
    session = find_session(service.settings.layout, ref)
    chunks: list[bytes] = []
    write_compressed(service.settings.layout, session, chunks.append)
    data = b"".join(chunks)
    text = data[:SESSION_TEXT_LIMIT].decode("utf-8", "replace")
    return Item("L4-session", session.name, text + ("\n[… cut]" if len(data) > SESSION_TEXT_LIMIT else ""))


def compose(service, args: dict, caller: Caller) -> dict:
    budget = args.get("budget") or int(service.settings.get("compose", "budget"))
    namespace = caller.namespace_for(args.get("namespace"))
    if namespace:
        return service.compose_namespace(args["query"], budget, namespace).summary()
    from memctl.agent.compose import compose as run_compose

    result = run_compose(service.settings, args["query"], budget)
    return {**result.summary(), "pieces": [item.to_json() for item in result.items]}


def recent(service, args: dict, caller: Caller) -> dict:
    from memctl.agent.recent import recent as run_recent

    if caller.namespace:
        raise ScopeRefused("recent sessions belong to no namespace; a namespace key reads its entries only")
    sessions = run_recent(service.settings.layout, args.get("n", 5), scrub=service.scrub)
    return {"sessions": [session.to_json() for session in sessions]}


# --- a session's lifecycle (memctl.learn.session): on the writer thread, which they share with
# every other write, since they route what they learn under the writer lock


def turn(service, args: dict, caller: Caller) -> dict:
    from memctl.learn.session import turn as run_turn

    session = _session(args, caller)
    return _session_write(service, caller, "turn",
                          lambda: run_turn(service.settings, session, args["messages"], service.lock_wait))


def compact(service, args: dict, caller: Caller) -> dict:
    from memctl.learn.session import compact as run_compact

    session = _session(args, caller)
    budget = args.get("budget") or int(service.settings.get("compose", "budget"))
    return _session_write(service, caller, "compact",
                          lambda: run_compact(service.settings, session, budget, service.lock_wait))


def dispose(service, args: dict, caller: Caller) -> dict:
    from memctl.learn.session import dispose as run_dispose

    session = _session(args, caller)
    return _session_write(service, caller, "dispose",
                          lambda: run_dispose(service.settings, session, service.lock_wait))


def _session(args: dict, caller: Caller) -> str:
    if caller.namespace:
        raise ScopeRefused("sessions, and the memories learned from them, belong to no namespace; "
                           "a namespace key remembers its facts with `remember`")
    return args["session"]


def _session_write(service, caller: Caller, op: str, work) -> dict:
    outcome = service.write_alone(work, op, caller)
    data = outcome.to_dict()
    if "summary" in data:
        data["summary"] = service.scrub(data["summary"])
    return data


# --- an admin key's


def audit(service, args: dict, caller: Caller) -> dict:
    wanted = args.get("key") or ""
    records = [record for record in service.audit.tail(AUDIT_SCAN) if not wanted or record.get("key") == wanted]
    return {"records": records[-args.get("n", 50):]}


def keys(service, args: dict, caller: Caller) -> dict:
    from memctl.serve.keys import read_keys

    return {"keys": [key.to_dict() for key in read_keys(service.root)]}


OPERATIONS: dict[str, Operation] = {op.name: op for op in (
    Operation("remember", "write", remember),
    Operation("search", "read", search),
    Operation("get", "read", get),
    Operation("compose", "read", compose),
    Operation("recent", "read", recent),
    Operation("forget", "write", forget, destructive=True),
    Operation("restore", "write", restore),
    Operation("turn", "write", turn),
    Operation("compact", "write", compact),
    Operation("dispose", "write", dispose),
    Operation("audit", "admin", audit, writes=False),
    Operation("keys", "admin", keys, writes=False),
)}
