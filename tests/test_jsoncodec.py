"""memctl.core.jsoncodec gives exactly json.dumps / json.loads, errors included."""

import json
import math

import pytest

from memctl.core import jsoncodec

VALUES = [
    {"id": "m-1", "text": "héllo 世界 \u2028 \ud83d\ude00 \"q\" \\ \n\t\x00", "n": 3, "f": 0.1, "big": 10**30,
     "neg": -2.5e-300, "t": True, "no": None, "list": [1, [2, {"a": []}], {}], "nan": math.nan,
     "inf": math.inf, "ninf": -math.inf},
    {"b": 1, "a": 2, 3: "int key", 1.5: "float key", True: "bool", None: "none"},
    [], {}, "", "plain", 0, -0.0, 1e16, 123456789.123, False,
    {"lone surrogate": "\udcff", "ctl": "".join(chr(c) for c in range(32))},
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("ascii", [False, True])
@pytest.mark.parametrize("sort_keys", [False, True])
def test_dumps_matches_json(value, ascii, sort_keys):
    try:
        expected = json.dumps(value, ensure_ascii=ascii, sort_keys=sort_keys)
    except TypeError as exc:  # sort_keys over mixed key types
        with pytest.raises(TypeError, match=str(exc).split(":")[0]):
            jsoncodec.dumps(value, ascii=ascii, sort_keys=sort_keys)
        return
    assert jsoncodec.dumps(value, ascii=ascii, sort_keys=sort_keys) == expected


def test_dumps_errors_are_jsons_own():
    for bad in ({"s": {1, 2}}, {"b": b"x"}, object()):
        with pytest.raises(TypeError) as ours:
            jsoncodec.dumps(bad)
        with pytest.raises(TypeError) as theirs:
            json.dumps(bad, ensure_ascii=False)
        assert str(ours.value) == str(theirs.value)
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        jsoncodec.dumps(loop)


TEXTS = ['{"a": 1}', ' \t\n{"a": [1, 2.5, "x"]}\r\n ', '"s"', "3", "-0", "1e400", "NaN", "-Infinity",
         '{"a": "\\ud83d\\ude00 \\u00e9"}', '[1, 2] ', '{"k": "v"} x', '{"a": 1', "", "   ", "\ufeff{}",
         '{"a": 1}{"b": 2}', '{"a": "\x01"}', "[" * 50 + "]" * 50, '{"a": NaN}', "tru", '{"a" 1}']
BYTES = [t.encode("utf-8") for t in TEXTS] + [
    b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), '{"a": 1}'.encode("utf-16-le"), '{"a": 1}'.encode("utf-32"),
    '{"a": 1}'.encode("utf-32-be"), b"\xff\xfe", b"{\"a\": \"\xff\"}", b"{\"a\": \"\xed\xa0\x80\"}", b"1", b"12", b"123"]


def _outcome(call, data):
    try:
        value = call(data)
    except Exception as exc:  # noqa: BLE001 - the exception is what is compared
        return ("raised", type(exc), str(exc))
    return ("value", repr(value))


@pytest.mark.parametrize("data", TEXTS + BYTES + [bytearray(b'{"a": 1}')])
def test_loads_matches_json(data):
    assert _outcome(jsoncodec.loads, data) == _outcome(json.loads, data)


def test_scanner_is_jsons():
    value, end = jsoncodec.scanner()('x {"a": [1]} y', 2)
    assert (value, end) == ({"a": [1]}, 12)


@pytest.mark.parametrize("data", ['{"a": "b', '"unterminated', b'{"identity": "x", "reason": "cut'])
def test_loads_errors_are_jsons_own_before_json_is_imported(data):
    """A write process may never have imported json: the C scanner's error for an unterminated
    string then needs json.decoder, which is not loaded (it raised SystemError here)."""
    import subprocess
    import sys

    code = ("import sys\nfrom memctl.core import jsoncodec\nassert 'json.decoder' not in sys.modules\n"
            f"try:\n    jsoncodec.loads({data!r})\nexcept ValueError as exc:\n    print(type(exc).__name__, exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    with pytest.raises(ValueError) as theirs:
        json.loads(data)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, f"JSONDecodeError {theirs.value}", "")
