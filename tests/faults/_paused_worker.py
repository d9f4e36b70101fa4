"""``manage.py`` for fault case F02: its workers sleep inside every claim transaction that locked rows.

Run as ``python tests/faults/_paused_worker.py cairnq_worker ARGS``. The pause
is the worker's injected claim hook (``ClaimHooks.after_lock``), so a test
can kill the process while the claim holds its row locks, uncommitted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

# The claim sleeps this long after locking its rows, before COMMIT.
PAUSE_AFTER_LOCK_S = 30.0


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from cairnq_django.store.base import ClaimHooks
    from cairnq_django.worker import loop

    hooks = ClaimHooks(after_lock=lambda: time.sleep(PAUSE_AFTER_LOCK_S))

    class PausedWorker(loop.Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, hooks=hooks, **kwargs)

    # The command builds its Worker from this name when it runs.
    loop.Worker = PausedWorker  # type: ignore[misc]
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
