"""The reference log is read once per dream: every pair, the new pairs and the cursor after
them come from one read, and say what two reads (the whole log, then from the cursor) said."""

from __future__ import annotations

import random

from memctl.longterm.refs import read_refs


def _two_reads(data: bytes, offset: int):
    """The log read from the start, then from `offset`, the way a dream read it before."""
    def pairs_from(start: int):
        if start > len(data):
            start = 0
        end = data.rfind(b"\n") + 1
        if end <= start:
            return [], start
        found = []
        for raw in data[start:end].decode("utf-8", "replace").splitlines():
            parts = raw.split("\t")
            if len(parts) >= 2 and parts[0] and parts[1]:
                found.append((parts[0].strip(), parts[1].strip()))
        return found, end

    everything, _ = pairs_from(0)
    fresh, end = pairs_from(offset)
    return everything, fresh, end


def test_one_read_gives_what_two_reads_gave(tmp_path):
    rng = random.Random(7)
    log = tmp_path / "refs.log"
    pieces = [b"2026-11-30T10:00:0%d\tm%d\n" % (i % 10, i) for i in range(40)] + \
        [b"\n", b"no tab here\n", b"\tm9\n", b"2026-11-30T10:00:00\t\n", b"2026-11-30\tm1\textra\n", "\u00e9\tm2\n".encode()]
    for case in range(300):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        if rng.random() < 0.3:
            data += b"2026-11-30T10:00:00\tm-torn"  # a torn last line
        log.write_bytes(data)
        line_starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 10]
        for offset in {0, len(data), len(data) + 5, rng.choice(line_starts), rng.randrange(0, len(data) + 1)}:
            assert read_refs(log, offset) == _two_reads(data, offset), (case, data, offset)


def test_a_missing_log_has_no_pairs(tmp_path):
    assert read_refs(tmp_path / "refs.log", 12) == ([], [], 0)
