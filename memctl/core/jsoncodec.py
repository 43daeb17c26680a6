"""JSON through the C accelerator `_json` alone, for the write path.

`import json` loads json.decoder, json.scanner and json.encoder and with them `re` (~6M
instructions of a ~100M `remember` process). `dumps` and `loads` here give exactly what
`json.dumps(value, ensure_ascii=…, sort_keys=…)` and `json.loads(data)` give, by calling the
same C functions those reach; anything they would not answer on the fast path (an error, an
encoding other than plain UTF-8, a missing `_json`) goes to the `json` module itself, so an
error is json's own exception and message.
"""

from __future__ import annotations

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # an interpreter without the accelerator: json's own path, same results
    make_encoder = make_scanner = None

_SPACE = " \t\n\r"
_NOT_UTF8_START = (0x00, 0xEF, 0xFE, 0xFF)  # json.detect_encoding: a BOM or UTF-16/32


class _Unencodable(Exception):
    """Raised by the encoder's `default`: json.dumps then gives its own TypeError."""


def _default(value):
    raise _Unencodable


class _Context:
    """The attributes `_json.make_scanner` reads from a JSONDecoder, with json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod({"-Infinity": float("-inf"), "Infinity": float("inf"),
                                   "NaN": float("nan")}.__getitem__)
    memo: dict = {}


_ENCODERS: dict = {}
_SCAN = make_scanner(_Context()) if make_scanner is not None else None


def _encoder(ascii: bool, sort_keys: bool):
    found = _ENCODERS.get((ascii, sort_keys))
    if found is None:
        quote = encode_basestring_ascii if ascii else encode_basestring
        # json.JSONEncoder's one-shot call: markers (check_circular), indent None, ", " and ": "
        found = _ENCODERS[ascii, sort_keys] = make_encoder(
            {}, _default, quote, None, ": ", ", ", sort_keys, False, True)
    return found


def dumps(value, ascii: bool = False, sort_keys: bool = False) -> str:
    """`json.dumps(value, ensure_ascii=ascii, sort_keys=sort_keys)`."""
    if make_encoder is not None:
        if isinstance(value, str):
            return (encode_basestring_ascii if ascii else encode_basestring)(value)
        try:
            return "".join(_encoder(ascii, sort_keys)(value, 0))
        except (_Unencodable, ValueError, TypeError, RecursionError):
            pass  # json raises its own error (or, if it can, answers)
    import json

    return json.dumps(value, ensure_ascii=ascii, sort_keys=sort_keys)


def loads(data):
    """`json.loads(data)` for str or bytes."""
    if _SCAN is not None:
        text = _plain_text(data)
        if text is not None:
            try:
                value, end = _SCAN(text, len(text) - len(text.lstrip(_SPACE)))
                if end == len(text) or not text[end:].strip(_SPACE):
                    return value
            except (StopIteration, ValueError, RecursionError, SystemError):
                # SystemError: CPython 3.11's C scanner reports an unterminated string through
                # json.decoder, which it does not import, and so raises nothing; json.loads says why
                pass
    import json

    return json.loads(data)


def _plain_text(data) -> str | None:
    """The str json.loads would parse, or None when its careful path must decide: a str
    starting with a BOM, bytes in another encoding than UTF-8 without BOM, bytes not UTF-8."""
    if isinstance(data, str):
        return None if data.startswith("\ufeff") else data
    if not isinstance(data, bytes):
        return None
    if data and (data[0] in _NOT_UTF8_START or (len(data) > 1 and data[1] == 0)):
        return None
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def scanner():
    """json's scanner (`scan(text, index) -> (value, end)`), C when there is one."""
    if _SCAN is not None:
        return _SCAN
    import json
    from json.scanner import make_scanner as python_scanner

    return python_scanner(json.JSONDecoder())
