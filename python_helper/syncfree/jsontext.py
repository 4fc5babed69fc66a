"""``json.dumps`` and ``json.loads`` as a run served from ``syncfree check``'s cache needs them, through CPython's C
encoder and scanner (``_json``) without importing the json package: its import compiles json's regular expressions,
which imports re and enum (4 ms, a sixth of such a run). The text is json's own: ``json.dumps`` without ``indent``
is this same C encoder with these arguments, and the scanner is the one ``json.loads`` runs. Anything else (no
``_json``, another Python's arguments, a value or a text the fast way does not take) goes through json itself, which
gives its own answer or error.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's constant, without typing's import: annotations only
if TYPE_CHECKING:
    from typing import Any

try:
    from _json import encode_basestring_ascii as _ascii  # type: ignore[import-not-found]
    from _json import make_encoder as _make_encoder  # type: ignore[import-not-found]
    from _json import make_scanner as _make_scanner  # type: ignore[import-not-found]
except ImportError:  # another Python than CPython
    _make_encoder = _make_scanner = None

__all__ = ["dumps", "loads"]


def _default(value: object) -> object:
    # json.JSONEncoder.default's error (json.dumps is asked again, and raises it)
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


_ENCODERS: dict[tuple[str, str], Any] = {}


def dumps(value: object, separators: tuple[str, str] | None = None) -> str:
    """``json.dumps(value, separators=separators)``, the same text."""
    if _make_encoder is not None and type(value) is not str:
        try:
            item_separator, key_separator = separators if separators is not None else (", ", ": ")
            encoder = _ENCODERS.get((item_separator, key_separator))
            if encoder is None:
                # json.JSONEncoder.iterencode's arguments for json.dumps's defaults (check_circular: a markers
                # dict; ensure_ascii; no indent, sort_keys or skipkeys; allow_nan)
                encoder = _ENCODERS[item_separator, key_separator] = _make_encoder(
                    {}, _default, _ascii, None, key_separator, item_separator, False, False, True)
            return "".join(encoder(value, 0))
        except (TypeError, ValueError, RecursionError):
            pass
    import json

    return json.dumps(value, separators=separators)


class _Decoding:
    """What the C scanner reads of a json.JSONDecoder made with no arguments."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_SCANNER: list[Any] = []


def loads(data: bytes) -> Any:
    """``json.loads(data)``: the same value, or json's error. Bytes that are UTF-8 without a BOM (what this package
    writes) are scanned here; any others go to json."""
    if _make_scanner is not None:
        try:
            text = data.decode("utf-8").strip(" \t\n\r")  # (json's whitespace, around the value)
            if not _SCANNER:
                _SCANNER.append(_make_scanner(_Decoding()))
            value, end = _SCANNER[0](text, 0)
            if end == len(text):
                return value
        except (StopIteration, ValueError, TypeError):
            pass  # not JSON, or not this JSON: json says what
    import json

    return json.loads(data)
