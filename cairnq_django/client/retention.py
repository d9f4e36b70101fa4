"""Turn ``CAIRNQ["RETENTION"]`` into purge rules and sweep them in bounded batches.

Running workers call :func:`sweep` every ``CAIRNQ["RETENTION_INTERVAL_MS"]``;
``cairnq_purge`` uses :func:`parse_duration_ms` for its ``--older-than`` flag.
The setting takes the shapes of the upstream ``Retention`` (protocol 4.15):

* ``None``: no retention (the default);
* an int: one cutoff in ms for every terminal status;
* ``{status: cutoff_ms}``: only the listed terminal statuses are swept;
* a list of ``{"older_than_ms": ..., "status"?, "queue"?, "name"?}`` rules.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from ..protocol import bounds
from ..store.base import PurgeRule as PurgeRule  # re-exported: the setting's rules
from ..conf import get_config
from ..protocol.validation import TERMINAL_STATUSES
from ..workflows.retention import forget_finished_runs

if TYPE_CHECKING:
    from ..store.base import Store

DEFAULT_BATCH = 1000

# What one purge batch aims to take. Its transaction holds the doomed rows'
# locks and the server's oldest snapshot while it runs, and each deleted task
# costs PostgreSQL and SQLite a scan of cairnq_task_keys (the protocol gives
# its task_id no index), so a fixed row count can run for seconds where many
# business keys exist. Batches shrink to fit and grow back (docs/worker.md).
BATCH_TARGET_S = 0.05

# A worker's sweep rests this many times each batch's duration before the
# next: it is background work, and flat out one sweep took a core and the
# WAL from the drain beside it (half its rate on 2 cores, docs/performance.md).
SWEEP_REST = 2.0

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
# At most 20 digits: anything longer is past the longest age anyway.
_DURATION = re.compile(r"^\s*(\d{1,20})\s*(ms|s|m|h|d|w)\s*$")


def parse_duration_ms(text: str) -> int:
    """Parse ``500ms``, ``30s``, ``30m``, ``12h``, ``7d`` or ``2w`` into milliseconds.

    A bare number is refused: "7" could mean days or milliseconds, and a purge
    is the wrong place to guess. Raises ``ValueError`` with a readable message,
    also past the longest age a purge takes (``bounds.MAX_DELAY_MS``, 100 years).
    """
    match = _DURATION.match(text or "")
    if not match:
        raise ValueError(
            f"{text[:40]!r} is not a duration; use a number and a unit: 500ms, 30s, 30m, 12h, 7d, 2w"
        )
    value = int(match.group(1)) * _UNITS_MS[match.group(2)]
    if value > bounds.MAX_DELAY_MS:
        raise ValueError(f"{text!r} is longer than the longest age, {bounds.MAX_DELAY_MS // 604_800_000}w")
    return value


def _cutoff(value: Any, where: str) -> int:
    # bool is an int subclass; True would silently mean "older than 1 ms".
    problem = bounds.AGE_MS.problem(value)
    if problem is not None:
        raise ImproperlyConfigured(f'CAIRNQ["RETENTION"]{where}: cutoff in milliseconds {problem}')
    return int(value)


def _status(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value not in TERMINAL_STATUSES:
        raise ImproperlyConfigured(
            f'CAIRNQ["RETENTION"]{where}: status {value!r} is not terminal; use one of {", ".join(TERMINAL_STATUSES)}'
        )
    return str(value)


def _optional_text(value: Any, field: str, where: str) -> str | None:
    problem = None if value is None else bounds.text_problem(value)
    if problem is None:
        return value
    raise ImproperlyConfigured(f'CAIRNQ["RETENTION"]{where}: {field} {problem}')


def parse_rules(value: Any) -> list[PurgeRule]:
    """Return the purge rules a ``RETENTION`` value stands for; raise ``ImproperlyConfigured`` if invalid."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [PurgeRule(_cutoff(value, ""))]
    if isinstance(value, Mapping):
        if not value:
            raise ImproperlyConfigured('CAIRNQ["RETENTION"] is an empty mapping; use None to disable retention')
        return [
            PurgeRule(_cutoff(cutoff, f"[{status!r}]"), status=_status(status, f"[{status!r}]"))
            for status, cutoff in value.items()
        ]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if not value:
            raise ImproperlyConfigured('CAIRNQ["RETENTION"] is an empty list; use None to disable retention')
        rules = []
        for index, item in enumerate(value):
            where = f"[{index}]"
            if not isinstance(item, Mapping):
                raise ImproperlyConfigured(f'CAIRNQ["RETENTION"]{where} must be a dict with "older_than_ms"')
            unknown = set(item) - {"older_than_ms", "status", "queue", "name"}
            if unknown or "older_than_ms" not in item:
                raise ImproperlyConfigured(
                    f'CAIRNQ["RETENTION"]{where} takes "older_than_ms" and optional "status", "queue", "name"'
                    + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
                )
            rules.append(
                PurgeRule(
                    _cutoff(item["older_than_ms"], where),
                    status=_status(item.get("status"), where),
                    queue=_optional_text(item.get("queue"), "queue", where),
                    name=_optional_text(item.get("name"), "name", where),
                )
            )
        return rules
    raise ImproperlyConfigured(
        f'CAIRNQ["RETENTION"] must be None, an int of milliseconds, {{status: ms}} or a list of rules; got {value!r}'
    )


def configured_rules() -> list[PurgeRule]:
    """Return the rules of the current ``CAIRNQ["RETENTION"]`` setting."""
    return parse_rules(get_config()["RETENTION"])


def next_batch_limit(limit: int, took_s: float, ceiling: int, target_s: float = BATCH_TARGET_S) -> int:
    """The row limit of the batch after one of ``limit`` rows that took ``took_s``.

    A batch over ``target_s`` shrinks the next in proportion (at least one
    row); one under half of it doubles the next, up to ``ceiling``.
    """
    if took_s > target_s:
        return max(1, int(limit * target_s / took_s))
    if took_s < target_s / 2:
        return min(ceiling, limit * 2)
    return limit


def purge_rule(
    store: Store,
    rule: PurgeRule,
    *,
    limit: int = DEFAULT_BATCH,
    should_stop: Callable[[], bool] | None = None,
    on_batch: Callable[[int], None] | None = None,
    target_s: float = BATCH_TARGET_S,
    rest: float = 0.0,
    sleep: Callable[[float], object] = time.sleep,
) -> int:
    """Drain one rule: purge at most ``limit`` rows at a time until a batch comes back short.

    Each batch is its own statement, so no transaction or lock outlives a
    batch, and batches are sized to take about ``target_s`` each
    (``next_batch_limit``). ``should_stop`` is asked between batches (a
    stopping worker cuts the sweep short); ``on_batch`` receives each
    batch's count. Between batches it sleeps ``rest`` times the last batch's
    duration. Returns the rows deleted.
    """
    total, size = 0, limit
    # Each batch starts at the latest completion the last one deleted (ties
    # included): a scan from the oldest would step over every deleted row's
    # index entry until vacuum, and slow each batch as the sweep went on.
    from_ms: int | None = None
    while True:
        began = time.monotonic()
        batch = store.purge_batch(rule, limit=size, from_ms=from_ms)
        took = time.monotonic() - began
        total += len(batch.ids)
        if on_batch is not None:
            on_batch(len(batch.ids))
        if len(batch.ids) < size or (should_stop is not None and should_stop()):
            return total
        from_ms = batch.last_completed_ms
        size = next_batch_limit(size, took, limit, target_s)
        if rest > 0:
            sleep(rest * took)


def sweep(
    store: Store,
    limit: int = DEFAULT_BATCH,
    *,
    rules: Sequence[PurgeRule] | None = None,
    should_stop: Callable[[], bool] | None = None,
    rest: float = SWEEP_REST,
    sleep: Callable[[float], object] = time.sleep,
) -> int:
    """Apply every retention rule once, in bounded batches with rests between; return the rows deleted.

    Then the finished workflow runs whose task rows are all gone are deleted
    (``workflows/retention.py``), unless the sweep was stopped first.

    With ``rules`` omitted the ``CAIRNQ["RETENTION"]`` setting is read; an
    unset setting sweeps nothing and issues no statement. ``sleep`` takes the
    rests (a worker passes its stop event's ``wait``, so a stop ends one).
    """
    bounds.PURGE_LIMIT.check(limit, "limit")
    total = 0
    rules = configured_rules() if rules is None else rules
    for rule in rules:
        total += purge_rule(store, rule, limit=limit, should_stop=should_stop, rest=rest, sleep=sleep)
        if should_stop is not None and should_stop():
            return total
    if rules:
        # The workflow runs whose task rows are all purged go too (docs/workflows.md, "Retention").
        store.run_with_connection(
            lambda: forget_finished_runs(store.alias, should_stop=should_stop, rest=rest, sleep=sleep)
        )
    return total
