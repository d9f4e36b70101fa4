"""What to pass instead of a value JSON cannot carry: the hint a ``SerializationError`` ends with.

The encoder refuses dates, Decimals, UUIDs and the like rather than coerce
them (payload.py says why), so the caller has to choose a spelling. The
hint names the usual one for the value's type, written against the value's
JSON path so it can be pasted: ``payload['when'].isoformat()``.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
import uuid
from decimal import Decimal
from pathlib import PurePath
from typing import Any


def conversion_hint(value: Any, path: str) -> str:
    """Return "pass … instead" for the value at ``path`` that JSON refused."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return f"pass {path}.isoformat() (ISO 8601 text) instead"
    if isinstance(value, dt.timedelta):
        return f"pass {path}.total_seconds() instead"
    if isinstance(value, (Decimal, uuid.UUID, PurePath)):
        # For a Decimal too: str() keeps every digit, float() would round some.
        return f"pass str({path}) instead"
    if isinstance(value, enum.Enum):
        return f"pass {path}.value instead"
    if isinstance(value, (set, frozenset)):
        return f"pass list({path}) or sorted({path}) instead"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"pass text instead: {path}.decode(), or base64 for binary data"
    if isinstance(value, float) and not math.isfinite(value):
        return "pass None or a string instead (JSON has no NaN or Infinity)"
    return "convert it to a dict, list, str, int, float, bool or None first"
