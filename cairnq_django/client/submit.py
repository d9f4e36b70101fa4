"""Submit tasks: validate and encode the arguments, pass the submit gate, insert, announce.

A call inside ``transaction.atomic()`` on ``CAIRNQ["DATABASE"]`` is part of
the caller's transaction, and ``task_enqueued`` waits for its commit. With
the ``otel`` extra each call is a PRODUCER span whose context the tasks'
metadata carry (``tracing/producer.py``).
``client/async_api.py`` holds the async twins.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import signals, tracing
from ..conf import get_config
from ..exceptions import PayloadTooLarge
from ..protocol import bounds, validation
from ..protocol.limits import METADATA_KEY, METADATA_NAMESPACE, limit_key_of
from ..protocol.payload import encode_object
from ..store import get_store
from ..store.base import SubmitSpec
from ..tasks.registry import get_task
from ..tasks.unknown import judge, judged
from ..workflows.current import current_batch
from . import backpressure, declared
from .schema_guard import needs_schema

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import Store
    from ..tasks.registry import TaskDefinition

SUBMIT_OPTIONS = validation.SUBMIT_OPTIONS


def _check_payload_size(payload_json: str, limit: int | None) -> None:
    """Raise ``PayloadTooLarge`` past ``limit`` (``MAX_PAYLOAD_BYTES``; None: no limit)."""
    # A UTF-8 character takes 1-4 bytes: most payloads are decided by length alone.
    if limit is None or len(payload_json) * 4 <= limit:
        return
    size = len(payload_json.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(size, limit)


def build_spec(
    name: Any,
    payload: Any = None,
    *,
    key: Any = None,
    conflict: Any = "reuse",
    queue: Any = declared.QUEUE,
    priority: Any = declared.PRIORITY,
    max_attempts: Any = declared.MAX_ATTEMPTS,
    delay_ms: Any = 0,
    metadata: Any = None,
    correlation_id: Any = None,
    parent_id: Any = None,
    root_id: Any = None,
) -> SubmitSpec:
    """Validate one submit's arguments and encode its JSON; raise before any write.

    The order is the protocol's (3.1): conflict, max_attempts, delay_ms, then
    the remaining argument types, then the payload and metadata encoding.
    ``queue``, ``priority`` and ``max_attempts`` left out come from the name's
    declaration (``declared.resolve``).
    """
    queue, priority, max_attempts = declared.resolve(name, queue, priority, max_attempts)
    validation.check_submit_args(
        name, queue, key, conflict, priority, max_attempts, delay_ms, correlation_id, parent_id, root_id
    )
    payload_json = encode_object(payload, what="payload")
    _check_payload_size(payload_json, get_config()["MAX_PAYLOAD_BYTES"])
    metadata_json = encode_object(metadata, what="metadata")
    definition = get_task(name)
    if definition is not None and definition.limit_key is not None:
        metadata_json = _with_limit_key(metadata, limit_key_of(definition.limit_key, payload, name))
    return SubmitSpec(
        name=name,
        payload_json=payload_json,
        queue=queue,
        key=key,
        conflict=conflict,
        priority=priority,
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        metadata_json=metadata_json,
        parent_id=parent_id,
        root_id=root_id,
        correlation_id=correlation_id,
    )


def _with_limit_key(metadata: Any, key: str) -> str:
    """The metadata with the task's limit key under the app's namespace (docs/limits.md)."""
    merged = dict(metadata or {})
    own = merged.get(METADATA_NAMESPACE)
    merged[METADATA_NAMESPACE] = {**(own if isinstance(own, Mapping) else {}), METADATA_KEY: key}
    return encode_object(merged, what="metadata")


def gate_limits(specs: Iterable[SubmitSpec]) -> builtins.list[tuple[str, int]]:
    """The (queue, depth limit) of each spec whose queue the submit gate holds."""
    config = get_config()
    gated = []
    for spec in specs:
        limit = backpressure.limit_for(config, spec.queue)
        if limit is not None:
            gated.append((spec.queue, limit))
    return gated


def _pass_gate(store: Store, specs: Sequence[SubmitSpec]) -> None:
    """Wait (sleeping) until the gate lets every spec's queue take one more task."""
    gated = gate_limits(specs)
    if not gated:
        return
    max_wait_ms = int(get_config()["MAX_QUEUE_WAIT_MS"])
    for queue, limit in gated:

        def probe(n: int, q: str = queue) -> int:
            return store.queue_depth(q, n)

        backpressure.gate.acquire(store.alias, queue, limit, max_wait_ms, probe)


def announce(store: Store, rows: Sequence[Task]) -> None:
    """Send ``task_enqueued`` for the rows this call inserted (``signals.send_after_commit``).

    The store marks each returned row ``cairnq_inserted`` (False for an
    existing row a keyed ``reuse`` found): only new rows are announced.
    """
    # Imported here: this module loads with the package, before the models may be.
    from ..models import Task as TaskModel

    if not signals.task_enqueued.receivers:
        return  # nothing listens: skip walking a bulk submit's rows
    fresh = [row for row in rows if getattr(row, "cairnq_inserted", True)]
    if not fresh:
        return

    def send() -> None:
        for row in fresh:
            signals.task_enqueued.send(sender=TaskModel, task=row)

    signals.send_after_commit(store.alias, send)


@needs_schema
def submit(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    key: str | None = None,
    conflict: str = "reuse",
    queue: str = declared.QUEUE,
    priority: int = declared.PRIORITY,
    max_attempts: int = declared.MAX_ATTEMPTS,
    delay_ms: int = 0,
    metadata: dict[str, Any] | None = None,
    correlation_id: str | None = None,
    parent_id: str | None = None,
    root_id: str | None = None,
) -> Task:
    """Enqueue one task and return its row (or the existing row a keyed ``reuse`` found).

    ``queue``, ``priority`` and ``max_attempts`` default to what the name's
    ``@task`` declaration in this process sets, else ``"default"``, 0 and 3;
    a value passed here wins.

    Raises ``ValueError`` for a bad argument, ``SerializationError`` for a
    payload or metadata JSON cannot carry, ``AlreadyExists`` for a keyed
    ``reject`` that found a task, and ``QueueFull`` when the submit gate
    waited ``MAX_QUEUE_WAIT_MS`` without headroom. Nothing is written in any of
    these cases.
    """
    spec = build_spec(
        name,
        payload,
        key=key,
        conflict=conflict,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        metadata=metadata,
        correlation_id=correlation_id,
        parent_id=parent_id,
        root_id=root_id,
    )
    judge(spec.name)
    store = get_store()
    with tracing.publishing(spec.queue, spec.name) as publication:
        _pass_gate(store, [spec])
        # Inside ``with cairnq.Batch(...)`` the task joins the batch (workflows/batch.py).
        batch = current_batch.get()
        stamped = publication.stamp(spec)
        row = store.submit(stamped) if batch is None else batch.insert(store, [stamped])[0]
        publication.published([row])
    announce(store, [row])
    return row


def check_many_options(common: Mapping[str, Any]) -> None:
    """Refuse an unknown shared option of ``submit_many`` and check each known one by its rule."""
    unknown = set(common) - set(SUBMIT_OPTIONS)
    if unknown:
        raise TypeError(f"submit_many() got unexpected options: {', '.join(sorted(unknown))}")
    # Checked here as well as per item: a bad shared option is refused even
    # when there are no items, or when every item overrides it.
    for option, value in common.items():
        validation.check_submit_option(option, value)


def specs_for_many(items: Iterable[Any], common: Mapping[str, Any]) -> Iterator[SubmitSpec]:
    """Validate and encode each item as it is read: a generator.

    Lazy so a store that streams its writes (PostgreSQL's COPY) checks the
    next items while the server inserts the ones before; the store writes
    the batch in one transaction, so an item that raises still leaves
    nothing written.
    """
    size_limit = get_config()["MAX_PAYLOAD_BYTES"]
    # A pair's options are ``common`` plus what its name's declaration fills
    # in, so pairs of one declaration (None: every undeclared name) share a
    # template: the first pair builds and validates it, the others only
    # check their own name and payload.
    templates: dict[TaskDefinition | None, SubmitSpec] = {}
    for index, item in enumerate(items):
        # Pairs first: the Mapping test is an ABC check, slow next to these.
        if isinstance(item, (tuple, builtins.list)) and len(item) == 2:
            name, payload = item
            definition = get_task(name) if isinstance(name, str) else None
            if definition is not None and definition.limit_key is not None:
                yield build_spec(name, payload, **common)  # its own limit key in its metadata
                continue
            template = templates.get(definition)
            if template is None:
                template = templates[definition] = build_spec(name, payload, **common)
                yield template
            else:
                yield _like(template, name, payload, size_limit)
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"items[{index}] must be a dict or a (name, payload) pair, got {item!r}")
        fields = dict(item)
        if "name" not in fields:
            raise ValueError(f"items[{index}] has no 'name'")
        bad = set(fields) - set(SUBMIT_OPTIONS) - {"name", "payload"}
        if bad:
            raise ValueError(f"items[{index}] has unknown fields: {', '.join(sorted(bad))}")
        name = fields.pop("name")
        payload = fields.pop("payload", None)
        yield build_spec(name, payload, **{**common, **fields})


def _like(shared: SubmitSpec, name: Any, payload: Any, size_limit: int | None) -> SubmitSpec:
    """``shared`` with another name and payload, checked as ``build_spec`` checks them."""
    bounds.check_text(name, "name")
    payload_json = encode_object(payload, what="payload")
    _check_payload_size(payload_json, size_limit)
    # A copy of the shared spec's fields with the two that differ: running the
    # (frozen) dataclass constructor, or dataclasses.replace, per item cost
    # more than the checks above.
    fields = shared.__dict__.copy()
    fields["name"] = name
    fields["payload_json"] = payload_json
    spec = _new_object(type(shared))
    _set_attribute(spec, "__dict__", fields)
    return spec


_new_object = object.__new__
_set_attribute = object.__setattr__


def _gated_specs(store: Store, specs: Iterable[SubmitSpec]) -> Iterable[SubmitSpec]:
    """``specs``, after the submit gate let them through when a depth limit is set.

    The gate needs every item's queue before the first write, so a gated call
    reads (and checks) all of its items first.
    """
    if not backpressure.configured(get_config()):
        return specs
    listed = builtins.list(specs)
    _pass_gate(store, listed)
    return listed


@needs_schema
def submit_many(items: Iterable[Any], **common: Any) -> builtins.list[Task]:
    """Enqueue many tasks in one transaction; return their rows in input order.

    Each item is a dict of ``submit`` arguments (``name`` required) or a
    ``(name, payload)`` pair; keyword arguments are shared defaults that an
    item's own fields override. Every item is validated and encoded as it is
    written, inside the batch's transaction, so one bad item raises and
    inserts nothing.
    """
    check_many_options(common)
    store = get_store()
    with tracing.publishing(common.get("queue", "default")) as publication:
        specs = publication.stamp_all(judged(specs_for_many(items, common)))
        batch = current_batch.get()  # as in submit: inside a Batch the tasks join it
        gated = _gated_specs(store, specs)
        rows = store.submit_many(gated) if batch is None else batch.insert(store, gated)
        publication.published(rows)
    announce(store, rows)
    return rows
