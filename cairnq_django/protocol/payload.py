"""Encode and decode the JSON columns with the protocol's accept/reject rules.

Django's own JSON encoding writes ``NaN`` and ``DjangoJSONEncoder`` coerces
datetimes and Decimals; both would write rows other SDKs cannot read or would
silently change values, so every write goes through ``encode`` instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..exceptions import SerializationError
from .json_hints import conversion_hint

# Set on a claimed Task whose payload the claim left in the database (too
# large to carry, see sql/*/claim.sql): the payload's size in bytes, for the
# byte budget. Such a Task has no payload attribute until it is loaded.
DEFERRED_SIZE_ATTR = "cairnq_payload_bytes"

_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _reusable_encoder() -> Callable[[Any, int], Sequence[str]] | None:
    """The C encoder that ``_encoder.encode`` builds afresh on every call, built once.

    Building it costs more than encoding a small payload (0.7 of 1.0 µs for
    ``{"i": 1}``), and every submit encodes one. It is made without the
    circular-reference markers, a dict the encoder writes to and so unsafe
    to share between threads: a cycle runs into RecursionError instead, and
    ``encode`` then asks ``_encoder`` for its own error. None where the
    interpreter has no C accelerator.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    return make(  # type: ignore[no-any-return]
        None,  # markers: no shared state (see above)
        _encoder.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        _encoder.key_separator,
        _encoder.item_separator,
        _encoder.sort_keys,
        _encoder.skipkeys,
        _encoder.allow_nan,
    )


_encode_fast = _reusable_encoder()


def encode(value: Any, *, what: str = "value") -> str:
    """Return compact JSON text for ``value`` or raise ``SerializationError``.

    Non-finite floats and anything JSON has no type for (sets, bytes, dates,
    Decimals, UUIDs, objects) are refused; tuples become arrays.
    """
    if _encode_fast is not None:
        try:
            return "".join(_encode_fast(value, 0))
        except (TypeError, ValueError, RecursionError):
            pass  # refused: the ordinary encoder below raises the usual error
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from exc


def encode_object(value: Any, *, what: str = "payload") -> str:
    """Encode a JSON object (dict); other SDKs fail on other top-level values.

    Beyond ``encode``: text one database cannot store is refused on both
    dialects alike — NUL (PostgreSQL's jsonb rejects it) and lone surrogates
    (not UTF-8). Non-string keys are spelled as strings, as every cairnq SDK
    does (protocol 2.2). Checks run on the encoded text, so the common case
    costs one scan; only a refusal walks the value to name the JSON path.
    """
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise SerializationError(
            f"{what} must be a JSON object (a dict), not {type(value).__name__}"
        )
    try:
        text = encode(value, what=what)
    except SerializationError as exc:
        raise SerializationError(f"{exc} (at {_first_problem(value, what, deep=True) or what})") from exc
    if ("\\u0000" in text and _ESCAPED_NUL.search(text)) or not (text.isascii() or is_utf8(text)):
        problem = _first_problem(value, what) or f"{what}: text that cannot be stored"
        raise SerializationError(f"{what} cannot be stored as JSON: {problem}")
    return text


# A JSON \u0000 escape not itself preceded by an escaped backslash.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def make_storable(value: Any) -> Any:
    """``value`` with NUL spelled ``\\x00`` and lone surrogates replaced, in every string.

    Exception text is the handler's (a message or a filename may hold
    either): PostgreSQL's jsonb refuses NUL and neither database stores a
    lone surrogate, so kept as they are they would lose the whole failure.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\\x00").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {make_storable(k): make_storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [make_storable(item) for item in value]
    return value


def is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_MAX_DEPTH = 500


def _text_problem(path: str, text: str) -> str | None:
    if "\x00" in text:
        return f"{path}: contains NUL (\\u0000), which PostgreSQL cannot store"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{path}: contains a lone surrogate, which is not valid UTF-8"
    return None


def _first_problem(value: Any, root: str, *, deep: bool = False) -> str | None:
    """Return ``"<json path>: <reason>"`` for the first value JSON cannot carry faithfully.

    Iterative (no recursion limit); ``deep`` also reports what ``json`` itself
    rejects (types, NaN), used only to name the path of an encoding failure.
    """
    stack: list[tuple[str, Any, int]] = [(root, value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            shown = path if len(path) <= 80 else path[:60] + "..."
            return f"{shown}: nested deeper than {_MAX_DEPTH} levels"
        if isinstance(item, str):
            problem = _text_problem(path, item)
            if problem:
                return problem
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    if deep:
                        return f"{path}: key {key!r} is {type(key).__name__}; JSON object keys must be strings"
                    continue
                if isinstance(key, str):
                    problem = _text_problem(f"{path}[{key!r}]", key)
                    if problem:
                        return problem
                stack.append((f"{path}[{key!r}]", child, depth + 1))
        elif isinstance(item, (list, tuple)):
            for index in range(len(item) - 1, -1, -1):
                stack.append((f"{path}[{index}]", item[index], depth + 1))
        elif isinstance(item, float):
            if deep and not math.isfinite(item):
                return f"{path}: {item!r} is not valid JSON; {conversion_hint(item, path)}"
        elif deep and not (item is None or isinstance(item, (bool, int))):
            return f"{path}: {type(item).__name__} is not JSON-serializable; {conversion_hint(item, path)}"
    return None


class Undecodable:
    """A stored JSON value Python cannot decode, kept as its raw text.

    Another SDK, raw SQL or an older version can store text that passes the
    database's checks yet fails here (nesting past the recursion limit, an
    integer past Python's digit limit, malformed JSON in SQLite). Reads carry
    this marker instead of raising, so one such row never hides the others;
    the worker fails the task it marks with a ``bad_payload`` envelope.
    """

    __slots__ = ("text", "reason")

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason

    def __repr__(self) -> str:
        head = self.text[:60] + ("..." if len(self.text) > 60 else "")
        return f"<Undecodable JSON ({self.reason}): {head!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Undecodable) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def decode_stored(text: str | bytes | None) -> Any:
    """Decode a stored JSON column like ``decode``, or return an ``Undecodable``."""
    try:
        return decode(text)
    except (ValueError, RecursionError) as exc:
        raw = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
        return Undecodable(raw, f"{type(exc).__name__}: {str(exc)[:200]}")


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
