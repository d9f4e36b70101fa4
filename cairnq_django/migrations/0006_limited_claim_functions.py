"""Create the fleet-limited claim functions (PostgreSQL only; docs/limits.md).

The two claims of a fleet-limited name run as PL/pgSQL functions, so the
server keeps their plans for the session and the scopes' locks and the
claim cost one round trip (store/postgres/sql/functions/). They belong to
the app, like its ``cairnq_django_*`` tables: the protocol's tables and
the other SDKs never see them. A later change to a claim ships a new
migration that runs ``CREATE OR REPLACE FUNCTION`` again.
"""

from __future__ import annotations

from django.db import migrations

from ._claim_functions import drop, replace

FUNCTIONS = ("claim_limited", "claim_limited_keyed")


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0005_worker_registry"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTIONS), drop(FUNCTIONS)),
    ]
