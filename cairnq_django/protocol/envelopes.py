"""Build, encode and read error envelopes (protocol 3.13, 3.16), in one place.

Every envelope the package writes is built here (the worker's outcomes, the
lease recovery's, the reduced fallback), and every reader of a stored one
(``outcome``, the ``django.tasks`` results) reads its members through here.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

from ..exceptions import SerializationError, TaskError
from . import payload as _payload
from .payload import Undecodable, make_storable

# Exception text can be arbitrarily large (a 10 MB message, a repr of a huge
# object); the envelope is stored in the row and shown in the admin, so cap it.
MAX_MESSAGE_CHARS = 65_536

# A handler failure keeps its traceback in ``details["traceback"]`` so any
# reader of the row (Django's ``TaskResult.errors``, the admin) can see it.
# A long one keeps its start (the outer frames) and its end (the raising
# frame and the exception line, which may hold a huge message), cut between.
MAX_TRACEBACK_BYTES = 16_384
TRACEBACK_HEAD_BYTES = 4_096
TRACEBACK_CUT_MARK = "\n[... {dropped} bytes of traceback cut ...]\n"


def envelope(
    *,
    type: str,
    code: str,
    message: str,
    retryable: bool,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Return an envelope with exactly the five protocol members."""
    return {
        "type": type,
        "code": code,
        "message": message,
        "retryable": retryable,
        "details": details or {},
    }


# The ``details`` keys a raised exception adds (read back by the django.tasks bridge).
CLASS_PATH_KEY = "exception_class_path"
TRACEBACK_KEY = "traceback"


def _text(exc: BaseException) -> str:
    # An exception whose __str__ raises must still produce a record.
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001
        try:
            text = repr(exc)
        except Exception:  # noqa: BLE001
            text = f"<unprintable {type(exc).__name__}>"
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "... [truncated]"
    return text


def traceback_text(exc: BaseException) -> str:
    """Return the exception's formatted traceback (with its chain), at most MAX_TRACEBACK_BYTES."""
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001 - a broken exception must still be recorded
        text = f"{type(exc).__name__}: {_text(exc)}\n"
    # Made storable before it is measured, so the bound holds for what is written.
    data = make_storable(text).encode("utf-8")
    if len(data) <= MAX_TRACEBACK_BYTES:
        return data.decode("utf-8")
    # The mark is sized with the largest count it can show, so the result fits.
    room = MAX_TRACEBACK_BYTES - len(TRACEBACK_CUT_MARK.format(dropped=len(data)).encode("utf-8"))
    head = data[:TRACEBACK_HEAD_BYTES].decode("utf-8", "ignore")
    tail = data[-(room - TRACEBACK_HEAD_BYTES) :].decode("utf-8", "ignore")
    dropped = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return head + TRACEBACK_CUT_MARK.format(dropped=dropped) + tail


def class_path(exc: BaseException) -> str:
    """The dotted path of the exception's class, as ``details`` records it."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def exception_details(exc: BaseException) -> dict[str, Any]:
    """The ``details`` a raised exception adds: its class path and its traceback."""
    return {CLASS_PATH_KEY: class_path(exc), TRACEBACK_KEY: traceback_text(exc)}


def exception_envelope(exc: BaseException, *, retryable: bool = True) -> dict[str, Any]:
    """Describe an ordinary exception raised by a handler (``handler_error``)."""
    return envelope(
        type=type(exc).__name__,
        code="handler_error",
        message=_text(exc),
        retryable=retryable,
        details=exception_details(exc),
    )


def raised_envelope(exc: BaseException) -> tuple[dict[str, Any], bool]:
    """Return ``(envelope, retryable)`` for what a handler call raised (protocol 3.16).

    A ``TaskError`` keeps its own members and retryability; its ``details``
    gain the class path and traceback unless the raiser set those keys. Any
    other exception -- ``SystemExit`` and ``KeyboardInterrupt`` included --
    is a retryable ``handler_error``.
    """
    if not isinstance(exc, TaskError):
        return exception_envelope(exc), True
    decided = exc.envelope()
    details = decided["details"] if isinstance(decided["details"], dict) else {}
    decided["details"] = {**exception_details(exc), **details}
    return decided, exc.retryable


def as_envelope(error: Any, retryable: bool = True) -> tuple[dict[str, Any], bool]:
    """Normalise a failure reason into ``(envelope, retryable)``.

    A ``TaskError`` carries its own retryability, which wins over the argument;
    an exception becomes ``handler_error``; a dict is taken as a ready envelope;
    anything else is a reason string for a ``TaskError``.
    """
    if isinstance(error, TaskError):
        return error.envelope(), error.retryable
    if isinstance(error, BaseException):
        return exception_envelope(error, retryable=retryable), retryable
    if isinstance(error, dict):
        return error, retryable
    return TaskError(str(error), retryable=retryable).envelope(), retryable


def timeout_envelope(name: str, max_run_ms: int) -> dict[str, Any]:
    return envelope(
        type="HandlerTimeout",
        code="handler_timeout",
        message=f"task {name!r} exceeded max_run_ms={max_run_ms}",
        retryable=True,
    )


def no_handler_envelope(name: str) -> dict[str, Any]:
    return envelope(
        type="NoHandler",
        code="no_handler",
        message=f"no handler registered for {name!r}",
        retryable=False,
    )


def unserializable_envelope(detail: str) -> dict[str, Any]:
    return envelope(
        type="SerializationError",
        code="unserializable_result",
        message=f"handler result is not JSON-serializable: {detail}",
        retryable=False,
    )


# The columns a handler reads; an undecodable one means the task cannot run.
_INPUT_COLUMNS = ("payload", "metadata")


def undecodable_envelope(task: Any) -> dict[str, Any] | None:
    """Return the ``bad_payload`` envelope for a task whose input Python cannot decode, else None.

    The store reads such a column as a ``payload.Undecodable`` (another SDK,
    raw SQL or an older version wrote it). Running the handler is pointless
    and a retry would meet the same text, so the task fails permanently, alone.
    Only loaded columns are looked at: a payload the claim left in the
    database is checked once it is fetched.
    """
    fields = task.__dict__
    for column in _INPUT_COLUMNS:
        value = fields.get(column)
        if isinstance(value, Undecodable):
            return envelope(
                type="BadPayload",
                code="bad_payload",
                message=f"stored {column} cannot be decoded ({value.reason}); the handler was not called",
                retryable=False,
            )
    return None


# Written by whoever recovers a lease whose task has no attempts left (protocol 3.16).
LEASE_EXPIRED_ERROR = envelope(
    type="LeaseExpired",
    code="lease_expired",
    message="task lease expired and max attempts reached",
    retryable=False,
)

# How the dashboard's triage counts a lease that expired with attempts left: the
# recovery puts the task back and writes no error, so this is never stored.
LEASE_EXPIRED_RETRIED = envelope(
    type="LeaseExpired",
    code="lease_expired",
    message="task lease expired; queued for another attempt",
    retryable=True,
)


def unreadable_error_envelope(reason: str) -> dict[str, Any]:
    """What a stored error envelope Python cannot decode reads as (``bad_payload``)."""
    return envelope(
        type="BadPayload",
        code="bad_payload",
        message=f"the stored error envelope cannot be decoded: {reason}",
        retryable=False,
    )


def encode_error(error: dict[str, Any], retryable: bool) -> str:
    """Encode an error envelope, falling back to the reduced envelope (3.13).

    Text either database would refuse is made storable first, so a failure
    is always recorded, on both dialects alike.
    """
    try:
        text = _payload.encode(error, what="error envelope")
        if "\\u0000" not in text and _payload.is_utf8(text):
            return text
        return _payload.encode(make_storable(error), what="error envelope")
    except SerializationError:
        reduced = envelope(
            type=str(error.get("type", "TaskError")),
            code=str(error.get("code", "task_error")),
            message=str(error.get("message", "task failed")),
            retryable=bool(retryable),
        )
        return _payload.encode(make_storable(reduced), what="error envelope")


# ---------------------------------------------------------------- reading
def details_of(stored: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored envelope's ``details``, or an empty mapping where another writer put something else."""
    details = stored.get("details")
    return details if isinstance(details, Mapping) else {}


def recorded_class_path(stored: Mapping[str, Any]) -> Any:
    """The exception class path the writer recorded, if any (not checked: any JSON value)."""
    return details_of(stored).get(CLASS_PATH_KEY)


def traceback_or_summary(stored: Mapping[str, Any]) -> str:
    """The recorded traceback, or ``"Type: message"`` when none was recorded.

    An outcome the worker decided (a timeout, no handler) or another SDK's
    failure carries no traceback.
    """
    text = details_of(stored).get(TRACEBACK_KEY)
    if isinstance(text, str) and text:
        return text
    return f"{stored.get('type')}: {stored.get('message')}"
