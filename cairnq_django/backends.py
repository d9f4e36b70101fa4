"""A ``django.tasks`` backend that stores tasks in ``cairnq_tasks``: ``CairnqBackend``.

``TASKS = {"default": {"BACKEND": "cairnq_django.backends.CairnqBackend"}}``
makes functions decorated with Django's own ``@task`` enqueue cairnq rows
that ``manage.py cairnq_worker`` runs (see docs/django-tasks.md).

Django 6 ships the framework as ``django.tasks``; on Django 5.2 the
``django-tasks`` backport provides the same API as ``django_tasks``. The
compat block below picks one (the built-in wins when both are installed).

How a Django task becomes a cairnq task:

* its cairnq name is the function's module path (``Task.module_path``);
* the payload is ``{"args": [...], "kwargs": {...}}`` after Django's own
  ``normalize_json`` (tuples become lists), encoded with cairnq's strict rules;
* ``priority`` (-100..100), ``queue_name`` and ``run_after`` map onto the
  row's priority, queue and ``run_at_ms``;
* the worker only claims names it has a handler for, so the backend registers
  a cairnq handler for every Django task it validates. Django validates a task
  when the decorator runs, so importing the module that defines it (an app's
  ``tasks.py`` is autodiscovered at start-up) is what makes a worker run it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from .client.submit import submit
from .conf import get_config
from .exceptions import Snooze
from .exceptions import TaskError as CairnqTaskError
from .protocol import bounds, envelopes
from .protocol.validation import conflict_problem
from .signals import send_after_commit
from .store import get_store
from .tasks.registry import get_task
from .tasks.registry import task as cairnq_task

if TYPE_CHECKING:
    from .tasks.context import TaskContext as CairnqContext
    from .models import Task as TaskRow

# ---------------------------------------------------------------- compat
try:  # Django 6.0+
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks import task as django_task
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # Django 5.2 with the django-tasks backport
    try:
        from django_tasks import (  # type: ignore[no-redef,assignment]
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django_tasks import task as django_task  # type: ignore[no-redef,assignment]
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,assignment]
        from django_tasks.base import Task, TaskError  # type: ignore[no-redef,assignment]
        from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef,assignment]
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef,assignment]
        from django_tasks.signals import (  # type: ignore[no-redef,assignment]
            task_enqueued,
            task_finished,
            task_started,
        )
        from django_tasks.utils import normalize_json  # type: ignore[no-redef,assignment]

        FRAMEWORK = "django_tasks"
    except ImportError as exc:
        from django.core.exceptions import ImproperlyConfigured

        class TaskFrameworkMissing(ImportError, ImproperlyConfigured):
            """Neither ``django.tasks`` nor the ``django-tasks`` backport is installed."""

        raise TaskFrameworkMissing(
            "cairnq_django.backends needs Django's task framework: Django 6.0+ "
            "(django.tasks) or, on Django 5.2, the backport: pip install django-tasks"
        ) from exc

__all__ = [
    "FRAMEWORK",
    "STATUS_MAP",
    "CairnqBackend",
    "CairnqTask",
    "django_task",
    "exception_class_path",
    "result_from_row",
    "task_from_row",
    "task_backends",
]

# cairnq status -> Django result status. Django has no "canceled": a canceled
# task did not succeed and never will by itself, so it reads FAILED (with an
# error naming TaskCanceled). ``queued`` covers a task waiting for its first
# run, for its ``run_after`` and for a retry after a failed attempt -- Django's
# READY means exactly "enqueued, or ready to be executed again".
STATUS_MAP: dict[str, Any] = {
    "queued": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "canceled": TaskResultStatus.FAILED,
}

CANCELED_ERROR_PATH = "cairnq_django.exceptions.TaskCanceled"
# A failure that no importable exception class describes (see exception_class_path).
FALLBACK_ERROR_PATH = "cairnq_django.exceptions.TaskFailed"
# worker_ids entry for an attempt whose worker the row no longer names.
UNRECORDED_WORKER = "unrecorded"
# The row's metadata key for what a Django task adds (its backend and run_after).
METADATA_KEY = "django_task"

# Keys CairnqBackend accepts in TASKS[alias]["OPTIONS"].
OPTION_DEFAULTS: dict[str, Any] = {
    # Attempts per task unless the decorator says otherwise (cairnq's default).
    "MAX_ATTEMPTS": 3,
}


# ---------------------------------------------------------------- the task class
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CairnqTask(Task):  # type: ignore[misc,valid-type]
    """Django's ``Task`` plus the cairnq options the decorator may carry.

    ``@task(resource="gpu", concurrency=2, key=..., conflict="reuse",
    max_attempts=5)``: Django passes keyword arguments it does not know to
    the backend's ``task_class`` (Django 6.1 and the django-tasks backport).
    ``key`` is a string or a callable ``key(*args, **kwargs) -> str | None``
    computed per enqueue; ``with_options()`` overrides any of them for one
    enqueue, like Django's ``using()``.
    """

    resource: str | None = None
    concurrency: int | None = None
    key: Any = None
    conflict: str = "reuse"
    max_attempts: int | None = None

    def with_options(self, **changes: Any) -> CairnqTask:
        """Return a copy with other cairnq options (``key``, ``conflict``, ``max_attempts``)."""
        allowed = {"key", "conflict", "max_attempts"}
        unknown = set(changes) - allowed
        if unknown:
            raise TypeError(f"with_options() got unexpected options: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


def _cairnq_options(task: Any) -> dict[str, Any]:
    """Read the cairnq options of a task (a plain Django ``Task`` has none)."""
    return {
        "resource": getattr(task, "resource", None),
        "concurrency": getattr(task, "concurrency", None),
        "key": getattr(task, "key", None),
        "conflict": getattr(task, "conflict", "reuse"),
        "max_attempts": getattr(task, "max_attempts", None),
    }


def _validate_options(task: Any) -> None:
    options = _cairnq_options(task)
    for option in ("resource",):
        value = options[option]
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidTask(f"{option} must be a non-empty string, got {value!r}")
    for option, allowed in (("concurrency", bounds.COUNT), ("max_attempts", bounds.MAX_ATTEMPTS)):
        value = options[option]
        problem = None if value is None else allowed.problem(value)
        if problem is not None:
            raise InvalidTask(f"{option} {problem}")
    key = options["key"]
    if key is not None and not callable(key) and (not isinstance(key, str) or not key):
        raise InvalidTask(f"key must be a non-empty string or a callable, got {key!r}")
    problem = conflict_problem(options["conflict"])
    if problem is not None:
        raise InvalidTask(problem)


# ---------------------------------------------------------------- handler registry
_lock = threading.Lock()
# cairnq task name -> the Django Task most recently validated under it.
_django_tasks: dict[str, Any] = {}


def _register(task: Any, default_attempts: Any) -> None:
    """Register (once per name) the cairnq handler that runs this Django task.

    The first task validated under a name is the decorator's (``using()``
    and ``with_options()`` copies come later and keep its registration).
    """
    name = task.module_path
    options = _cairnq_options(task)
    with _lock:
        _django_tasks[name] = task
        existing = get_task(name)
        if (
            existing is not None
            and getattr(existing.func, "_cairnq_django_task", None) == name
            and existing.resource == options["resource"]
            and existing.concurrency == options["concurrency"]
        ):
            return
        handler = _make_handler(name, task.func)
        cairnq_task(
            name,
            resource=options["resource"],
            concurrency=options["concurrency"],
            **_declared_options(task, options["max_attempts"] or default_attempts),
        )(handler)


def _declared_options(task: Any, max_attempts: Any) -> dict[str, Any]:
    """The submit options the Django task declares: its ``queue_name``, ``priority`` and attempts.

    Registered with its handler, so a submit of its name as a string
    (``cairnq_django.submit``, ``ctx.submit``, a ``CAIRNQ["SCHEDULE"]`` entry)
    writes what ``enqueue()`` writes. A value cairnq cannot store is left out
    (``None``): ``enqueue()`` refuses it naming Django's option, and checks
    report a bad ``MAX_ATTEMPTS``, rather than the decorator failing here.
    """
    return {
        "queue": task.queue_name if bounds.text_problem(task.queue_name) is None else None,
        "priority": task.priority if bounds.PRIORITY.problem(task.priority) is None else None,
        "max_attempts": max_attempts if bounds.MAX_ATTEMPTS.problem(max_attempts) is None else None,
    }


def _make_handler(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def handler(ctx: CairnqContext, payload: Any) -> Any:
        return _run(name, ctx, payload)

    # The registry tells a re-registration from a clash by module + qualname,
    # so the handler carries the Django function's.
    handler.__module__ = func.__module__
    handler.__qualname__ = func.__qualname__
    handler.__name__ = func.__name__
    handler.__doc__ = func.__doc__
    handler._cairnq_django_task = name  # type: ignore[attr-defined]
    return handler


def django_task_for(name: str) -> Any | None:
    """Return the Django ``Task`` whose module path is ``name``, importing it if needed."""
    found = _django_tasks.get(name)
    if found is not None:
        return found
    try:
        obj = import_string(name)
    except ImportError:
        return None
    return obj if isinstance(obj, Task) else None


def _split_payload(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not isinstance(payload, Mapping):
        raise TypeError(f"a Django task's payload must be an object with args/kwargs, got {payload!r}")
    args = payload.get("args") or []
    kwargs = payload.get("kwargs") or {}
    if not isinstance(args, list) or not isinstance(kwargs, Mapping):
        raise TypeError("a Django task's payload must hold a list 'args' and an object 'kwargs'")
    return list(args), dict(kwargs)


def _run(name: str, ctx: CairnqContext, payload: Any) -> Any:
    """Call the Django task for one claimed row; what it returns becomes the row's result."""
    task = django_task_for(name)
    if task is None:
        raise CairnqTaskError(
            f"{name!r} is not a Django task in this process",
            type="NoHandler",
            code="no_handler",
            retryable=False,
        )
    try:
        args, kwargs = _split_payload(payload)
    except TypeError as exc:
        raise CairnqTaskError(str(exc), type="BadPayload", code="bad_payload", retryable=False) from exc
    try:
        inspect.signature(task.func).bind(*([None] if task.takes_context else []), *args, **kwargs)
    except TypeError as exc:
        # The same payload would fail the same way on every attempt.
        raise CairnqTaskError(
            f"{name}: arguments do not fit the function's signature: {exc}",
            type="BadArguments",
            code="bad_arguments",
            retryable=False,
            # What Django's own backends report when the call does not fit.
            details={envelopes.CLASS_PATH_KEY: "builtins.TypeError"},
        ) from exc
    except ValueError:
        pass  # no signature to check (a builtin): let the call decide
    backend = task.get_backend()
    row = ctx.task
    started = timezone.now()
    described = task_from_row(task, row, default_backend=backend.alias)
    running = result_from_row(row, task=described, backend_alias=described.backend)
    object.__setattr__(running, "status", TaskResultStatus.RUNNING)
    object.__setattr__(running, "started_at", started)
    object.__setattr__(running, "last_attempted_at", started)
    task_started.send(sender=type(backend), task_result=running)
    try:
        if task.takes_context:
            raw = task.call(TaskContext(task_result=running), *args, **kwargs)
        else:
            raw = task.call(*args, **kwargs)
    except Snooze:
        raise  # back to the queue, not finished: Django's task_finished is not sent
    except KeyboardInterrupt:
        # Django's contract (ImmediateBackend): an interrupt is the user
        # stopping, not the task failing -- no task_finished, no error logged.
        raise
    except BaseException as exc:
        # The worker writes the envelope (class path and traceback in its
        # details) for whatever was raised, as for any cairnq handler.
        _finished(backend, running, exc)
        raise
    try:
        value = normalize_json(raw)
    except (TypeError, ValueError) as exc:
        # Returned as is: the worker's encoder then fails the task permanently
        # with ``unserializable_result`` (a retry would return the same value).
        _finished(backend, running, exc)
        return raw
    object.__setattr__(running, "_return_value", value)
    _finished(backend, running, None)
    return value


def _finished(backend: Any, result: Any, exc: BaseException | None) -> None:
    now = timezone.now()
    object.__setattr__(result, "finished_at", now)
    if exc is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    else:
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        result.errors.append(_error_for(exc))
    task_finished.send(sender=type(backend), task_result=result)


def _error_for(exc: BaseException) -> Any:
    # The whole traceback: this result lives in the process, not in a row.
    return TaskError(
        exception_class_path=envelopes.class_path(exc),
        traceback="".join(traceback.format_exception(exc)),
    )


# ---------------------------------------------------------------- rows -> results
def _ms(value: int | None) -> dt.datetime | None:
    if value is None:
        return None
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)


def _is_exception_class(path: Any) -> bool:
    """True if ``path`` imports as an exception class here (never raises)."""
    if not isinstance(path, str) or "." not in path:
        return False
    try:
        found = import_string(path)
    except Exception:  # noqa: BLE001 - not importable here, or its module fails to import
        return False
    return isinstance(found, type) and issubclass(found, BaseException)


def exception_class_path(envelope: Mapping[str, Any]) -> str:
    """Name the exception class a stored failure reads as (docs/django-tasks.md).

    In order: the class the worker recorded (``details["exception_class_path"]``)
    when it imports here; else a built-in or a cairnq exception with the
    envelope's ``type`` as its name (``SystemExit``, ``LookupError``,
    ``TaskError``); else ``FALLBACK_ERROR_PATH``, for failures no Python class
    describes (``NoHandler``, ``HandlerTimeout``, ``LeaseExpired``, a custom
    ``TaskError`` type, a TypeScript ``Error``).
    """
    recorded = envelopes.recorded_class_path(envelope)
    if _is_exception_class(recorded):
        return str(recorded)
    kind = envelope.get("type")
    if isinstance(kind, str) and kind.isidentifier():
        for module in ("builtins", "cairnq_django.exceptions"):
            if _is_exception_class(f"{module}.{kind}"):
                return f"{module}.{kind}"
    return FALLBACK_ERROR_PATH


def _errors(row: TaskRow) -> list[Any]:
    """Rebuild Django's error list from the row: cairnq keeps the last error only."""
    errors = []
    envelope: Mapping[str, Any] | None = row.error if isinstance(row.error, Mapping) else None
    if envelope is not None:
        text = envelopes.traceback_or_summary(envelope)
        errors.append(TaskError(exception_class_path=exception_class_path(envelope), traceback=text))
    if row.status == "canceled":
        errors.append(TaskError(exception_class_path=CANCELED_ERROR_PATH, traceback=f"task {row.id} was canceled"))
    return errors


def _worker_ids(row: TaskRow) -> list[str]:
    # One entry per attempt that ran (Django's ``attempts`` is their count).
    # The row keeps only the latest worker, and not even that while a retry
    # is pending, so earlier or unknown workers read as UNRECORDED_WORKER.
    if row.attempt <= 0:
        return []
    return [UNRECORDED_WORKER] * (row.attempt - 1) + [row.worker_id or UNRECORDED_WORKER]


def result_from_row(row: TaskRow, *, task: Any, backend_alias: str) -> Any:
    """Build Django's ``TaskResult`` for one cairnq row (see ``STATUS_MAP``).

    cairnq records no start time and only the latest worker, so
    ``started_at``/``last_attempted_at`` are None and ``worker_ids`` holds
    one entry per attempt that ran (see ``_worker_ids``).
    """
    payload: Mapping[str, Any] = row.payload if isinstance(row.payload, Mapping) else {}
    raw_args, raw_kwargs = payload.get("args"), payload.get("kwargs")
    args: list[Any] = raw_args if isinstance(raw_args, list) else []
    kwargs: Mapping[str, Any] = raw_kwargs if isinstance(raw_kwargs, Mapping) else {}
    result: Any = TaskResult(
        task=task,
        id=row.id,
        status=STATUS_MAP[row.status],
        enqueued_at=_ms(row.created_at_ms),
        started_at=None,
        finished_at=_ms(row.completed_at_ms),
        last_attempted_at=None,
        args=args,
        kwargs=dict(kwargs),
        backend=backend_alias,
        errors=_errors(row),
        worker_ids=_worker_ids(row),
    )
    if row.status == "succeeded":
        object.__setattr__(result, "_return_value", row.result)
    return result


# ---------------------------------------------------------------- rows -> tasks
def _enqueue_metadata(task: Any, alias: str) -> dict[str, Any]:
    """What the row keeps of a Django task beyond its columns (queue and priority have their own)."""
    run_after = task.run_after.isoformat() if task.run_after is not None else None
    return {METADATA_KEY: {"backend": alias, "run_after": run_after}}


def _declared_task(name: str) -> Any | None:
    """Return the task the decorator made for ``name`` (else any variant validated here)."""
    try:
        found = import_string(name)
    except Exception:  # noqa: BLE001 - defined where an import cannot reach, or not at all
        found = None
    if isinstance(found, Task) and found.module_path == name:
        return found
    return _django_tasks.get(name)


def _stored_run_after(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if timezone.is_aware(moment) else None


def _cairnq_alias(alias: Any, default: str) -> str:
    """``alias`` if it names a CairnqBackend in this process, else ``default``."""
    if not isinstance(alias, str):
        return default
    try:
        backend = task_backends[alias]
    except Exception:  # noqa: BLE001 - not in TASKS (any more)
        return default
    return alias if isinstance(backend, CairnqBackend) else default


def task_from_row(declared: Any, row: TaskRow, *, default_backend: str) -> Any:
    """Describe the task as it was enqueued: the row's queue, priority, run_after and backend.

    Built without Django's validation: a stored task stays readable after the
    settings change (a queue no longer listed, a backend renamed).
    """
    raw = row.metadata.get(METADATA_KEY) if isinstance(row.metadata, Mapping) else None
    stored: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    values = {field.name: getattr(declared, field.name) for field in dataclasses.fields(declared)}
    values.update(
        queue_name=row.queue,
        priority=row.priority,
        run_after=_stored_run_after(stored.get("run_after")),
        backend=_cairnq_alias(stored.get("backend"), default_backend),
    )
    described = object.__new__(type(declared))
    for name, value in values.items():
        object.__setattr__(described, name, value)
    return described


# ---------------------------------------------------------------- the backend
class CairnqBackend(BaseTaskBackend):  # type: ignore[misc,valid-type]
    """Enqueue Django tasks as cairnq rows; ``cairnq_worker`` runs them.

    Rows go to ``CAIRNQ["DATABASE"]``; inside ``transaction.atomic()`` on
    that alias the enqueue commits (or rolls back) with the caller's work.
    """

    task_class = CairnqTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.options = dict(self.options or {})

    @property
    def max_attempts(self) -> int:
        value = self.options.get("MAX_ATTEMPTS", OPTION_DEFAULTS["MAX_ATTEMPTS"])
        return int(value)

    # ---- validation (also where handlers get registered) ---------------------
    def validate_task(self, task: Any) -> None:
        """Validate as Django does, then the cairnq options; register the handler."""
        BaseTaskBackend.validate_task(self, task)
        _validate_options(task)
        _register(task, self.options.get("MAX_ATTEMPTS", OPTION_DEFAULTS["MAX_ATTEMPTS"]))

    # ---- enqueue ---------------------------------------------------------------
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Insert one cairnq row for this call and return its ``TaskResult`` (READY)."""
        self.validate_task(task)
        args = normalize_json(list(args))
        kwargs = normalize_json(dict(kwargs))
        options = _cairnq_options(task)
        key = options["key"]
        if callable(key):
            key = key(*args, **kwargs)
        delay_ms = 0
        if task.run_after is not None:
            delay_ms = max(0, int((task.run_after - timezone.now()).total_seconds() * 1000))
            if delay_ms > bounds.MAX_DELAY_MS:
                raise ValueError(
                    f"run_after must be at most {bounds.MAX_DELAY_MS // 86_400_000} days "
                    f"ahead, got {task.run_after.isoformat()}"
                )
        # The backend's own names for what submit would call queue and priority.
        bounds.check_text(task.queue_name, "queue_name")
        bounds.PRIORITY.check(task.priority, "priority")
        row = submit(
            task.module_path,
            {"args": args, "kwargs": kwargs},
            queue=task.queue_name,
            priority=task.priority,
            max_attempts=options["max_attempts"] or self.max_attempts,
            delay_ms=delay_ms,
            key=key,
            conflict=options["conflict"],
            metadata=_enqueue_metadata(task, self.alias),
        )
        result = result_from_row(row, task=task, backend_alias=self.alias)
        self._announce(result)
        return result

    def _announce(self, result: Any) -> None:
        def send() -> None:
            task_enqueued.send(sender=type(self), task_result=result)

        send_after_commit(get_store().alias, send)

    # ---- results ----------------------------------------------------------------
    def get_result(self, result_id: str) -> Any:
        """Read the row and map it (see ``STATUS_MAP``); unknown ids raise ``TaskResultDoesNotExist``."""
        row = get_store().get(result_id)
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        declared = _declared_task(row.name)
        if declared is None:
            raise TaskResultDoesNotExist(f"{result_id} is a cairnq task {row.name!r}, not a Django task")
        task = task_from_row(declared, row, default_backend=self.alias)
        return result_from_row(row, task=task, backend_alias=task.backend)

    # ---- checks -------------------------------------------------------------------
    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """``cairnq.E020``: unknown OPTIONS key; ``E021``: bad MAX_ATTEMPTS; ``W020``: queue no worker claims by default."""
        messages: list[checks.CheckMessage] = []
        for key in sorted(set(self.options) - set(OPTION_DEFAULTS)):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'] has an unknown key {key!r}.",
                    hint=f"CairnqBackend accepts: {', '.join(sorted(OPTION_DEFAULTS))}.",
                    id="cairnq.E020",
                )
            )
        value = self.options.get("MAX_ATTEMPTS", OPTION_DEFAULTS["MAX_ATTEMPTS"])
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be an integer >= 1, got {value!r}.",
                    hint="Use 1 for at-most-one attempt per task, 3 (the default) to retry.",
                    id="cairnq.E021",
                )
            )
        claimed = get_config().get("QUEUES") or []
        if isinstance(claimed, (list, tuple)):
            for queue in sorted(self.queues - set(claimed)):
                messages.append(
                    checks.Warning(
                        f"TASKS[{self.alias!r}] lists queue {queue!r}, which CAIRNQ['QUEUES'] does not.",
                        hint=f"Workers claim CAIRNQ['QUEUES'] unless started with --queue {queue}.",
                        id="cairnq.W020",
                    )
                )
        return messages
