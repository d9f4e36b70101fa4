"""The JSON encoder every write goes through: same text as the standard
library's compact encoder, the same refusals, and safe to share between threads;
a refused value's error names its path and what to pass instead."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest

from cairnq_django.protocol import payload
from cairnq_django.exceptions import SerializationError

# The standard library's encoder with the settings payload.py documents.
REFERENCE = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)

VALUES = [
    {},
    {"i": 1},
    {"text": "héllo ✓ \U0001f600", "quote": 'a"b', "slash": "a\\b", "controls": "\t\n\r\x01\x7f"},
    {"separators": "\u2028\u2029", "nul_escape": "\\u0000 stays text"},
    {"floats": [0.1, -0.0, 1e308, 5e-324, 1.0], "ints": [0, -1, 2**64, -(2**100)]},
    {"nested": {"a": [None, True, False, {"b": []}]}, "tuple": (1, 2)},
    {1: "int key", 2.5: "float key", True: "bool key", None: "none key"},
    [1, "two", 3.0],
    "a bare string",
    17,
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_text_is_the_standard_compact_encoding(value: Any) -> None:
    assert payload.encode(value) == REFERENCE.encode(value)


def test_the_reusable_encoder_is_in_use_on_cpython() -> None:
    # The point of the module-level encoder is speed; if it silently
    # disappeared every encode would still work, just slower.
    assert payload._encode_fast is not None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": math.nan}, "Out of range float values are not JSON compliant"),
        ({"x": math.inf}, "Out of range float values are not JSON compliant"),
        ({"x": {1, 2}}, "Object of type set is not JSON serializable"),
        ({"x": b"bytes"}, "Object of type bytes is not JSON serializable"),
    ],
)
def test_refusals_carry_the_standard_message(value: Any, message: str) -> None:
    with pytest.raises(SerializationError, match="payload is not JSON-serializable: " + message):
        payload.encode(value, what="payload")


def test_a_cycle_is_refused_as_a_cycle() -> None:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    with pytest.raises(SerializationError, match="Circular reference detected"):
        payload.encode(cyclic)
    # A refusal leaves nothing behind: the same encoder goes on working.
    assert payload.encode({"after": [1]}) == '{"after":[1]}'


class CountingEncoder(json.JSONEncoder):
    """The fallback encoder, counting how often ``encode`` had to use it."""

    calls = 0

    def encode(self, o: Any) -> str:
        CountingEncoder.calls += 1
        return super().encode(o)


def test_one_value_shared_by_many_threads_is_never_mistaken_for_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    # The standard encoder marks each container while it is inside it; a
    # marker table shared between threads would make one thread see another's
    # marks as a cycle (and fall back to the slow encoder). The reused
    # encoder keeps no such table, so every call stays on the fast path.
    monkeypatch.setattr(payload, "_encoder", CountingEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False))
    class Yielding(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            time.sleep(0.0001)  # let another thread in while this one is inside
            return super().items()

    CountingEncoder.calls = 0
    shared = {"rows": [Yielding(n=i, tags=["a", "b"]) for i in range(20)]}
    expected = REFERENCE.encode(shared)
    failures: list[BaseException] = []

    def encode_many() -> None:
        try:
            for _ in range(30):
                assert payload.encode(shared) == expected
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=encode_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert CountingEncoder.calls == 0


class Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (dt.datetime(2025, 1, 2, 3, 4, 5), "pass payload['order']['when'].isoformat() (ISO 8601 text) instead"),
        (dt.date(2025, 1, 2), "pass payload['order']['when'].isoformat() (ISO 8601 text) instead"),
        (dt.timedelta(seconds=90), "pass payload['order']['when'].total_seconds() instead"),
        (Decimal("19.99"), "pass str(payload['order']['when']) instead"),
        (uuid.UUID(int=7), "pass str(payload['order']['when']) instead"),
        ({"a", "b"}, "pass list(payload['order']['when']) or sorted(payload['order']['when']) instead"),
        (b"raw", "pass text instead: payload['order']['when'].decode(), or base64 for binary data"),
        (Colour.RED, "pass payload['order']['when'].value instead"),
        (math.inf, "pass None or a string instead (JSON has no NaN or Infinity)"),
        (object(), "convert it to a dict, list, str, int, float, bool or None first"),
    ],
    ids=["datetime", "date", "timedelta", "Decimal", "UUID", "set", "bytes", "Enum", "inf", "object"],
)
def test_a_refused_value_gets_a_hint_at_its_path(value: Any, hint: str) -> None:
    with pytest.raises(SerializationError) as info:
        payload.encode_object({"order": {"id": 1, "when": value}}, what="payload")
    message = str(info.value)
    assert "payload['order']['when']: " in message
    assert message.endswith(f"; {hint})"), message


def test_the_hint_names_a_list_items_path() -> None:
    with pytest.raises(SerializationError, match=r"pass str\(metadata\['ids'\]\[2\]\) instead"):
        payload.encode_object({"ids": ["a", "b", uuid.UUID(int=1)]}, what="metadata")
