"""The submit options a name's ``@task`` declaration supplies when the caller leaves them out.

``submit("mail.send")`` for a name declared in this process as
``@task("mail.send", queue="emails", priority=7, max_attempts=9)`` writes
those three, as ``mail_send.submit()`` does; an argument the caller passes
wins, and a name nobody declares here gets the protocol's defaults
(``"default"``, 0, 3). Every path that submits by name (``submit``,
``submit_many``, ``call``, the async twins, ``ctx.submit``, periodic ticks)
resolves through ``resolve``.

The public signatures default ``queue``, ``priority`` and ``max_attempts`` to
the markers below rather than to the values: an explicit ``queue="default"``
must win over the declaration, and comparing with the default value could
not tell it from an omitted one.
"""

from __future__ import annotations

from typing import Any

from ..tasks.registry import get_task

__all__ = ["MAX_ATTEMPTS", "PRIORITY", "QUEUE", "Declared", "resolve"]


class Declared:
    """The default of one submit option: the declaration's value, else ``fallback``."""

    __slots__ = ("fallback", "option")

    def __init__(self, option: str, fallback: Any) -> None:
        self.option = option
        self.fallback = fallback

    def __repr__(self) -> str:
        # What help(cairnq_django.submit) shows as the default.
        return f"<as declared, else {self.fallback!r}>"


# Typed Any so the public signatures keep ``queue: str = QUEUE``: callers pass
# a str (an int), never a marker.
QUEUE: Any = Declared("queue", "default")
PRIORITY: Any = Declared("priority", 0)
MAX_ATTEMPTS: Any = Declared("max_attempts", 3)


def resolve(name: Any, queue: Any, priority: Any, max_attempts: Any) -> tuple[Any, Any, Any]:
    """Return ``(queue, priority, max_attempts)`` with each marker replaced by ``name``'s declared value.

    An option the declaration leaves unset, or a name no ``@task`` declares
    in this process, takes the marker's fallback. Other values pass through
    untouched (validation is the caller's).
    """
    values = (queue, priority, max_attempts)
    if not any(isinstance(value, Declared) for value in values):
        return values
    # A name that is not a str is refused by validation later; no lookup.
    definition = get_task(name) if isinstance(name, str) else None
    return tuple(_pick(definition, value) for value in values)  # type: ignore[return-value]


def _pick(definition: Any, value: Any) -> Any:
    if not isinstance(value, Declared):
        return value
    found = getattr(definition, value.option, None)
    return value.fallback if found is None else found
