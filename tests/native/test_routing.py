"""Pin routing: with ``CAIRNQ["DATABASE"] = "queue"`` and a router sending the
``cairnq`` app there, ``migrate`` must install the cairnq tables only in the queue
database and the project's tables only in ``default``; the API, the django.tasks
backend, ``run_until_idle``, periodic markers and a real ``cairnq_worker`` must all
use the queue database while task handlers write project models to ``default``; and
``Task.objects`` must read through the router. Runs in subprocesses with
``testproject.settings_routing`` against two SQLite files or two PostgreSQL databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

pytest.importorskip("cairnq_django.backends")

REPO = Path(__file__).resolve().parents[2]


def _pg_admin(conf: dict[str, Any]) -> Any:
    import psycopg

    return psycopg.connect(
        host=conf.get("HOST") or "127.0.0.1",
        port=conf.get("PORT") or 5432,
        user=conf.get("USER") or None,
        dbname="postgres",
        autocommit=True,
    )


@pytest.fixture
def routed_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two empty databases (app, queue) and the environment of a process routed to them."""
    conf = settings.DATABASES["default"]
    env = dict(os.environ)
    env.pop("CAIRNQ_TEST_OVERRIDES", None)
    env.update(DJANGO_SETTINGS_MODULE="testproject.settings_routing", PYTHONPATH=str(REPO))
    if conf["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'app.sqlite3'}"
        env["QUEUE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'queue.sqlite3'}"
        yield env
        return
    base = os.environ.get("CAIRNQ_TEST_DBNAME", "test_cairnq")
    names = [f"{base}_routing_app", f"{base}_routing_queue"]
    with _pg_admin(conf) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
    user = conf.get("USER") or ""
    server = f"{user + '@' if user else ''}{conf.get('HOST') or '127.0.0.1'}:{conf.get('PORT') or 5432}"
    env["DATABASE_URL"] = f"postgres://{server}/{names[0]}"
    env["QUEUE_DATABASE_URL"] = f"postgres://{server}/{names[1]}"
    yield env
    with _pg_admin(conf) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


def script(env: dict[str, str], code: str) -> Any:
    """Run ``code`` in a routed Django process; it leaves its answer in ``out``."""
    program = "import django, json\ndjango.setup()\n" + textwrap.dedent(code) + "\nprint('@@' + json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", program], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout.rsplit("@@", 1)[1])


TABLES = """
from django.db import connections
out = {alias: sorted(t for t in connections[alias].introspection.table_names()
                     if t.startswith(("cairnq_", "auth_user"))) for alias in ("default", "queue")}
"""


def test_queue_tables_live_in_their_own_database(routed_env: dict[str, str]) -> None:
    manage(routed_env, "migrate", "--noinput")
    manage(routed_env, "migrate", "--database", "queue", "--noinput")
    tables = script(routed_env, TABLES)
    assert tables["default"] == ["auth_user", "auth_user_groups", "auth_user_user_permissions"]
    # The protocol's four tables and the app's own, which its claims and workers write beside them.
    assert tables["queue"] == [
        "cairnq_django_bulk_operation",
        "cairnq_django_error_minute",
        "cairnq_django_fleet_start",
        "cairnq_django_queue_minute",
        "cairnq_django_queue_pause",
        "cairnq_django_worker",
        "cairnq_django_workflow",
        "cairnq_django_workflow_edge",
        "cairnq_django_workflow_node",
        "cairnq_meta",
        "cairnq_migrations",
        "cairnq_task_keys",
        "cairnq_tasks",
    ]

    enqueued = script(
        routed_env,
        """
        from django.contrib.auth.models import User
        from django.db import transaction
        import cairnq_django as cq
        from cairnq_django.models import Task
        from testproject.native import tasks

        with transaction.atomic():  # the project's own transaction, on "default"
            User.objects.create(username="in-app-transaction")
            result = tasks.create_user.enqueue("made-by-worker")
            plain = cq.submit("testproject.native.tasks.add", {"args": [1, 2], "kwargs": {}})
        # a rollback on "default" does not reach the queue database ...
        try:
            with transaction.atomic():
                survivor = tasks.add.enqueue(5, 5)
                raise RuntimeError
        except RuntimeError:
            pass
        # ... one on the queue alias does
        try:
            with transaction.atomic(using="queue"):
                tasks.add.enqueue(6, 6)
                raise RuntimeError
        except RuntimeError:
            pass
        out = {
            "id": result.id,
            "plain": plain.id,
            "survivor": survivor.id,
            "rows": Task.objects.count(),  # through the router: the queue database
            "queued": sorted(Task.objects.values_list("id", flat=True)),
        }
        """,
    )
    assert enqueued["rows"] == 3
    assert enqueued["queued"] == sorted([enqueued["id"], enqueued["plain"], enqueued["survivor"]])

    output = manage(routed_env, "cairnq_worker", "--burst", "--poll-interval-ms", "50")
    assert "database 'queue'" in output

    scheduled = dict(routed_env, CAIRNQ_TEST_OVERRIDES=json.dumps({"SCHEDULE": {"testproject.native.tasks.add": "* * * * *"}}))
    after = script(
        scheduled,
        f"""
        from django.contrib.auth.models import User
        from django.db import connections
        import cairnq_django as cq
        from cairnq_django.tasks import periodic
        from cairnq_django.store import get_store
        from cairnq_django.testing import run_until_idle
        from testproject.native import tasks

        made = tasks.create_user.get_result({enqueued["id"]!r})
        inline = tasks.create_user.enqueue("made-inline")
        run_until_idle()
        store = get_store()
        periodic.tick(store)  # first sighting writes the marker row: queue database only
        with connections["queue"].cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM cairnq_meta WHERE key LIKE 'periodic:%%'")
            markers = cursor.fetchone()[0]
        out = {{
            "alias": store.alias,
            "status": str(made.status),
            "user_id": made.return_value,
            "users": sorted(User.objects.values_list("username", flat=True)),
            "user_db": User.objects.get(username="made-by-worker")._state.db,
            "inline": tasks.create_user.get_result(inline.id).return_value is not None,
            "plain": cq.get({enqueued["plain"]!r}).result,
            "stats": cq.stats()["default"]["succeeded"],
            "markers": markers,
        }}
        """,
    )
    assert after["alias"] == "queue"
    assert after["status"] == "SUCCESSFUL"
    assert after["users"] == ["in-app-transaction", "made-by-worker", "made-inline"]
    assert after["user_db"] == "default"
    assert after["inline"] is True
    assert after["plain"] == 3
    assert after["stats"] == 4
    assert after["markers"] == 1

    # and nothing cairnq ever reached the app database
    assert script(routed_env, TABLES)["default"] == tables["default"]
