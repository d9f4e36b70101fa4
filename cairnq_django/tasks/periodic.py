"""Periodic tasks: ``@periodic("*/5 * * * *")`` and ``CAIRNQ["SCHEDULE"]`` (docs/periodic.md).

There is no scheduler process and no leader: every running worker calls
``tick(store, now_ms)`` every few seconds, and each schedule's due tick is
enqueued exactly once across all of them.

Exactly once comes from a compare-and-set on a marker row in ``cairnq_meta``
(``periodic:<name>`` -> the epoch ms of the last tick enqueued), in the same
transaction as the submit: the worker whose conditional UPDATE changes the
row enqueues the tick, every other worker's UPDATE matches nothing. The task
itself carries the protocol key ``periodic:<name>:<tick ms>`` (``reject``,
``AlreadyExists`` swallowed) so a tick can be found with ``get_by_key`` and
stays unique even if the marker row is deleted. The marker is what survives
``purge``: purging a tick's task frees its key, but the marker still says the
tick was enqueued, so it is not enqueued again.

Missed ticks: a worker enqueues only the most recent due tick; ticks between
the marker and it (while no worker ran) are skipped. A schedule seen for the
first time (no marker) starts with its next tick: deploying a daily job in
the afternoon does not run it at once for 03:00 that morning.

Times are UTC.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from .. import signals
from ..client import declared
from ..client.submit import build_spec
from ..conf import get_config
from ..exceptions import AlreadyExists
from ..protocol.cron import Cron, CronError, parse
from .registry import TaskDefinition, get_task
from .registry import task as cairnq_task

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import Store

__all__ = [
    "TICK_INTERVAL_S",
    "Schedule",
    "Ticker",
    "marker_key",
    "on_schedule",
    "periodic",
    "schedule_errors",
    "schedules",
    "task_key",
    "tick",
]

logger = logging.getLogger("cairnq_django.tasks.periodic")

# How often a worker's Ticker runs tick(). Schedules have minute resolution,
# so a few seconds of lateness is the price of not having a scheduler process.
TICK_INTERVAL_S = 5.0
MARKER_PREFIX = "periodic:"
_SCHEDULE_OPTIONS = ("cron", "queue", "payload", "priority", "max_attempts")


def marker_key(name: str) -> str:
    """Return the ``cairnq_meta`` key remembering the last tick enqueued for ``name``."""
    return f"{MARKER_PREFIX}{name}"


def task_key(name: str, tick_ms: int) -> str:
    """Return the protocol key of the task for one tick."""
    return f"{MARKER_PREFIX}{name}:{tick_ms}"


@dataclass(frozen=True)
class Schedule:
    """One task name on one cron expression, with the submit options of its ticks."""

    name: str
    cron: Cron
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3


_lock = threading.Lock()
_decorated: dict[str, Schedule] = {}


def _django_payload(name: str) -> dict[str, Any] | None:
    """A Django ``@task`` takes ``{"args", "kwargs"}``; return that empty call, else None."""
    definition = get_task(name)
    if definition is not None and getattr(definition.func, "_cairnq_django_task", None) == name:
        return {"args": [], "kwargs": {}}
    return None


def periodic(
    cron: str,
    *,
    name: str | None = None,
    queue: str | None = None,
    payload: dict[str, Any] | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
) -> Callable[[Any], Any]:
    """Run a task on a cron schedule: put ``@periodic(...)`` above ``@task`` (or Django's ``@task``).

    On a plain function it also registers the function as a cairnq task.
    Options default to the task's own (queue, priority, max_attempts); a
    Django task's ticks call it with no arguments. The expression is parsed
    now, so a typo fails at import.
    """
    parsed = parse(cron)

    def decorate(obj: Any) -> Any:
        defaults: dict[str, Any] = {}
        if isinstance(obj, TaskDefinition):
            target, task_name = obj, obj.name
            defaults = {"queue": obj.queue, "priority": obj.priority, "max_attempts": obj.max_attempts}
        elif hasattr(obj, "module_path") and hasattr(obj, "queue_name"):
            # A Django Task object: only CairnqBackend registers a handler for it.
            target, task_name = obj, obj.module_path
            if get_task(task_name) is None:
                raise TypeError(
                    f"@periodic: Django task {task_name!r} does not use "
                    "cairnq_django.backends.CairnqBackend, so no cairnq worker would run it"
                )
            defaults = {
                "queue": obj.queue_name,
                "priority": obj.priority,
                "max_attempts": getattr(obj, "max_attempts", None),
                "payload": {"args": [], "kwargs": {}},
            }
        elif callable(obj):
            target = cairnq_task(name)(obj)
            task_name = target.name
        else:
            raise TypeError(f"@periodic must decorate a task or a function, got {obj!r}")
        if name is not None and name != task_name:
            raise TypeError(f"@periodic(name={name!r}) does not match the task's name {task_name!r}")
        schedule = Schedule(
            name=task_name,
            cron=parsed,
            payload=dict(payload if payload is not None else defaults.get("payload") or {}),
            queue=queue or defaults.get("queue") or "default",
            priority=priority if priority is not None else defaults.get("priority") or 0,
            max_attempts=max_attempts or defaults.get("max_attempts") or 3,
        )
        _validate(schedule)
        with _lock:
            _decorated[task_name] = schedule
        return target

    return decorate


def _validate(schedule: Schedule) -> None:
    # The same validation as a submit, now rather than at the first tick.
    build_spec(
        schedule.name,
        schedule.payload,
        queue=schedule.queue,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
    )


def _from_setting(name: str, value: Any) -> Schedule:
    if isinstance(value, str):
        value = {"cron": value}
    if not isinstance(value, Mapping):
        raise TypeError(f'CAIRNQ["SCHEDULE"][{name!r}] must be a cron string or a dict, got {value!r}')
    unknown = set(value) - set(_SCHEDULE_OPTIONS)
    if unknown:
        raise ValueError(f'CAIRNQ["SCHEDULE"][{name!r}] has unknown options: {", ".join(sorted(unknown))}')
    if "cron" not in value:
        raise ValueError(f'CAIRNQ["SCHEDULE"][{name!r}] has no "cron"')
    payload = value.get("payload")
    if payload is None:
        payload = _django_payload(name) or {}
    # Unset options are the task's declaration's, as for any submit by name;
    # resolved on every tick, so a name declared after start-up is seen.
    queue, priority, max_attempts = declared.resolve(
        name,
        value.get("queue", declared.QUEUE),
        value.get("priority", declared.PRIORITY),
        value.get("max_attempts", declared.MAX_ATTEMPTS),
    )
    schedule = Schedule(
        name=name,
        cron=parse(value["cron"]),
        payload=payload,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
    )
    _validate(schedule)
    return schedule


def _resolve(setting: Any) -> tuple[list[Schedule], list[str]]:
    """Merge decorated schedules with the setting (a setting entry wins; None disables)."""
    with _lock:
        merged: dict[str, Schedule | None] = dict(_decorated)
    problems: list[str] = []
    if setting is not None and not isinstance(setting, Mapping):
        problems.append(f'CAIRNQ["SCHEDULE"] must be a dict of task name -> cron, got {type(setting).__name__}')
        setting = {}
    for name, value in (setting or {}).items():
        if value is None:
            merged[name] = None
            continue
        try:
            merged[name] = _from_setting(name, value)
        except (CronError, ValueError, TypeError) as exc:
            problems.append(f"{name}: {exc}")
            merged.pop(name, None)
    found = []
    for schedule in merged.values():
        if schedule is None:
            continue
        if schedule.cron.next(int(time.time() * 1000)) is None:
            problems.append(f"{schedule.name}: {schedule.cron} never matches a day")
            continue
        found.append(schedule)
    return found, problems


def schedules() -> list[Schedule]:
    """Return every valid schedule (decorated and ``CAIRNQ["SCHEDULE"]``)."""
    return _resolve(get_config().get("SCHEDULE"))[0]


def schedule_errors() -> list[str]:
    """Return one message per invalid ``CAIRNQ["SCHEDULE"]`` entry (for a system check)."""
    return _resolve(get_config().get("SCHEDULE"))[1]


# ---------------------------------------------------------------- tick
# (alias, name) -> last tick this process knows is enqueued; saves a write
# transaction per schedule per call when nothing new is due.
_seen: dict[tuple[str, str], int] = {}
_reported: set[str] = set()


def forget() -> None:
    """Drop this process's memory of enqueued ticks (tests)."""
    _seen.clear()


def tick(store: Store, now_ms: int | None = None) -> list[Task]:
    """Enqueue each schedule's most recent due tick unless some worker already did; return new rows.

    Safe to call from any number of processes and hosts at once. An error on
    one schedule is logged and the others still run.
    """
    if now_ms is None:
        now_ms = store.now_ms()
    found, problems = _resolve(get_config().get("SCHEDULE"))
    for problem in problems:
        if problem not in _reported:
            _reported.add(problem)
            logger.error("periodic schedule ignored: %s", problem)
    created: list[Task] = []
    for schedule in found:
        due = schedule.cron.previous(now_ms)
        if due is None or _seen.get((store.alias, schedule.name), -1) >= due:
            continue
        try:
            row = _enqueue_tick(store, schedule, due)
        except Exception:
            logger.exception("periodic tick failed: name=%s tick_ms=%s", schedule.name, due)
            continue
        _seen[(store.alias, schedule.name)] = due
        if row is not None:
            created.append(row)
    return created


def _enqueue_tick(store: Store, schedule: Schedule, due: int) -> Task | None:
    """Advance the marker to ``due`` and submit its task, in one transaction; None if lost."""
    # Models load only once the app registry is ready; @periodic runs earlier.
    from ..models import ProtocolMeta, Task as TaskModel

    alias = store.alias
    key = marker_key(schedule.name)
    metas = ProtocolMeta.objects.using(alias)
    with transaction.atomic(using=alias):
        current = metas.filter(key=key).values_list("value", flat=True).first()
        if current is None:
            # First sighting: record the tick without running it. Two workers
            # racing here collide on the primary key; the loser just returns.
            try:
                with transaction.atomic(using=alias):
                    metas.create(key=key, value=str(due))
            except IntegrityError:
                pass
            return None
        if int(current) >= due:
            return None
        # Compare-and-set: a concurrent winner changed the value (PostgreSQL
        # re-reads the row after the lock wait), so this matches nothing.
        if metas.filter(key=key, value=current).update(value=str(due)) != 1:
            return None
        spec = build_spec(
            schedule.name,
            schedule.payload,
            key=task_key(schedule.name, due),
            conflict="reject",
            queue=schedule.queue,
            priority=schedule.priority,
            max_attempts=schedule.max_attempts,
            metadata={"periodic": schedule.name, "cron": str(schedule.cron), "tick_ms": due},
        )
        try:
            row = store.submit(spec)
        except AlreadyExists:
            return None
    logger.info("periodic task enqueued: name=%s tick_ms=%s task=%s", schedule.name, due, row.id)
    signals.task_enqueued.send(sender=TaskModel, task=row)
    return row


class Ticker:
    """Call ``tick`` at most every ``interval_s`` from a worker's loop: ``ticker.maybe_tick()``.

    Never raises: a failed tick is logged and retried at the next interval.
    ``write_lock`` is the worker's SQLite in-process writer lock, if any.
    """

    def __init__(self, store: Store, *, interval_s: float = TICK_INTERVAL_S, write_lock: Any = None) -> None:
        self.store = store
        self.interval_s = interval_s
        self.write_lock = write_lock
        self._next = 0.0

    def maybe_tick(self) -> list[Task]:
        now = time.monotonic()
        if now < self._next:
            return []
        self._next = now + self.interval_s
        if not schedules():
            return []
        try:
            if self.write_lock is not None:
                with self.write_lock:
                    return tick(self.store)
            return tick(self.store)
        except Exception:
            logger.exception("periodic tick failed")
            return []


# The decorator's earlier name, kept for callers that import it.
on_schedule = periodic
