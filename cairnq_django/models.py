"""Unmanaged models over the cairnq v1 tables.

The tables are shared with the upstream SDKs, so Django must never create,
alter or drop them: ``managed = False`` keeps Django's schema editor away, and
``migrations/0001_install_schema.py`` installs the protocol's exact DDL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db import models
from django.db.models.fields.json import KeyTransform
from django.utils.translation import gettext_lazy as _

from .protocol.payload import decode_stored

TERMINAL_STATUSES = ("succeeded", "failed", "canceled")
LIVE_STATUSES = ("queued", "running")


class TaskStatus(models.TextChoices):
    # Waiting for a worker; may be delayed until run_at.
    QUEUED = "queued", _("Queued")
    # Leased by a worker; lease_until_ms bounds how long without a heartbeat.
    RUNNING = "running", _("Running")
    # Finished; the result is stored.
    SUCCEEDED = "succeeded", _("Succeeded")
    # Finished after its last allowed attempt or a permanent error.
    FAILED = "failed", _("Failed")
    # Canceled before or while running (cancel wins over any outcome).
    CANCELED = "canceled", _("Canceled")


def ms_to_datetime(value: int | None) -> dt.datetime | None:
    if value is None:
        return None
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)


class StoredJSONField(models.JSONField):  # type: ignore[type-arg]
    """A JSONField that reads a value Python cannot decode as an ``Undecodable``.

    Django's own field raises on nesting past the recursion limit or an
    integer past Python's digit limit, and returns malformed text as a bare
    string; either way one row another writer stored would break every page
    that loads it. Here such a value arrives as ``payload.Undecodable`` (its
    raw text and the reason), so the row can still be shown and canceled.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        # A key lookup SQLite extracts in its own SQL type is already decoded.
        if isinstance(expression, KeyTransform) and not isinstance(value, str):
            return value
        return decode_stored(value)


class TaskQuerySet(models.QuerySet["Task"]):
    def queued(self) -> TaskQuerySet:
        return self.filter(status=TaskStatus.QUEUED)

    def running(self) -> TaskQuerySet:
        return self.filter(status=TaskStatus.RUNNING)

    def terminal(self) -> TaskQuerySet:
        return self.filter(status__in=TERMINAL_STATUSES)

    def live(self) -> TaskQuerySet:
        return self.filter(status__in=LIVE_STATUSES)

    def expired(self, now_ms: int) -> TaskQuerySet:
        # Repeat the partial index's predicate literally so SQLite can use it.
        return self.filter(
            status=TaskStatus.RUNNING, lease_until_ms__isnull=False, lease_until_ms__lte=now_ms
        )


class Task(models.Model):
    id = models.TextField(primary_key=True)
    name = models.TextField(_("name"))
    queue = models.TextField(_("queue"), db_default="default")
    status = models.TextField(_("status"), choices=TaskStatus.choices)
    payload = StoredJSONField(_("payload"))
    result = StoredJSONField(_("result"), null=True)
    error = StoredJSONField(_("error"), null=True)
    metadata = StoredJSONField(_("metadata"), db_default={})
    progress = models.FloatField(_("progress"), null=True)
    message = models.TextField(_("message"), null=True)
    attempt = models.IntegerField(_("attempt"), db_default=0)
    max_attempts = models.IntegerField(_("max attempts"), db_default=3)
    priority = models.IntegerField(_("priority"), db_default=0)
    worker_id = models.TextField(_("worker"), null=True)
    lease_until_ms = models.BigIntegerField(_("lease until (ms)"), null=True)
    run_at_ms = models.BigIntegerField(_("run at (ms)"))
    cancel_requested_at_ms = models.BigIntegerField(_("cancel requested at (ms)"), null=True)
    parent_id = models.TextField(_("parent"), null=True)
    root_id = models.TextField(_("root"), null=True)
    correlation_id = models.TextField(_("correlation id"), null=True)
    created_at_ms = models.BigIntegerField(_("created at (ms)"))
    updated_at_ms = models.BigIntegerField(_("updated at (ms)"))
    completed_at_ms = models.BigIntegerField(_("completed at (ms)"), null=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        managed = False
        db_table = "cairnq_tasks"
        verbose_name = _("task")
        verbose_name_plural = _("tasks")
        permissions = [
            ("cancel_task", _("Can cancel tasks")),
            ("retry_task", _("Can retry tasks")),
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.id}]"

    # Status predicates, so callers need not compare strings.
    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_queued(self) -> bool:
        return self.status == TaskStatus.QUEUED

    @property
    def is_running(self) -> bool:
        return self.status == TaskStatus.RUNNING

    @property
    def succeeded(self) -> bool:
        return self.status == TaskStatus.SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.status == TaskStatus.FAILED

    @property
    def canceled(self) -> bool:
        return self.status == TaskStatus.CANCELED

    @property
    def cancel_requested(self) -> bool:
        return self.status == TaskStatus.RUNNING and self.cancel_requested_at_ms is not None

    # Datetime views of the millisecond columns, for templates and the admin.
    @property
    def created_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.created_at_ms)

    @property
    def run_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.run_at_ms)

    @property
    def completed_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.completed_at_ms)

    @property
    def lease_until(self) -> dt.datetime | None:
        return ms_to_datetime(self.lease_until_ms)

    @classmethod
    def from_row(cls, using: str, row: dict[str, Any]) -> Task:
        """Build an instance from a decoded store row without another query."""
        return cls.from_db(using, list(row), list(row.values()))


class TaskKey(models.Model):
    key = models.TextField(primary_key=True)
    # DO_NOTHING in Python: the database cascades (the protocol requires ON DELETE CASCADE).
    task = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, db_column="task_id", db_constraint=False, db_index=False
    )
    created_at_ms = models.BigIntegerField()
    updated_at_ms = models.BigIntegerField()

    class Meta:
        managed = False
        db_table = "cairnq_task_keys"
        verbose_name = _("task key")


class ProtocolMeta(models.Model):
    key = models.TextField(primary_key=True)
    value = models.TextField()

    class Meta:
        managed = False
        db_table = "cairnq_meta"
        verbose_name = _("protocol metadata")


class MigrationLedger(models.Model):
    name = models.TextField(primary_key=True)
    applied_at_ms = models.BigIntegerField()

    class Meta:
        managed = False
        db_table = "cairnq_migrations"
        verbose_name = _("schema ledger entry")


class QueueDashboard(Task):
    """An admin-index entry for the queue dashboard; holds no data of its own.

    The admin lists registered models on its index page, and a project's
    ``admin/index.html`` cannot be overridden by an app listed after
    ``django.contrib.admin``; a proxy gives the dashboard a row there.
    """

    class Meta:
        proxy = True
        verbose_name = _("queue dashboard")
        verbose_name_plural = _("queue dashboard")
        default_permissions = ()


# ---- the app's own tables (state protocol v1 does not define) ---------------


class QueuePause(models.Model):
    """A paused queue: no worker of this app claims from it until it is resumed.

    Read inside every claim statement, so a pause holds across workers,
    hosts and restarts; workers of the other SDKs do not read it.
    """

    queue = models.CharField(primary_key=True, max_length=1024)
    paused_at_ms = models.BigIntegerField()
    paused_by = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")

    class Meta:
        db_table = "cairnq_django_queue_pause"
        verbose_name = _("queue pause")
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return self.queue

    @property
    def paused_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.paused_at_ms)


class FleetStart(models.Model):
    """One started call under a fleet limit: the log fleet limits are counted from.

    A call is running while its first task (``task_id``) is still running
    under the same attempt and worker with a live lease; the rows inside a
    rate window are its recent starts. See docs/limits.md.
    """

    id = models.BigAutoField(primary_key=True)
    # "task:<name>" for a name's own limits, "resource:<name>" for a global resource.
    scope = models.CharField(max_length=1100)
    limit_key = models.CharField(max_length=1024, blank=True, default="")
    task_id = models.CharField(max_length=64)
    attempt = models.IntegerField()
    worker_id = models.CharField(max_length=255)
    started_at_ms = models.BigIntegerField()

    class Meta:
        db_table = "cairnq_django_fleet_start"
        verbose_name = _("fleet-limited start")
        default_permissions = ("view",)
        indexes = [
            models.Index(fields=["task_id"], name="cairnq_django_start_task_idx"),
            models.Index(fields=["scope", "limit_key", "started_at_ms"], name="cairnq_django_start_window_idx"),
        ]


class WorkerState(models.TextChoices):
    # Refreshed its row within the last three heartbeat intervals.
    LIVE = "live", _("Live")
    # Stopped refreshing without saying so: killed, hung, or cut off from the database.
    LOST = "lost", _("Lost")
    # Stopped cleanly (drained and wrote its last word).
    STOPPED = "stopped", _("Stopped")


class WorkerQuerySet(models.QuerySet["Worker"]):
    # A worker that has not refreshed its row for this many of its own
    # heartbeat intervals is shown as lost (two beats may be missed, as a lease allows).
    LOST_AFTER_BEATS = 3

    def with_state(self, now_ms: int) -> WorkerQuerySet:
        """Annotate ``state_now``: live, lost or stopped as of ``now_ms`` (the store's clock)."""
        # bigint: as an int4 expression, Django would judge "< now_ms" out of
        # range and fold the comparison away on PostgreSQL.
        lost_at = models.ExpressionWrapper(
            models.F("last_seen_at_ms") + self.LOST_AFTER_BEATS * models.F("heartbeat_interval_ms"),
            output_field=models.BigIntegerField(),
        )
        return self.alias(lost_at=lost_at).annotate(
            state_now=models.Case(
                models.When(stopped_at_ms__isnull=False, then=models.Value(WorkerState.STOPPED.value)),
                models.When(lost_at__lt=now_ms, then=models.Value(WorkerState.LOST.value)),
                default=models.Value(WorkerState.LIVE.value),
                output_field=models.CharField(),
            )
        )

    def stopped(self) -> WorkerQuerySet:
        return self.filter(stopped_at_ms__isnull=False)

    def in_states(self, states: Sequence[str]) -> WorkerQuerySet:
        """Keep rows whose ``state_now`` (see ``with_state``) is one of ``states``."""
        # By keyword dict: the type checker's plugin does not see annotations.
        return self.filter(**{"state_now__in": list(states)})

    def live(self, now_ms: int) -> WorkerQuerySet:
        return self.with_state(now_ms).in_states([WorkerState.LIVE])

    def lost(self, now_ms: int) -> WorkerQuerySet:
        return self.with_state(now_ms).in_states([WorkerState.LOST])


class Worker(models.Model):
    """One ``cairnq_worker`` process, as it registered itself and last refreshed itself.

    The worker inserts the row at start-up, refreshes ``last_seen_at_ms`` (and
    its counters) with each heartbeat, and stamps ``stopped_at_ms`` when it
    stops cleanly; housekeeping deletes rows not seen for
    ``CAIRNQ["WORKER_KEEP_MS"]``. Workers of the other SDKs do not register.
    """

    # The id the worker leases tasks under (cairnq_tasks.worker_id).
    id = models.CharField(_("worker id"), primary_key=True, max_length=255)
    host = models.CharField(_("host"), max_length=255)
    pid = models.IntegerField(_("pid"))
    queues = models.JSONField(_("queues"), default=list)
    names = models.JSONField(_("names served"), default=list)
    concurrency = models.IntegerField(_("concurrency"))
    resources = models.JSONField(_("resources"), default=dict)
    global_resources = models.JSONField(_("global resources"), default=dict)
    version = models.CharField(_("version"), max_length=64, blank=True, default="")
    heartbeat_interval_ms = models.IntegerField(_("heartbeat interval (ms)"))
    started_at_ms = models.BigIntegerField(_("started at (ms)"))
    last_seen_at_ms = models.BigIntegerField(_("last seen at (ms)"))
    stopped_at_ms = models.BigIntegerField(_("stopped at (ms)"), null=True, blank=True)
    # As of the last refresh: calls' tasks in flight, attempts ended since start-up.
    in_flight = models.IntegerField(_("in flight"), default=0)
    succeeded = models.BigIntegerField(_("succeeded"), default=0)
    failed = models.BigIntegerField(_("failed"), default=0)
    # Attempts ended per minute over about the last minute, as the worker measured it.
    per_minute = models.FloatField(_("attempts per minute"), default=0.0)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "cairnq_django_worker"
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        default_permissions = ("view",)

    def __str__(self) -> str:
        return self.id

    def state(self, now_ms: int) -> WorkerState:
        """Return live, lost or stopped as of ``now_ms`` (the store's clock)."""
        if self.stopped_at_ms is not None:
            return WorkerState.STOPPED
        lost_at = self.last_seen_at_ms + WorkerQuerySet.LOST_AFTER_BEATS * self.heartbeat_interval_ms
        return WorkerState.LIVE if lost_at >= now_ms else WorkerState.LOST

    @property
    def started_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.started_at_ms)

    @property
    def last_seen_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.last_seen_at_ms)

    @property
    def stopped_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.stopped_at_ms)


# ``QueueMinute`` rows are one minute each, starting on a multiple of this (ms since the epoch).
MINUTE_MS = 60_000
# Pickup-latency buckets of ``QueueMinute``: (column, upper bound in ms, inclusive);
# the last column counts every slower pickup. Fixed, so rows of every worker add up.
PICKUP_BUCKETS: tuple[tuple[str, int | None], ...] = (
    ("pickup_le_10ms", 10),
    ("pickup_le_50ms", 50),
    ("pickup_le_250ms", 250),
    ("pickup_le_1s", 1_000),
    ("pickup_le_5s", 5_000),
    ("pickup_le_30s", 30_000),
    ("pickup_le_2min", 120_000),
    ("pickup_slower", None),
)
# The counts a settlement adds to, by the status it left the task in ("queued": a retry).
SETTLED_COLUMNS = {"succeeded": "succeeded", "failed": "failed", "queued": "retried", "canceled": "canceled"}


class QueueMinute(models.Model):
    """One queue's figures for one minute, added to by every worker (the dashboard's history).

    Workers count settlements and pickups in memory and add them here every
    few seconds with one upsert per flush; the housekeeping thread deletes
    rows older than ``CAIRNQ["HISTORY_KEEP_MS"]``. See docs/admin.md.
    """

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=1024)
    # The minute's start, ms since the epoch (UTC), by the worker's clock.
    minute_ms = models.BigIntegerField()
    succeeded = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)
    canceled = models.BigIntegerField(default=0)
    # Tasks started, and the sum of their pickup latencies (a mean needs no bucket).
    pickups = models.BigIntegerField(default=0)
    pickup_ms_sum = models.BigIntegerField(default=0)
    pickup_le_10ms = models.BigIntegerField(default=0)
    pickup_le_50ms = models.BigIntegerField(default=0)
    pickup_le_250ms = models.BigIntegerField(default=0)
    pickup_le_1s = models.BigIntegerField(default=0)
    pickup_le_5s = models.BigIntegerField(default=0)
    pickup_le_30s = models.BigIntegerField(default=0)
    pickup_le_2min = models.BigIntegerField(default=0)
    pickup_slower = models.BigIntegerField(default=0)

    class Meta:
        db_table = "cairnq_django_queue_minute"
        verbose_name = _("queue minute")
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(fields=["queue", "minute_ms"], name="cairnq_django_minute_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.minute_ms}"


# ``ErrorMinute.message`` holds a failure message's first line, cut to this many characters.
ERROR_MESSAGE_CHARS = 200
# ``ErrorMinute.error_type`` is cut to this many characters.
ERROR_TYPE_CHARS = 200


class ErrorMinute(models.Model):
    """Failed attempts of one minute, by queue, task name, error type and short message (the dashboard's triage).

    Workers count each failed attempt whose error they wrote, in memory, and
    add them here with the queue history's flush; ``failed`` counts attempts
    that left the task failed, ``retried`` those that put it back for another
    attempt. Pruned with ``CAIRNQ["HISTORY_KEEP_MS"]``. See docs/admin.md.
    """

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=1024)
    # The minute's start, ms since the epoch (UTC), by the worker's clock.
    minute_ms = models.BigIntegerField()
    name = models.CharField(max_length=1024)
    error_type = models.CharField(max_length=ERROR_TYPE_CHARS)
    # The first line of the error's message, cut to ERROR_MESSAGE_CHARS: a prefix of the stored message.
    message = models.CharField(max_length=ERROR_MESSAGE_CHARS)
    failed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)

    class Meta:
        db_table = "cairnq_django_error_minute"
        verbose_name = _("error minute")
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "minute_ms", "name", "error_type", "message"], name="cairnq_django_error_minute_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.minute_ms}: {self.error_type}"


class BulkAction(models.TextChoices):
    RETRY = "retry", _("Retry tasks")
    RETRY_RESET = "retry_reset", _("Retry tasks, resetting attempts")
    CANCEL = "cancel", _("Cancel tasks")


class BulkState(models.TextChoices):
    # Waiting for a worker's housekeeping to take it.
    PENDING = "pending", _("Pending")
    # At least one chunk done; more rows after the cursor.
    RUNNING = "running", _("Running")
    # Every matching row up to the end of the id order was looked at.
    DONE = "done", _("Done")
    # Stopped by an operator; rows already changed stay changed.
    CANCELED = "canceled", _("Stopped")


OPEN_BULK_STATES = (BulkState.PENDING, BulkState.RUNNING)


class BulkOperation(models.Model):
    """A retry or cancel of every task matching a filter, advanced in chunks by the workers.

    The admin's confirmation creates the row; a worker's housekeeping takes
    one open operation at a time under a row lock and moves it ``CHUNK`` ids
    further (in id order after ``cursor``), writing the admin log for each
    changed task. See docs/admin.md.
    """

    id = models.BigAutoField(primary_key=True)
    action = models.CharField(_("action"), max_length=20, choices=BulkAction.choices)
    # The task list's filter: {"status": ..., "queue": ..., "error_type": ...} (client/task_filter.py).
    filter = models.JSONField(_("filter"), default=dict)
    # The user's pk as text (the user table may live in another database) and name at the time.
    requested_by_pk = models.CharField(max_length=255)
    requested_by = models.CharField(_("requested by"), max_length=150)
    state = models.CharField(_("state"), max_length=20, choices=BulkState.choices, default=BulkState.PENDING)
    # The last task id looked at; the next chunk starts after it.
    cursor = models.TextField(null=True, blank=True)
    # Rows matching at confirmation, rows looked at since, rows changed, rows a database error skipped.
    matched = models.BigIntegerField(_("matched"), default=0)
    processed = models.BigIntegerField(_("processed"), default=0)
    changed = models.BigIntegerField(_("changed"), default=0)
    errors = models.BigIntegerField(_("errors"), default=0)
    last_error = models.TextField(_("last error"), blank=True, default="")
    # The worker that advanced it last.
    worker_id = models.CharField(max_length=255, blank=True, default="")
    created_at_ms = models.BigIntegerField()
    updated_at_ms = models.BigIntegerField()
    finished_at_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "cairnq_django_bulk_operation"
        verbose_name = _("bulk operation")
        default_permissions = ("view",)
        indexes = [models.Index(fields=["state", "id"], name="cairnq_django_bulk_state_idx")]

    def __str__(self) -> str:
        return f"{self.get_action_display()} #{self.pk}"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_BULK_STATES

    @property
    def created_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.created_at_ms)

    @property
    def finished_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.finished_at_ms)


# Workflows keep their tables in their own package; imported here so Django registers them with the app.
from .workflows.models import WorkflowEdge, WorkflowNode, WorkflowRun  # noqa: E402, F401
