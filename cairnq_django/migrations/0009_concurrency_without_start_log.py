"""Claim functions for names limited by global_concurrency alone (PostgreSQL only; docs/limits.md).

A name with no rate limit, no global resource and no batch counts its live
calls from its tasks running under an unexpired lease, so its claim writes
nothing to ``cairnq_django_fleet_start``. These are new functions beside
0006's, which still serve every other limited name; reversing drops them.
"""

from __future__ import annotations

from django.db import migrations

from ._claim_functions import drop, replace

FUNCTIONS = ("claim_concurrent", "claim_concurrent_keyed")


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0008_triage"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTIONS), drop(FUNCTIONS)),
    ]
