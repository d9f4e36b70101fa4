"""Pin that a storm of wake-ups costs a listening worker a bounded number of claims.

Every submit's NOTIFY wakes every worker listening on its queue, and a woken
worker claims at once. When the task is not its to take (another worker got
it, or it serves other names), each wake-up used to cost it a claim
transaction: with a fleet behind a pooler that was most of the server's
work. After an empty woken claim the worker gathers the wake-ups of the next
~50 ms into one claim. Counted from each worker's own claim histogram
(``cairnq_worker_claim_seconds_count``, one sample per draw, empty ones too).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .test_metrics_endpoint import metrics_url, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)

SUBMITS = 300


def test_a_wake_up_storm_costs_each_listener_few_claims(
    cairnq_db: Any, dialect: str, start_worker: Any
) -> None:
    if dialect != "postgres":
        pytest.skip("the storm is of LISTEN wake-ups; SQLite's watch wakes once per commit it sees")
    from django.conf import settings

    if settings.CAIRNQ.get("TRANSACTION_POOLING") and not settings.CAIRNQ.get("LISTEN_DATABASE"):
        pytest.skip("polling only: no LISTEN wake-ups to storm")
    # Served names only: each submit below wakes them, and none is theirs.
    workers = [
        start_worker("--task", "demo.noop", "--metrics-port", "0", "--metrics-host", "127.0.0.1")
        for _ in range(3)
    ]
    for worker in workers:
        worker.wait_ready()
    urls = [metrics_url(worker) for worker in workers]
    time.sleep(1.0)  # past the start-up claims
    before = [value(scrape(url), "cairnq_worker_claim_seconds_count") for url in urls]
    started = time.monotonic()
    for i in range(SUBMITS):
        cq.submit("demo.sleep", {"ms": 1, "i": i})  # one commit, one NOTIFY each
    storm_s = time.monotonic() - started
    time.sleep(0.5)
    after = [value(scrape(url), "cairnq_worker_claim_seconds_count") for url in urls]
    claims = [a - b for a, b in zip(after, before)]
    # One claim per wake-up would be SUBMITS each. Gathered, a worker claims
    # about once per 50 ms of storm (at most 1.5 s / 25 ms at the jitter's low
    # end), plus its polls.
    bound = storm_s / 0.025 + 10
    print(f"claims per worker {claims} over {storm_s:.2f} s of {SUBMITS} submits (bound {bound:.0f})")
    assert all(n <= bound for n in claims), (claims, bound, storm_s)
    assert all(n >= 1 for n in claims), claims  # they did wake
    # None of it ran: the names are not theirs.
    assert Task.objects.filter(name="demo.sleep", status="queued").count() == SUBMITS
    assert all(worker.alive() for worker in workers)
