"""Build the error envelopes the worker writes (protocol 3.16), in one place."""

from __future__ import annotations

from typing import Any

from ..exceptions import TaskError
from ..payload import Undecodable

# Exception text can be arbitrarily large (a 10 MB message, a repr of a huge
# object); the envelope is stored in the row and shown in the admin, so cap it.
MAX_MESSAGE_CHARS = 65_536


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


def exception_envelope(exc: BaseException, *, retryable: bool = True) -> dict[str, Any]:
    """Describe an ordinary exception raised by a handler (``handler_error``)."""
    return envelope(
        type=type(exc).__name__,
        code="handler_error",
        message=_text(exc),
        retryable=retryable,
    )


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
