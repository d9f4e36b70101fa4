"""``manage.py`` whose process has a slow ``task_finished`` receiver.

Run as ``python tests/worker/_slow_settle_worker.py cairnq_worker ARGS`` with
``SETTLE_SLEEP_MS`` set: the receiver sleeps that long for every settled
task, on the settler's thread, so settlement falls behind the handlers the
way a user's slow receiver (a webhook, say) makes it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from cairnq_django import signals

    pause_s = int(os.environ["SETTLE_SLEEP_MS"]) / 1000

    def slow_receiver(**kwargs: Any) -> None:
        time.sleep(pause_s)

    signals.task_finished.connect(slow_receiver, weak=False)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
