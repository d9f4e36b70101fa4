"""Re-create the four fleet-limited claim functions planned once per session (PostgreSQL only).

Each call had planned its statement afresh, which cost about as much as
running it: a keyed claim of 8 rows took 2.0 ms, 1.1 ms with the plan kept
(docs/performance.md, "Fleet limits"). The kept plan reads the name's own
index whatever the statistics say. Reversing leaves them as they are: the
change is a plan setting and a redundant condition, harmless to older code.
"""

from __future__ import annotations

from django.db import migrations

from ._claim_functions import replace

FUNCTIONS = ("claim_limited", "claim_limited_keyed", "claim_concurrent", "claim_concurrent_keyed")


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0010_claim_functions_index_scans"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTIONS), migrations.RunPython.noop),
    ]
