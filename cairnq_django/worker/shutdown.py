"""Two-phase signal handling for the worker command.

The first SIGTERM or SIGINT asks the worker to stop claiming and drain (up to
``--drain-timeout``, then hand back what still runs); a second one exits the
process at once with ``128 + signal number``, leaving unfinished tasks to
lease expiry. Handlers are installed only by the command and only on the main
thread (Python allows no other), and the previous handlers are restored when
the worker returns, so embedding the worker leaves the host's handlers alone.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

logger = logging.getLogger("cairnq_django.worker")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def two_phase_signals(worker: Any) -> Iterator[None]:
    """Install the two-phase handlers around a worker run (no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            # Only a flag: a signal handler must not take locks the
            # interrupted code may hold.
            worker.request_stop()
            return
        os.write(
            2,
            f"cairnq worker: second signal ({signal.Signals(signum).name}), exiting now\n".encode(),
        )
        os._exit(128 + signum)

    previous = {signum: signal.signal(signum, handle) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            logger.info("stopped by %s", signal.Signals(received[0]).name)
