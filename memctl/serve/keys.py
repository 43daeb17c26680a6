"""Per-agent keys: who may call `memctl serve` over HTTP, with which scope, in which namespace.

The key file is `.serve/keys.json` in the memory root: not under `.memctl/` (derived, rebuildable)
because nothing can rebuild it, and hidden so the index never reads it as an L3 note. It holds
each key's sha256, never the key: a key is 32 random bytes, so a plain digest cannot be walked
back and a stolen file lets no one in. Written atomically (0600, under its own lock); the server
re-reads it whenever its inode, size or mtime change, so a revoked key is refused at once.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading

from memctl.core import clock, jsoncodec
from memctl.core.errors import MemctlError, NotFound, UsageError
from memctl.core.fsutil import WriterLock, atomic_write_bytes, ensure_private_dir, read_bytes_nofollow

FOLDER = ".serve"
KEYS_NAME = "keys.json"
LOCK_NAME = "keys.lock"
SCOPES = ("read", "write", "admin")  # each allows what the one before it does
TOKEN_PREFIX = "mk_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class KeyRefused(MemctlError):
    """A request without a valid key, or a key that may not do what it asks."""

    http_status = 401


class ScopeRefused(KeyRefused):
    http_status = 403


class KeyFileUnreadable(MemctlError):
    """The key file cannot be read: no request can be let in until it is repaired."""

    http_status = 503


class Key:
    """One agent's key as the file keeps it (its digest, never the key)."""

    __slots__ = ("name", "scope", "namespace", "digest", "created", "revoked")

    def __init__(self, name: str, scope: str, namespace: str, digest: str, created: str, revoked: str = "") -> None:
        self.name, self.scope, self.namespace = name, scope, namespace
        self.digest, self.created, self.revoked = digest, created, revoked

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def to_dict(self, with_digest: bool = False) -> dict:
        data = {"name": self.name, "scope": self.scope, "namespace": self.namespace, "created": self.created,
                "revoked": self.revoked}
        if with_digest:
            data["sha256"] = self.digest
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Key:
        return cls(str(data["name"]), str(data["scope"]), str(data.get("namespace") or ""), str(data["sha256"]),
                   str(data.get("created") or ""), str(data.get("revoked") or ""))


def folder(root) -> str:
    return os.path.join(str(root), FOLDER)


def keys_path(root) -> str:
    return os.path.join(folder(root), KEYS_NAME)


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str, what: str = "key name") -> str:
    if not _NAME.match(name or ""):
        shown = name if len(name or "") <= 70 else name[:64] + "…"
        raise UsageError(f"{what} {shown!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def read_keys(root) -> list[Key]:
    path = keys_path(root)
    try:
        raw = read_bytes_nofollow(path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KeyFileUnreadable(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = jsoncodec.loads(raw)
        return [Key.from_dict(item) for item in data["keys"]]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise KeyFileUnreadable(f"{path} is not a memctl key file; restore it from a backup or remove it "
                          "and add the keys again") from None


def _write_keys(root, keys: list[Key]) -> None:
    data = {"version": 1, "keys": [key.to_dict(with_digest=True) for key in keys]}
    atomic_write_bytes(keys_path(root), (jsoncodec.dumps(data) + "\n").encode("utf-8"))


def _locked(root) -> WriterLock:
    ensure_private_dir(folder(root))
    return WriterLock(os.path.join(folder(root), LOCK_NAME), wait_seconds=10)


def add_key(root, name: str, scope: str, namespace: str = "") -> str:
    """A new key for `name`; returns the key itself, which exists nowhere else afterwards."""
    check_name(name)
    if scope not in SCOPES:
        raise UsageError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if namespace:
        check_name(namespace, "namespace")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with _locked(root):
        keys = read_keys(root)
        if any(key.name == name and not key.revoked for key in keys):
            raise UsageError(f"a key named {name!r} exists; revoke it first (`memctl keys revoke {name}`)")
        keys = [key for key in keys if key.name != name]
        keys.append(Key(name, scope, namespace, digest_of(token), clock.iso()))
        _write_keys(root, keys)
    return token


def revoke_key(root, name: str) -> Key:
    with _locked(root):
        keys = read_keys(root)
        found = [key for key in keys if key.name == name and not key.revoked]
        if not found:
            raise NotFound(f"no active key named {name!r}; `memctl keys list` shows them")
        found[0].revoked = clock.iso()
        _write_keys(root, keys)
    return found[0]


class KeyRing:
    """The server's view of the key file, read again whenever the file changes."""

    def __init__(self, root) -> None:
        self.root = root
        self._signature: tuple | None = None
        self._by_digest: dict[str, Key] = {}
        self._lock = threading.Lock()

    def _current(self) -> dict[str, Key]:
        try:
            info = os.stat(keys_path(self.root))
            signature = (info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            signature = None
        with self._lock:
            if signature != self._signature:
                keys = read_keys(self.root) if signature is not None else []
                self._by_digest = {key.digest: key for key in keys if not key.revoked}
                self._signature = signature
            return self._by_digest

    def authenticate(self, authorization: str | None) -> Key:
        """The key a request's `Authorization: Bearer KEY` header names; KeyRefused (401) else."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise KeyRefused("this server needs a key: send `Authorization: Bearer KEY` "
                             "(`memctl keys add NAME --scope read|write|admin` makes one)")
        key = self._current().get(digest_of(token.strip()))
        if key is None:
            raise KeyRefused("the key is not valid (unknown or revoked)")
        return key
