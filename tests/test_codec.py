"""The compressed session form is reversible for any input, whatever the read size."""

from __future__ import annotations

import io
import random
from datetime import datetime

import pytest

import memctl.l4.codec
import memctl.l4.logs
from memctl.l4 import loggen
from memctl.l4.codec import decode_stream, encode_stream
from memctl.core.errors import IntegrityError
from memctl.l4.logs import iter_log


def _corpus() -> list[bytes]:
    rng = random.Random(5)
    mutations = [
        lambda t: t,
        lambda t: t[: rng.randint(0, len(t))],  # truncated anywhere
        lambda t: t.replace(b"\n", b"\r\n"),
        lambda t: b"junk before the first marker\n" + t,
        lambda t: t + "⟪memctl:verbatim 3⟫\nabc\n⟪memctl-end x⟫".encode(),  # our own directives as content
        lambda t: t.replace(b"Running", "\n\n=== Prompt === 2026-01-01 00:00:00\n⟪memctl:same-as 0⟫\n".encode()),
        lambda t: bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000))),
        lambda t: t.rstrip(b"\n"),
        lambda t: t.replace(b"e", b"\xff\xfe", 5),
    ]
    corpus = []
    for number in range(45):
        maker = loggen.format_a if number % 2 else loggen.format_b
        text = maker(datetime(2026, 1, 1), rng.randint(0, 12), rng, rng.randint(10, 2500)).encode()
        corpus.append(mutations[number % len(mutations)](text))
    return corpus


CORPUS = _corpus()


def _round_trip(data: bytes) -> tuple[bytes, bytes]:
    encoded = io.BytesIO()
    encode_stream(io.BytesIO(data), encoded.write)
    decoded = io.BytesIO()
    decode_stream(io.BytesIO(encoded.getvalue()), decoded.write)
    return encoded.getvalue(), decoded.getvalue()


@pytest.mark.parametrize("chunk", [7, 333, 4096, 1 << 22])
def test_round_trip_is_exact_for_any_input_and_read_size(monkeypatch, chunk):
    monkeypatch.setattr(memctl.l4.logs, "CHUNK", chunk)
    monkeypatch.setattr(memctl.l4.codec, "CHUNK", chunk)
    for data in CORPUS:
        encoded, decoded = _round_trip(data)
        assert decoded == data


def test_entry_boundaries_do_not_depend_on_the_read_size():
    for data in CORPUS:
        big = [(type(e).__name__, getattr(e, "marker", b"")) for e in iter_log(io.BytesIO(data), 1 << 22)]
        small = [(type(e).__name__, getattr(e, "marker", b"")) for e in iter_log(io.BytesIO(data), 5)]
        assert big == small


def test_repeated_prompt_heads_become_back_references_and_the_echo_is_dropped():
    text = loggen.format_b(datetime(2026, 4, 5, 9, 0), 25, random.Random(3), 200).encode()
    encoded, decoded = _round_trip(text)
    assert decoded == text
    assert encoded.count("⟪memctl:same-as 0⟫".encode()) == 2  # turns 10 and 20 re-send the tool list
    assert b"=== ASSISTANT ===" not in encoded
    assert len(encoded) < len(text)


def test_a_damaged_compressed_session_is_refused():
    text = loggen.format_a(datetime(2026, 4, 5, 9, 0), 3, random.Random(4), 200).encode()
    encoded, _ = _round_trip(text)
    with pytest.raises(IntegrityError):
        decode_stream(io.BytesIO(encoded.replace(b"Step 1", b"Step 9")), lambda _: None)
    with pytest.raises(IntegrityError):
        decode_stream(io.BytesIO(encoded[: len(encoded) // 2]), lambda _: None)
    with pytest.raises(IntegrityError):
        decode_stream(io.BytesIO(b"not ours\n" + encoded), lambda _: None)


@pytest.mark.parametrize("maker", [loggen.format_a, loggen.format_b])
def test_history_windows_repeat_as_back_references(maker):
    text = maker(datetime(2026, 4, 5, 9, 0), 20, random.Random(6), 300).encode()
    encoded, decoded = _round_trip(text)
    assert decoded == text
    assert encoded.count("⟪memctl:window ".encode()) >= 8  # every odd turn after the first
    assert len(encoded) < len(text)
