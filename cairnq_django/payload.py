"""Encode and decode the JSON columns with the protocol's accept/reject rules.

Django's own JSON encoding writes ``NaN`` and ``DjangoJSONEncoder`` coerces
datetimes and Decimals; both would write rows other SDKs cannot read or would
silently change values, so every write goes through ``encode`` instead.
"""

from __future__ import annotations

import json
from typing import Any

from .exceptions import SerializationError

_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def encode(value: Any, *, what: str = "value") -> str:
    """Return compact JSON text for ``value`` or raise ``SerializationError``.

    Non-finite floats and anything JSON has no type for (sets, bytes, dates,
    Decimals, UUIDs, objects) are refused; tuples become arrays.
    """
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from exc


def encode_object(value: Any, *, what: str = "payload") -> str:
    """Encode a JSON object (dict); other SDKs fail on other top-level values."""
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise SerializationError(
            f"{what} must be a JSON object (a dict), not {type(value).__name__}"
        )
    return encode(value, what=what)


def decode(text: str | bytes | None) -> Any:
    """Decode a JSON column value; SQL NULL stays None."""
    if text is None:
        return None
    if not isinstance(text, (str, bytes, bytearray)):
        return text  # the driver already decoded it
    return json.loads(text)


def byte_size(value: Any) -> int:
    """Return the UTF-8 size of the compact JSON encoding; 0 if unmeasurable."""
    try:
        return len(_encoder.encode(value).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        return 0
