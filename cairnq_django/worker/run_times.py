"""Recent run times per task name, and how far a worker may claim ahead on them (``CLAIM_AHEAD = "auto"``).

Claiming ahead pays when a call runs about as long as its own claim round
trip: a worker at ``--concurrency 1`` then spends most of its time claiming.
A name's average is of its calls, a batch call counted whole. A batch call
already shares one claim among its tasks, so at most BATCH_AHEAD calls of a
batch handler wait per slot: enough to overlap the next claim with the call
running, where more only added leases to renew and write
(docs/performance.md, "Claiming ahead by default").
It costs when a claimed task waits behind a long one while another worker is
idle (Celery's prefetch problem). So the automatic mode claims ahead only
tasks of names seen to be short, only while every call in flight is of a
short name too, and only as many as make about ``AHEAD_WORK_MS`` of work.
The worker hands back what still waits when a call outruns
``HAND_BACK_AFTER_MS`` (a short name that ran long once).
"""

from __future__ import annotations

import threading

# A name whose calls average this or less counts as short once seen SAMPLES times.
SHORT_MS = 20.0
SAMPLES = 3
# Weight of the newest call in the running average.
WEIGHT = 0.2
# The claimed-ahead work a worker holds per slot, estimated from the averages.
AHEAD_WORK_MS = 20.0
# A ceiling whatever the estimate: 63 was the best fixed setting measured for no-op tasks.
MAX_AHEAD = 63
# Batch calls claimed ahead per slot, whatever the estimate: 2 drained 256-task batches
# fastest on both dialects, 63 (the estimate for no-op calls) a sixth slower than none.
BATCH_AHEAD = 2
# Calls waiting claimed-ahead are handed back once a call in flight has run this long.
HAND_BACK_AFTER_MS = 50.0
# Below timer resolution a no-op's average reads as zero: count it as this.
FLOOR_MS = 0.05


class RunTimes:
    """Per-name running averages of call duration (a batch call counts whole); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._average: dict[str, float] = {}
        self._seen: dict[str, int] = {}
        self._batch: set[str] = set()

    def record(self, name: str, duration_ms: float, *, batch: bool = False) -> None:
        call_ms = max(duration_ms, FLOOR_MS)
        with self._lock:
            if batch:
                self._batch.add(name)
            seen = self._seen.get(name, 0)
            old = self._average.get(name)
            self._average[name] = call_ms if old is None else old + WEIGHT * (call_ms - old)
            self._seen[name] = seen + 1

    def short(self, name: str) -> bool:
        """Whether ``name`` has been seen often enough, and quick enough, to claim ahead."""
        with self._lock:
            return self._is_short(name)

    def short_names(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The short ones of ``names``, in their order (asked on every poll: one lock for all)."""
        with self._lock:
            return tuple(name for name in names if self._is_short(name))

    def _is_short(self, name: str) -> bool:
        return self._seen.get(name, 0) >= SAMPLES and self._average[name] <= SHORT_MS

    def ahead(self, names: tuple[str, ...], concurrency: int) -> int:
        """How many calls of ``names`` (all short) make about ``AHEAD_WORK_MS`` of work per slot."""
        with self._lock:
            slowest = max((self._average.get(name, SHORT_MS) for name in names), default=SHORT_MS)
            batch = any(name in self._batch for name in names)
        per_slot = int(AHEAD_WORK_MS / max(slowest, FLOOR_MS))
        if batch:
            per_slot = min(per_slot, BATCH_AHEAD)
        return max(0, min(MAX_AHEAD, per_slot * concurrency))
