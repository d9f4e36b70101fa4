"""Pin ``migrate`` against databases it does not own alone.

Fails when ``manage.py migrate cairnq`` loses or rewrites rows of a database the
upstream SDK installed first, writes a duplicate ledger row, leaves a database
an older upstream SDK (or a partial install) stopped at an earlier step with an
old index shape or a stale lease, races unsafely with another installer, drops
the shared tables when the app's migrations are unapplied, or when
``makemigrations --check`` finds model changes the migration lacks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _schema_support import (
    REPO,
    SUBPROCESS_TIMEOUT_S,
    catalog,
    current_dialect,
    django_database_url,
    django_shell,
    env_for,
    ledger,
    manage,
    meta,
    query,
    raw_connection,
    scratch_database,
    snapshot,
    upstream,
    upstream_command,
    upstream_reference,
)

from cairnq_django.store import schema

ORM_GET = """
import json, os
from cairnq_django.models import Task, TaskKey
task = Task.objects.get(id=os.environ["TASK_ID"])
key = TaskKey.objects.filter(task_id=task.id).values_list("key", flat=True).first()
print(json.dumps({"name": task.name, "status": task.status, "attempt": task.attempt,
                  "payload": task.payload, "key": key}))
"""

# Inserts through the ORM, leaving every column with a database default out.
ORM_CREATE = """
import json, time
from cairnq_django.models import Task
now = int(time.time() * 1000)
Task.objects.create(id="task_fromdjango", name="from-django", status="queued", payload={"x": 1},
                    run_at_ms=now, created_at_ms=now, updated_at_ms=now)
print(json.dumps("ok"))
"""

INSTALL_RACER = """
import json, os, time
from django.db import connection
from cairnq_django.store.schema import install
time.sleep(max(0.0, float(os.environ["CAIRNQ_TEST_START_AT"]) - time.time()))
print(json.dumps(install(connection)))
"""

INSTALL_UNTIL = """
import json, os
from django.db import connection
from cairnq_django.store.schema import install
print(json.dumps(install(connection, until=os.environ["CAIRNQ_TEST_UNTIL"])))
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    with upstream_reference(tmp_path_factory.mktemp("reference")) as built:
        yield built


def orm_get(url: str, task_id: str) -> dict[str, Any]:
    return django_shell(url, ORM_GET, TASK_ID=task_id)  # type: ignore[no-any-return]


def task_rows(url: str) -> list[tuple[Any, ...]]:
    with raw_connection(url) as conn:
        return query(conn, "SELECT * FROM cairnq_tasks ORDER BY id") + query(
            conn, "SELECT * FROM cairnq_task_keys ORDER BY key"
        )


def test_migrate_after_upstream_keeps_everything(tmp_path: Path, reference: tuple[str, dict[str, Any]]) -> None:
    with scratch_database(tmp_path) as url:
        first, keyed = upstream(
            url,
            [
                {"op": "submit", "name": "plain", "payload": {"n": 1}},
                {"op": "submit", "name": "keyed", "payload": {"n": 2}, "key": "biz-1", "queue": "q2"},
            ],
        )
        before, rows = snapshot(url), task_rows(url)

        manage(url, "migrate", "cairnq", "--noinput")

        # Nothing rebuilt, no ledger row added or rewritten, every row kept.
        assert snapshot(url) == before
        assert task_rows(url) == rows
        assert before["catalog"] == reference[1]["catalog"]
        assert orm_get(url, keyed) == {
            "name": "keyed",
            "status": "queued",
            "attempt": 0,
            "payload": {"n": 2},
            "key": "biz-1",
        }
        assert orm_get(url, first)["name"] == "plain"

        # Both sides keep working on the shared tables.
        [later] = upstream(url, [{"op": "submit", "name": "after-migrate", "payload": {"n": 3}}])
        assert orm_get(url, later)["status"] == "queued"
        django_shell(url, ORM_CREATE)
        [seen] = upstream(url, [{"op": "get", "id": "task_fromdjango"}])
        assert seen == {"status": "queued", "name": "from-django", "attempt": 0, "payload": {"x": 1}}
        assert snapshot(url) == before


def _claim_index_columns(cat: dict[str, Any]) -> str:
    if current_dialect() == "sqlite":
        [sql] = [s for t, n, _, s in cat["objects"] if n == "cairnq_tasks_claim_idx"]
        return str(sql)
    [sql] = [d for _, n, d in cat["indexes"] if n == "cairnq_tasks_claim_idx"]
    return str(sql)


def _has_index(cat: dict[str, Any], name: str) -> bool:
    if current_dialect() == "sqlite":
        return any(n == name for _, n, _, _ in cat["objects"])
    return any(n == name for _, n, _ in cat["indexes"])


@pytest.mark.parametrize("builder", ["older-upstream", "partial-install"])
@pytest.mark.parametrize("stopped_at", ["0001_init.sql", "0004_lease_index.sql", "0007_purge_status_index.sql"])
def test_migrate_brings_an_older_database_to_latest(
    tmp_path: Path, reference: tuple[str, dict[str, Any]], builder: str, stopped_at: str
) -> None:
    with scratch_database(tmp_path) as url:
        if builder == "older-upstream":
            # An upstream release that only knew the steps up to `stopped_at`.
            upstream(url, steps_up_to=stopped_at, workdir=tmp_path)
        else:
            django_shell(url, INSTALL_UNTIL, CAIRNQ_TEST_UNTIL=stopped_at)
        old = snapshot(url)
        steps = schema.STEPS[current_dialect()]
        done = [s for s in steps if s <= stopped_at]
        assert [n for n, _ in old["ledger"]] == done
        # The old shapes are really there, or the test would prove nothing.
        assert "created_at_ms" in _claim_index_columns(old["catalog"])
        assert _has_index(old["catalog"], "cairnq_tasks_status_idx")
        assert not _has_index(old["catalog"], "cairnq_tasks_queue_completed_idx")
        # A terminal row still holding a lease, as pre-0005 SDKs left them.
        with raw_connection(url) as conn:
            query(
                conn,
                "INSERT INTO cairnq_tasks (id, name, status, payload, lease_until_ms, run_at_ms,"
                " created_at_ms, updated_at_ms, completed_at_ms)"
                " VALUES ('task_stale', 'n', 'succeeded', '{}', 99, 1, 1, 1, 2)",
            )

        manage(url, "migrate", "cairnq", "--noinput")

        new = snapshot(url)
        assert new["catalog"] == reference[1]["catalog"]
        assert new["meta"] == {"protocol_version": "1", "schema_version": "10"}
        assert [n for n, _ in new["ledger"]] == sorted(steps)
        # Rows of steps applied earlier are kept as they were.
        assert [r for r in new["ledger"] if r[0] in done] == old["ledger"]
        with raw_connection(url) as conn:
            lease = query(conn, "SELECT lease_until_ms FROM cairnq_tasks WHERE id = 'task_stale'")
        # Step 0005 clears it only where 0005 had not run yet.
        expected_lease = None if stopped_at < "0005" else 99
        assert lease == [(expected_lease,)]
        # The upstream SDK now finds nothing to do.
        upstream(url)
        assert snapshot(url) == new


def test_concurrent_installers_apply_each_step_once(
    tmp_path: Path, reference: tuple[str, dict[str, Any]]
) -> None:
    dialect = current_dialect()
    with scratch_database(tmp_path) as url:
        # Django's own bookkeeping tables exist, as on any project being deployed.
        manage(url, "migrate", "contenttypes", "--noinput")
        start_at = time.time() + 2.0
        with raw_connection(url) as holder:
            # Hold the ledger lock while the installers start, so they all queue
            # on it and then contend for the very same step when it is released.
            query(holder, schema.statement(dialect, "ledger_create"))
            if dialect == "postgres":
                query(holder, "BEGIN")
            query(holder, schema.statement(dialect, "ledger_lock"))
            procs = [
                subprocess.Popen(
                    argv,
                    cwd=REPO,
                    env=env_for(url, CAIRNQ_TEST_START_AT=str(start_at)),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for argv in [
                    [sys.executable, "manage.py", "shell", "-c", INSTALL_RACER],
                    [sys.executable, "manage.py", "shell", "-c", INSTALL_RACER],
                    [sys.executable, "manage.py", "shell", "-c", INSTALL_RACER],
                    upstream_command(url),
                ]
            ]
            time.sleep(max(0.0, start_at + 1.5 - time.time()))
            query(holder, "COMMIT")
        outputs = []
        try:
            for proc in procs:
                out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
                assert proc.returncode == 0, f"{out}\n{err}"
                outputs.append(out)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        applied = [set(json.loads(out.strip().splitlines()[-1])) for out in outputs[:3]]
        # No step ran twice among our installers (the ledger lock serialized them).
        assert sum(len(a) for a in applied) == len(set().union(*applied))
        assert [n for n, _ in ledger(url)] == sorted(schema.STEPS[dialect])
        assert catalog(url) == reference[1]["catalog"]
        assert meta(url) == {"protocol_version": "1", "schema_version": "10"}


def test_unapplying_the_migrations_keeps_tables_and_rows(tmp_path: Path) -> None:
    with scratch_database(tmp_path) as url:
        manage(url, "migrate", "cairnq", "--noinput")
        [task_id] = upstream(url, [{"op": "submit", "name": "kept", "payload": {}, "key": "k"}])
        before, rows = snapshot(url), task_rows(url)

        manage(url, "migrate", "cairnq", "zero", "--noinput")
        assert snapshot(url) == before
        assert task_rows(url) == rows
        with raw_connection(url) as conn:
            recorded = query(conn, "SELECT name FROM django_migrations WHERE app = 'cairnq'")
        assert recorded == []

        manage(url, "migrate", "cairnq", "--noinput")
        assert snapshot(url) == before
        assert orm_get(url, task_id)["key"] == "k"


def test_makemigrations_reports_nothing(cairnq_db: Any) -> None:
    url = django_database_url()
    proc = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run", "cairnq"],
        check=False,
        cwd=REPO,
        env=env_for(url),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes detected" in proc.stdout

