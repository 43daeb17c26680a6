"""A dream holds L5 as offsets, lengths and ids (issue #31): `dream_rows.read_lean` must see
the rows the whole-file read sees — blank lines, lines that are not entries, a bare CR, CRLF,
invalid UTF-8, a torn last line — and the size and sha256 a later reader compares; read again,
an unchanged file is not read, a grown one only from its old end; a step's staged L5, written
as a stream, holds the bytes the rows say, whatever the size of the chunks.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from memctl.longterm import dream_rows
from memctl.longterm.dream_rows import Rewrite, StagedLean, read_lean
from memctl.longterm.entries import parse_rows, rows_bytes

LINES = [
    json.dumps({"id": "a1", "text": "plain note", "type": "event"}).encode() + b"\n",
    b"\n",
    b"   \n",
    b"not json at all\n",
    json.dumps({"id": "b\u00e9", "text": "\u90e8\u7f72 non-ascii id", "type": "case", "topic": "x"},
               ensure_ascii=False).encode() + b"\r\n",
    b'{"id": "c1", "text": "bare\rcr inside", "type": "event"}\n',
    b'{"id": "d1", "text": "bad \xff utf-8", "type": "event"}\n',
    b'{"id": "\\ud800x", "text": "a lone surrogate in the id", "type": "event"}\n',
    b'{"id": "e1", "text": 3}\n',  # not an entry: text is not a string
    json.dumps({"id": "f1", "text": "supersedes a1", "supersedes": ["a1"]}).encode() + b"\n",
]


@pytest.fixture(params=[1 << 22, 7], ids=["one-chunk", "7-byte-chunks"])
def chunk(request, monkeypatch):
    monkeypatch.setattr(dream_rows, "CHUNK", request.param)
    return request.param


def _expected(data: bytes):
    rows = parse_rows(data, lean=True)
    return [row.raw for row in rows], [row.entry_id for row in rows], [row.entry for row in rows]


def _seen(snapshot):
    rows = snapshot.rows
    return [rows.raw_at(k) for k in range(len(rows))], [rows.id_at(k) for k in range(len(rows))], \
        [row.entry for row in rows]


@pytest.mark.parametrize("torn", [b"", b'{"id": "g1", "text": "torn', b"  "])
def test_the_rows_are_the_rows_of_the_whole_read(tmp_path, chunk, torn):
    path = tmp_path / "long_term.jsonl"
    data = b"".join(LINES) + torn
    path.write_bytes(data)
    snapshot = read_lean(path)
    assert _seen(snapshot) == _expected(data)
    assert snapshot.size == len(data) and snapshot.digest == hashlib.sha256(data).hexdigest()
    assert snapshot.ends_whole() == (not torn)
    assert snapshot.data is None and snapshot.begins(data)
    assert [k for k in range(len(snapshot.rows)) if snapshot.rows.may_link(k)] == [2, 6, 8]  # topic, \\u, supersedes
    assert snapshot.rows.twice() == set()


def test_an_unchanged_file_is_not_read_again_and_a_grown_one_only_from_its_end(tmp_path, chunk, monkeypatch):
    path = tmp_path / "long_term.jsonl"
    path.write_bytes(b"".join(LINES))
    first = read_lean(path)
    assert read_lean(path, previous=first) is first
    more = json.dumps({"id": "a1", "text": "again", "type": "event"}).encode() + b"\n" + b"x\ry\n"
    with open(path, "ab") as handle:
        handle.write(more)
    parsed = []
    real = dream_rows._entry_id
    monkeypatch.setattr(dream_rows, "_entry_id", lambda raw: parsed.append(raw) or real(raw))
    grown = read_lean(path, previous=first)
    assert parsed == [row.raw for row in parse_rows(more, lean=True)]  # the new lines only
    assert _seen(grown) == _expected(b"".join(LINES) + more)
    assert grown.rows.twice() == {"a1"}
    assert _seen(first) == _expected(b"".join(LINES))  # the earlier snapshot is left as it was


def test_an_edit_in_place_is_read_whole_again(tmp_path, chunk):
    path = tmp_path / "long_term.jsonl"
    path.write_bytes(b"".join(LINES))
    first = read_lean(path)
    edited = b"".join(LINES).replace(b"plain note", b"PLAIN NOTE") + b'{"id": "z", "text": "new"}\n'
    with open(path, "r+b") as handle:  # same inode, grown, its old bytes changed
        handle.write(edited)
    again = read_lean(path, previous=first)
    assert _seen(again) == _expected(edited)


def test_a_staged_lean_rewrite_streams_the_rows_it_says(tmp_path, chunk):
    path = tmp_path / "long_term.jsonl"
    data = b"".join(LINES)
    path.write_bytes(data)
    rows = read_lean(path).rows
    replaced = {0: b'{"id": "a1", "text": "plain note", "type": "event", "refs": 2}\n'}
    added = [("n1", b'{"id": "n1", "text": "new entry"}\n')]
    staged = StagedLean(path, Rewrite(rows, {3, 5}, replaced, added), ".staged")
    try:
        tail = b'{"id": "t1", "text": "appended meanwhile"}\n'
        expected = [replaced[0]] + [rows.raw_at(k) for k in range(1, len(rows)) if k not in {3, 5}]
        expected += [raw for _, raw in added]
        assert staged.digest_with(tail) == hashlib.sha256(b"".join(expected) + tail).hexdigest()
        with open(path, "ab") as handle:
            handle.write(tail)
        snapshot = staged.commit(tail)
    finally:
        staged.discard()
    written = path.read_bytes()
    assert written == b"".join(expected) + tail
    assert _seen(snapshot) == _expected(written)
    assert snapshot.digest == hashlib.sha256(written).hexdigest() and read_lean(path, previous=snapshot) is snapshot
    assert not list(tmp_path.glob("*.staged"))


def test_the_earlier_rows_stay_readable_after_a_step_renamed_l5(tmp_path):
    path = tmp_path / "long_term.jsonl"
    path.write_bytes(b"".join(LINES))
    rows = read_lean(path).rows
    before = [rows.raw_at(k) for k in range(len(rows))]
    staged = StagedLean(path, Rewrite(rows, set(range(len(rows))), {}, []), ".staged")
    staged.commit(b"")
    assert path.read_bytes() == b""
    assert [rows.raw_at(k) for k in range(len(rows))] == before
    assert rows_bytes(rows) == b"".join(before)
