"""The tables of workflows: runs, their nodes and the edges between them.

A node that is not ready is a row here, never a task: every SDK claims any
``queued`` task row, so a node's task is inserted only once its parents
have ended (docs/workflows.md). Registered with the app through
``cairnq_django/models.py``; created by migration 0012.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db import models
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from ..store.base import SubmitSpec


def ms_to_datetime(value: int | None) -> dt.datetime | None:
    # As cairnq_django.models has it; not imported from there, which imports this module.
    return None if value is None else dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)


class RunStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELED = "canceled", _("Canceled")


class NodeState(models.TextChoices):
    # Waiting for its parents: no task row exists yet.
    HELD = "held", _("Held")
    # Its task row was inserted; it ends with the task.
    RELEASED = "released", _("Released")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELED = "canceled", _("Canceled")
    # A parent failed and its policy says "skip": it never ran, its children go on.
    SKIPPED = "skipped", _("Skipped")


ENDED_STATES = frozenset({NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELED, NodeState.SKIPPED})


class ParentFailure(models.TextChoices):
    """What a node does when a parent failed or was canceled."""

    CANCEL = "cancel", _("Cancel")
    SKIP = "skip", _("Skip")
    RUN = "run", _("Run")


class WorkflowRun(models.Model):
    """One submitted workflow (or chain, group, chord): its nodes count down to its end."""

    id = models.CharField(primary_key=True, max_length=64)
    name = models.CharField(_("name"), max_length=1024)
    # A caller's key: a second submit with a key in use returns the run that holds it.
    key = models.CharField(_("key"), max_length=1024, null=True, blank=True, unique=True)
    kind = models.CharField(_("kind"), max_length=16, default="workflow")
    status = models.CharField(_("status"), max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    nodes_total = models.IntegerField(_("nodes"))
    # Nodes not ended yet; the run ends when the last one does.
    nodes_left = models.IntegerField(_("nodes left"))
    nodes_failed = models.IntegerField(_("nodes failed"), default=0)
    created_at_ms = models.BigIntegerField()
    finished_at_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "cairnq_django_workflow"
        verbose_name = _("workflow")
        permissions = [("change_workflow_state", "Can cancel and retry workflows")]
        indexes = [
            models.Index(fields=["status", "created_at_ms"], name="cairnq_django_wf_status_idx"),
            models.Index(fields=["name", "created_at_ms"], name="cairnq_django_wf_name_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def created_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.created_at_ms)

    @property
    def finished_at(self) -> dt.datetime | None:
        return ms_to_datetime(self.finished_at_ms)


class WorkflowNode(models.Model):
    """One step of a run: held until its parents end, then a task, then its outcome."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="nodes", db_constraint=False)
    name = models.CharField(_("name"), max_length=1024)
    task_name = models.CharField(_("task"), max_length=1024)
    # The submit's arguments, validated and encoded when the run was submitted.
    payload_json = models.TextField()
    queue = models.CharField(max_length=1024)
    priority = models.IntegerField()
    max_attempts = models.IntegerField()
    delay_ms = models.BigIntegerField(default=0)
    metadata_json = models.TextField(default="{}")
    on_parent_failure = models.CharField(max_length=8, choices=ParentFailure.choices, default=ParentFailure.CANCEL)
    # Count down: one decrement per parent that ends (docs/workflows.md, "fan-in").
    parents_left = models.IntegerField()
    parents_failed = models.IntegerField(default=0)
    state = models.CharField(_("state"), max_length=16, choices=NodeState.choices, default=NodeState.HELD)
    task_id = models.CharField(_("task id"), max_length=64, null=True, blank=True)
    error = models.TextField(_("error"), blank=True, default="")
    ended_at_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "cairnq_django_workflow_node"
        verbose_name = _("workflow node")
        default_permissions = ("view",)
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="cairnq_django_wf_node_name_uniq")]
        indexes = [
            models.Index(fields=["task_id"], name="cairnq_django_wfnode_task_idx"),
            # The sweeper's pass reads the released nodes only.
            models.Index(
                fields=["state", "id"], name="cairnq_django_wfnode_live_idx", condition=models.Q(state="released")
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def of_spec(
        cls,
        run_id: str,
        name: str,
        spec: SubmitSpec,
        *,
        parents_left: int,
        state: str = NodeState.HELD,
        on_parent_failure: str = ParentFailure.CANCEL,
        task_id: str | None = None,
    ) -> WorkflowNode:
        """A node row (unsaved) holding ``spec``'s checked and encoded submit arguments."""
        return cls(
            run_id=run_id,
            name=name,
            task_name=spec.name,
            payload_json=spec.payload_json,
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.max_attempts,
            delay_ms=spec.delay_ms,
            metadata_json=spec.metadata_json,
            on_parent_failure=on_parent_failure,
            parents_left=parents_left,
            state=state,
            task_id=task_id,
        )


class WorkflowEdge(models.Model):
    """``parent`` must end before ``child`` is released."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    parent = models.ForeignKey(WorkflowNode, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    child = models.ForeignKey(WorkflowNode, on_delete=models.CASCADE, related_name="+", db_constraint=False)

    class Meta:
        db_table = "cairnq_django_workflow_edge"
        verbose_name = _("workflow edge")
        default_permissions = ()
