"""Re-create the four fleet-limited claim functions with bitmap scans off (PostgreSQL only).

Their count of running tasks reads ``cairnq_tasks_lease_idx``, which keeps an
entry for every task settled since the last vacuum while its old lease would
still run. A bitmap scan visits each of those on every claim; a plain index
scan marks them dead once, so the next claims skip them (docs/performance.md,
"Fleet limits"). Reversing leaves them as they are: the change is a plan setting, harmless to older code.
"""

from __future__ import annotations

from django.db import migrations

from ._claim_functions import replace

FUNCTIONS = ("claim_limited", "claim_limited_keyed", "claim_concurrent", "claim_concurrent_keyed")


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0009_concurrency_without_start_log"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTIONS), migrations.RunPython.noop),
    ]
