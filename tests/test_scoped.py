"""memctl.core.scoped behaves as contextlib for every way a block and its generator can end."""

from __future__ import annotations

import contextlib

import pytest

from memctl.core import scoped


class Boom(Exception):
    pass


def _generators(contextmanager):
    @contextmanager
    def plain(log):
        log.append("enter")
        yield 1
        log.append("exit")

    @contextmanager
    def with_finally(log):
        try:
            yield 2
        finally:
            log.append("finally")

    @contextmanager
    def swallowing(log):
        try:
            yield 3
        except Boom:
            log.append("swallowed")

    @contextmanager
    def translating(log):
        try:
            yield 4
        except Boom as exc:
            raise KeyError("translated") from exc

    @contextmanager
    def no_yield(log):
        if False:
            yield

    @contextmanager
    def two_yields(log):
        yield 5
        yield 6

    @contextmanager
    def yields_after_throw(log):
        try:
            yield 7
        except Boom:
            yield 8

    return [plain, with_finally, swallowing, translating, no_yield, two_yields, yields_after_throw]


BLOCKS = [None, Boom("x"), StopIteration("s"), RuntimeError("r"), KeyboardInterrupt(), GeneratorExit()]


def _run(make, block):
    log = []
    try:
        with make(log) as value:
            log.append(("value", value))
            if block is not None:
                raise block
    except BaseException as exc:  # noqa: BLE001 - what comes out is what is compared
        cause = type(exc.__cause__).__name__ if exc.__cause__ else None
        return log, type(exc).__name__, str(exc), exc is block, cause
    return log, None


@pytest.mark.parametrize("index", range(7))
@pytest.mark.parametrize("block", BLOCKS, ids=repr)
def test_contextmanager_as_contextlib(index, block):
    ours = _generators(scoped.contextmanager)[index]
    theirs = _generators(contextlib.contextmanager)[index]
    assert _run(ours, block) == _run(theirs, block)
    assert ours.__name__ == theirs.__name__ and ours.__doc__ == theirs.__doc__


@pytest.mark.parametrize("raised", [None, FileNotFoundError(), OSError(), KeyError(), Boom()], ids=repr)
def test_suppress_as_contextlib(raised):
    def run(suppress):
        try:
            with suppress(OSError, Boom):
                if raised is not None:
                    raise raised
        except BaseException as exc:  # noqa: BLE001
            return type(exc)
        return None

    assert run(scoped.suppress) == run(contextlib.suppress)
