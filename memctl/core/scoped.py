"""`contextmanager` and `suppress` for the write path, without importing contextlib.

contextlib (with the functools and collections it pulls in) is ~3M instructions of a ~100M
`remember` process, which uses only these two. `contextmanager` follows contextlib's
generator protocol (the same exceptions reach the generator, the same come out of the
`with`); it is not a decorator of functions (contextlib's ContextDecorator), which no caller
uses.
"""

from __future__ import annotations


class suppress:  # noqa: N801 - named as contextlib's
    """`with suppress(FileNotFoundError): ...` as contextlib.suppress."""

    __slots__ = ("_kinds",)

    def __init__(self, *kinds: type[BaseException]) -> None:
        self._kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, traceback) -> bool:
        return kind is not None and issubclass(kind, self._kinds)


def contextmanager(func):
    """A generator function made a context manager, as contextlib.contextmanager."""

    def make(*args, **kwargs):
        return _GeneratorScope(func(*args, **kwargs))

    make.__name__, make.__qualname__, make.__doc__ = func.__name__, func.__qualname__, func.__doc__
    make.__module__, make.__wrapped__ = func.__module__, func
    return make


class _GeneratorScope:
    __slots__ = ("_gen",)

    def __init__(self, gen) -> None:
        self._gen = gen

    def __enter__(self):
        try:
            return next(self._gen)
        except StopIteration:
            raise RuntimeError("generator didn't yield") from None

    def __exit__(self, kind, value, traceback) -> bool:
        if kind is None:
            try:
                next(self._gen)
            except StopIteration:
                return False
            self._stuck("generator didn't stop")
        if value is None:  # an exception class alone: an instance, to know it when it comes back
            value = kind()
        try:
            self._gen.throw(kind, value, traceback)
        except StopIteration as exc:
            return exc is not value  # a StopIteration raised in the block is not swallowed
        except RuntimeError as exc:
            if exc is value or (isinstance(value, StopIteration) and exc.__cause__ is value):
                value.__traceback__ = traceback
                return False
            raise
        except BaseException as exc:
            if exc is not value:
                raise
            exc.__traceback__ = traceback
            return False
        self._stuck("generator didn't stop after throw()")

    def _stuck(self, message: str):
        try:
            raise RuntimeError(message)
        finally:
            self._gen.close()
