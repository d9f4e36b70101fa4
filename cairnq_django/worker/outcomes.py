"""From a handler call to the settlements it leaves: the one pipeline the worker and ``run_until_idle`` share.

Read top to bottom, a call goes: ``handler_args`` (what the handler is
called with; a payload that is not a JSON object fails the task) -> the
caller performs the call (a handler thread, the event loop, or inline) ->
``settlements`` (protocol 4.7: the return value or exception of the call
becomes one ``Settlement`` per task the handler did not settle itself; a
``Snooze`` raised, or a batch's value for one task, puts it back for later) ->
the caller writes them (the settler, or ``testing`` inline) and records each
attempt's end.

Nothing here touches the database: the functions take attempts and a value or
an exception, and return settlements.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import LostLease, SerializationError, Snooze, TaskError
from ..protocol.backoff import retry_delay_ms
from ..protocol.envelopes import raised_envelope, unserializable_envelope
from ..protocol.payload import encode
from ..store.base import Failure

if TYPE_CHECKING:
    from ..tasks.context import TaskContext
    from ..tasks.registry import TaskDefinition
    from .attempt import Attempt

__all__ = [
    "NO_BACKOFF",
    "RetryBackoff",
    "Settlement",
    "fail_settlement",
    "handler_args",
    "object_payload",
    "settlements",
    "snooze_settlement",
]

logger = logging.getLogger("cairnq_django.worker")


@dataclass(slots=True)
class Settlement:
    """One task's write at the end of its call: a completion (``result_json``), a failure, or a snooze."""

    attempt: Attempt
    # The call it came from (the worker's ``Call``; None inline).
    call: Any
    result_json: str | None = None
    failure: Failure | None = None
    # Not None: back to queued in this many ms, the attempt not counted.
    snooze_ms: int | None = None
    queued_at: float = 0.0

    @property
    def snoozed(self) -> bool:
        return self.snooze_ms is not None


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """The retry delay rule of one worker: ``RETRY_BACKOFF_MS`` doubling up to ``RETRY_BACKOFF_MAX_MS``."""

    base_ms: int
    max_ms: int

    def delay_ms(self, attempt: int, retryable: bool) -> int:
        return retry_delay_ms(attempt, base_ms=self.base_ms, max_ms=self.max_ms, retryable=retryable)


# Retry at once (``run_until_idle`` without ``backoff=True``).
NO_BACKOFF = RetryBackoff(0, 0)


# ---- perform --------------------------------------------------------------------
def object_payload(context: TaskContext) -> Any:
    """Return the task's payload, or fail the task permanently if it is not a JSON object.

    Submit only writes objects; another writer (raw SQL, a foreign SDK) may
    not. A retry would meet the same row, so this is not retryable. A large
    payload the claim left in the database is fetched here, on the caller's
    thread (``TaskContext.payload``).
    """
    payload = context.payload
    if isinstance(payload, dict):
        return payload
    raise TaskError(
        f"payload must be a JSON object, got {type(payload).__name__}",
        type="BadPayload",
        code="bad_payload",
        retryable=False,
    )


def handler_args(definition: TaskDefinition, attempts: Sequence[Attempt]) -> tuple[Any, ...]:
    """Return the arguments of one handler call: the contexts of a batch, or ``(ctx[, payload])``."""
    if definition.batch is not None:
        return ([attempt.context for attempt in attempts],)
    context = attempts[0].context
    if definition.takes_payload:
        return (context, object_payload(context))
    return (context,)


# ---- normalise ------------------------------------------------------------------
def fail_settlement(
    attempt: Attempt, call: Any, envelope: dict[str, Any], retryable: bool, backoff: RetryBackoff
) -> Settlement:
    """Return the settlement failing ``attempt`` with ``envelope`` (retryable ones get the backoff)."""
    task = attempt.task
    delay = backoff.delay_ms(task.attempt, retryable)
    return Settlement(
        attempt, call, failure=Failure(task.id, envelope, retryable=retryable, delay_ms=delay)
    )


def snooze_settlement(attempt: Attempt, call: Any, snooze: Snooze) -> Settlement:
    """Return the settlement putting ``attempt``'s task back for ``snooze.delay_ms``."""
    return Settlement(attempt, call, snooze_ms=snooze.delay_ms)


def settlements(
    call: Any,
    attempts: Sequence[Attempt],
    value: Any,
    raised: BaseException | None,
    *,
    batch: bool,
    backoff: RetryBackoff,
    log: bool,
) -> list[Settlement]:
    """Turn how a call ended into settlements for the tasks its handler left unsettled (protocol 4.7).

    Returned: the value is the result (a batch's value is a ``Mapping`` of
    task id to result; a task it leaves out, or any other value, succeeds
    with no result); a result JSON cannot carry fails permanently with
    ``unserializable_result``; a ``Snooze`` as a task's result snoozes that
    task. Raised ``Snooze``: every task is snoozed. Raised ``LostLease``:
    nothing is written, the lease's expiry decides. Raised anything else:
    every task fails with the exception's envelope (a ``TaskError`` keeps its
    own retryability).

    Each returned attempt is reserved (``begin_settle``); the caller writes
    the settlement and ends the reservation. ``log`` writes the worker's
    warnings (the inline runner keeps quiet).
    """
    left = [attempt for attempt in attempts if attempt.reserve()]
    if not left:
        return []
    if raised is None:
        results: Mapping[str, Any] | None = None
        if batch:
            results = value if isinstance(value, Mapping) else {}
        items = []
        for attempt in left:
            task = attempt.task
            result = results.get(task.id) if results is not None else value
            if isinstance(result, Snooze):
                items.append(snooze_settlement(attempt, call, result))
                continue
            try:
                result_json = None if result is None else encode(result, what="result")
            except SerializationError as exc:
                if log:
                    logger.warning(
                        "task=%s name=%s returned an unserializable result: %s", task.id, task.name, exc
                    )
                detail = str(exc).split(": ", 1)[-1]
                items.append(fail_settlement(attempt, call, unserializable_envelope(detail), False, backoff))
                continue
            items.append(Settlement(attempt, call, result_json=result_json))
        return items
    if isinstance(raised, Snooze):
        return [snooze_settlement(attempt, call, raised) for attempt in left]
    if isinstance(raised, LostLease):
        # A write already learned the lease is gone: leave the rest to lease expiry.
        for attempt in left:
            attempt.end_settle(None)
        return []
    envelope, retryable = raised_envelope(raised)
    if log:
        first = left[0].task
        logger.warning(
            "handler raised: name=%s tasks=%s attempt=%s duration_ms=%s",
            first.name,
            ",".join(attempt.task.id for attempt in left[:4]) + ("..." if len(left) > 4 else ""),
            first.attempt,
            call.duration_ms if call is not None else None,
            # A TaskError is a decided outcome, not a crash: no traceback.
            exc_info=None if isinstance(raised, TaskError) else raised,
        )
    return [fail_settlement(attempt, call, envelope, retryable, backoff) for attempt in left]
