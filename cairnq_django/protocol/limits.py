"""Fleet limits as values: rate strings, limit keys, and what one claim draw must honour.

Pure rules, no settings and no database. ``FleetLimits`` is what a worker
hands the store for one limited name; the store counts the fleet's running
calls and recent starts inside the claim (docs/limits.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from . import bounds

# Where the stored limit key lives in a task's metadata (a protocol column
# the other SDKs keep and ignore).
METADATA_NAMESPACE = "cairnq_django"
METADATA_KEY = "limit_key"

# The window units a rate accepts, in milliseconds.
_UNITS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}
# "600/m", "100/10s", "600/m burst 20" (burst may also be written burst=20),
# matched once white space is cut to single spaces: no two neighbouring
# parts can match the same run, so matching is linear (the regex it
# replaces, with \s* beside \s*, took over 200 s on 200,000 spaces).
_RATE = re.compile(r"(\d+) ?/ ?(\d*) ?([smh])(?: ?,? ?burst ?=? ?(\d+))?", re.IGNORECASE)
# Far longer than any rate; longer text is refused before it is read.
MAX_RATE_CHARS = 100
MAX_RATE_COUNT = 1_000_000
MAX_WINDOW_MS = 86_400_000

LimitKey = Union[str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``window_ms``; at most ``burst`` in any ``burst_window_ms``.

    Without a burst the whole allowance may start at once; a burst of b
    spreads it out: no more than b starts in any window of ``window_ms * b / count``.
    """

    count: int
    window_ms: int
    burst: int
    # The text it was parsed from, for messages and the worker's banner.
    text: str = field(default="", compare=False)

    @property
    def burst_window_ms(self) -> int:
        return max(1, self.window_ms * self.burst // self.count)

    def __str__(self) -> str:
        if self.text:
            return self.text
        text = f"{self.count}/{self.window_ms}ms"
        return text if self.burst == self.count else f"{text} burst {self.burst}"

    def __repr__(self) -> str:
        return repr(str(self))


def parse_rate(text: Any) -> Rate:
    """Parse ``"N/s"``, ``"N/m"``, ``"N/h"`` (or ``"N/10s"``), with an optional ``burst B``."""
    if not isinstance(text, str):
        raise ValueError(f"must be a string such as '600/m' or '2/s', got {text!r}")
    if len(text) > MAX_RATE_CHARS:
        raise ValueError(f"must be at most {MAX_RATE_CHARS} characters, got {len(text)}")
    normal = " ".join(text.split())
    match = _RATE.fullmatch(normal)
    if match is None:
        raise ValueError(f"must look like '600/m', '2/s', '100/10s' or '600/m burst 20', got {text!r}")
    count, multiple, unit, burst = match.groups()
    window_ms = int(multiple or 1) * _UNITS_MS[unit.lower()]
    rate = Rate(int(count), window_ms, int(burst) if burst is not None else int(count), normal)
    if not 1 <= rate.count <= MAX_RATE_COUNT:
        raise ValueError(f"must allow from 1 to {MAX_RATE_COUNT} starts per window, got {text!r}")
    if not 1 <= window_ms <= MAX_WINDOW_MS:
        raise ValueError(f"must have a window from 1 second to 24 hours, got {text!r}")
    if not 1 <= rate.burst <= rate.count:
        raise ValueError(f"must have a burst from 1 to its count ({rate.count}), got {text!r}")
    return rate


def limit_key_of(limit_key: LimitKey, payload: Any, task_name: str) -> str:
    """The stored key of one task: a payload field's value, or what a callable returns for the payload.

    Strings are kept as they are; other values are stored as their JSON
    text (``7`` and ``"7"`` are then different keys). Raises ``ValueError``
    naming the task when the field is missing or the value cannot be a key.
    """
    if callable(limit_key):
        try:
            value = limit_key(payload)
        except Exception as exc:
            raise ValueError(f"limit_key of task {task_name!r} raised {type(exc).__name__}: {exc}") from exc
        source = "the limit_key callable"
    else:
        if not isinstance(payload, Mapping) or limit_key not in payload:
            raise ValueError(
                f"task {task_name!r} is limited per {limit_key!r}, but its payload has no field {limit_key!r}"
            )
        value = payload[limit_key]
        source = f"payload field {limit_key!r}"
    if value is None:
        raise ValueError(f"limit_key of task {task_name!r}: {source} is None; a key needs a value")
    try:
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # a set, an object, a cycle: the documented ValueError
        raise ValueError(
            f"limit_key of task {task_name!r}: {source} gave a {type(value).__name__}, "
            f"which JSON cannot encode as a key ({exc})"
        ) from exc
    problem = bounds.text_problem(text)
    if problem is not None:
        raise ValueError(f"limit_key of task {task_name!r}: {source} {problem}")
    return text


@dataclass(frozen=True)
class FleetLimits:
    """What one claim draw of ``name`` honours across every worker of the fleet.

    ``concurrency`` and ``rate`` are the name's own limits (per key when
    ``keyed``); ``resource`` is a global resource the name shares with the
    other names that declare it. A batch call counts as one unit.
    """

    name: str
    batch: int = 1
    concurrency: int | None = None
    rate: Rate | None = None
    keyed: bool = False
    resource: str | None = None
    resource_capacity: int | None = None

    @property
    def name_scope(self) -> str | None:
        """The scope the name's own limits are counted under, or None."""
        return f"task:{self.name}" if self.concurrency is not None or self.rate is not None else None

    @property
    def counts_running_tasks(self) -> bool:
        """True when the live calls are simply the name's tasks running under a lease, so no start is logged.

        That holds for ``global_concurrency`` alone: a rate counts starts that
        have ended, a global resource is shared with other names, and a batch
        call is several tasks.
        """
        return self.concurrency is not None and self.rate is None and self.resource is None and self.batch == 1

    @property
    def resource_scope(self) -> str | None:
        return f"resource:{self.resource}" if self.resource is not None else None

    @property
    def scopes(self) -> list[str]:
        """Every scope a start of this name is recorded under, sorted (the lock order)."""
        return sorted(s for s in (self.name_scope, self.resource_scope) if s is not None)
