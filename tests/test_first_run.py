"""Pin the first run of a project made with ``django-admin startproject``.

Each test builds a fresh project in a temporary directory with Django's
default settings (SQLite: its own ``db.sqlite3``; PostgreSQL: a scratch
database), adds only ``cairnq_django`` and an app with a task, and drives it
with real ``manage.py`` subprocesses: no DATABASES edit, no LOGGING.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from cairnq_django.exceptions import UnknownTask, UnknownTaskWarning

from tests._fresh_project import FreshProject, scratch_database, start_project

SHOP_TASKS = '''
import cairnq_django as cairnq


@cairnq.task
def add(ctx, payload):
    return {"sum": payload["a"] + payload["b"]}
'''

MIGRATE_HINT = "run manage.py migrate cairnq"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|DEBUG|WARNING) cairnq_django\.worker: ", re.M)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[FreshProject]:
    with scratch_database() as database:
        fresh = start_project(tmp_path / "site", database)
        fresh.install("cairnq_django", "shop")
        fresh.write("shop/__init__.py", "")
        fresh.write("shop/tasks.py", SHOP_TASKS)
        yield fresh


def test_default_settings_check_migrate_submit_and_run(project: FreshProject) -> None:
    # check and migrate pass on startproject's DATABASES (no cairnq error stops them).
    checked = project.ok("check")
    assert "cairnq" not in checked.stdout + checked.stderr
    project.ok("migrate")
    submitted = project.shell(
        "import cairnq_django as cairnq\n"
        "from django.db import connection, transaction\n"
        "from django.test.utils import CaptureQueriesContext\n"
        "with CaptureQueriesContext(connection) as seen, transaction.atomic():\n"
        "    task = cairnq.submit('shop.tasks.add', {'a': 2, 'b': 3}, key='sum-1')\n"
        "print('ID', task.id)\n"
        "print('BEGIN', [q['sql'] for q in seen.captured_queries if q['sql'].startswith('BEGIN')])\n"
    )
    assert submitted.returncode == 0, submitted.stderr
    task_id = re.search(r"^ID (\S+)$", submitted.stdout, re.M).group(1)  # type: ignore[union-attr]
    if project.env.get("FRESH_DATABASE") is None:
        # SQLite with no transaction_mode: the app opened the write lock at BEGIN.
        assert "BEGIN IMMEDIATE" in submitted.stdout, submitted.stdout
    project.ok("cairnq_worker", "--burst")
    outcome = project.shell(
        "import cairnq_django as cairnq\n"
        f"task = cairnq.get({task_id!r})\n"
        "print(task.status, task.result)\n"
    )
    assert outcome.stdout.strip().splitlines()[-1] == "succeeded {'sum': 5}", outcome.stdout + outcome.stderr


def test_worker_logs_without_logging_settings(project: FreshProject) -> None:
    project.ok("migrate")
    project.shell("import cairnq_django as cairnq\ncairnq.submit('shop.tasks.add', {'a': 1, 'b': 1})")
    normal = project.ok("cairnq_worker", "--burst")
    lines = LOG_LINE.findall(normal.stderr)
    # -v 1: time, level and message of the worker's INFO lines; no per-claim DEBUG.
    assert "INFO" in lines and "DEBUG" not in lines, normal.stderr
    assert "worker started" in normal.stderr and "stopped: 1 claimed, 1 settled" in normal.stderr
    project.shell("import cairnq_django as cairnq\ncairnq.submit('shop.tasks.add', {'a': 1, 'b': 2})")
    verbose = project.ok("cairnq_worker", "--burst", "-v", "2")
    assert re.search(r" DEBUG cairnq_django\.worker: task claimed: task=task_\S+ name=shop\.tasks\.add", verbose.stderr), verbose.stderr
    assert re.search(r" DEBUG cairnq_django\.worker: task succeeded: ", verbose.stderr), verbose.stderr
    quiet = project.ok("cairnq_worker", "--burst", "-v", "0")
    assert LOG_LINE.findall(quiet.stderr) == [], quiet.stderr


def test_worker_logs_once_when_the_project_configures_logging(project: FreshProject) -> None:
    project.append_settings(
        'LOGGING = {"version": 1, "disable_existing_loggers": False,\n'
        '    "formatters": {"mine": {"format": "MINE %(levelname)s %(message)s"}},\n'
        '    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "mine"}},\n'
        '    "loggers": {"cairnq_django": {"handlers": ["console"], "level": "INFO"}}}\n'
    )
    project.ok("migrate")
    project.shell("import cairnq_django as cairnq\ncairnq.submit('shop.tasks.add', {'a': 1, 'b': 1})")
    verbose = project.ok("cairnq_worker", "--burst", "-v", "2")
    # The project's handler and format only, each line once.
    assert verbose.stderr.count("worker started") == 1, verbose.stderr
    assert LOG_LINE.findall(verbose.stderr) == [], verbose.stderr
    assert re.search(r"^MINE DEBUG task claimed: ", verbose.stderr, re.M), verbose.stderr


def test_before_migrate_each_entry_point_says_run_migrate(project: FreshProject) -> None:
    for args in (["cairnq_stats"], ["cairnq_purge", "--older-than", "1d"], ["cairnq_purge", "--older-than", "1d", "--dry-run"], ["cairnq_worker", "--burst"]):
        done = project.manage(*args, timeout=60)
        assert done.returncode != 0, args
        assert MIGRATE_HINT in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    submitted = project.shell(
        "import cairnq_django as cairnq\n"
        "try:\n"
        "    cairnq.submit('shop.tasks.add', {'a': 1, 'b': 1})\n"
        "except cairnq.SchemaNotInstalled as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "try:\n"
        "    cairnq.stats()\n"
        "except cairnq.SchemaNotInstalled as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    answers = submitted.stdout.strip().splitlines()[-2:]
    assert answers == [f"SchemaNotInstalled the cairnq tables are missing from database 'default'; {MIGRATE_HINT}"] * 2, submitted.stdout + submitted.stderr
    # After migrate the same calls work.
    project.ok("migrate")
    assert "no tasks" in project.ok("cairnq_stats").stdout


def test_unknown_name_is_refused_by_default_in_a_fresh_project(project: FreshProject) -> None:
    project.ok("migrate")
    done = project.shell(
        "import cairnq_django as cairnq\n"
        "try:\n"
        "    cairnq.submit('shop.tasks.ad', {})\n"
        "except cairnq.UnknownTask as exc:\n"
        "    print('refused', exc.name, '|', exc)\n"
        "print('rows', sum(sum(c.values()) for c in cairnq.stats().values()))\n"
    )
    assert "refused shop.tasks.ad |" in done.stdout, done.stdout + done.stderr
    assert 'Did you mean "shop.tasks.add"?' in done.stdout
    assert done.stdout.strip().endswith("rows 0")


# ---- the UNKNOWN_TASKS setting, in-process on the suite's database ------------------

def _with(**config: Any) -> Any:
    return override_settings(CAIRNQ={**settings.CAIRNQ, **config})


def _rows() -> int:
    from cairnq_django.models import Task

    return Task.objects.count()


def test_unknown_tasks_raise_refuses_and_writes_nothing(cairnq_db: Any) -> None:
    import cairnq_django as cairnq

    with _with(UNKNOWN_TASKS="raise"):
        with pytest.raises(UnknownTask) as raised:
            cairnq.submit("no.such.task", {})
        assert raised.value.name == "no.such.task"
        with pytest.raises(UnknownTask):
            cairnq.submit_many([("pipeline.parse", {}), ("no.such.task", {})])
        assert _rows() == 0
        # A declared name passes (testproject.pipeline declares it).
        assert cairnq.submit("pipeline.parse", {"doc": 1}).status == "queued"
        assert _rows() == 1


def test_unknown_tasks_warn_enqueues_with_a_warning(cairnq_db: Any) -> None:
    import cairnq_django as cairnq

    with _with(UNKNOWN_TASKS="warn"), pytest.warns(UnknownTaskWarning, match="no.such.task"):
        cairnq.submit("no.such.task", {})
    assert _rows() == 1


def test_foreign_tasks_pass_under_raise(cairnq_db: Any) -> None:
    import cairnq_django as cairnq

    with _with(UNKNOWN_TASKS="raise", FOREIGN_TASKS=["ts.*", "report.build"]):
        cairnq.submit("ts.resize", {})
        cairnq.submit("report.build", {})
        cairnq.submit_many([("ts.a", {}), ("ts.b", {})])
        with pytest.raises(UnknownTask):
            cairnq.submit("report.build.daily", {})
    with _with(UNKNOWN_TASKS="allow"):
        cairnq.submit("anything.goes", {})
    assert _rows() == 5


async def _asubmit_unknown() -> None:
    import cairnq_django as cairnq

    await cairnq.asubmit("no.such.task", {})


def test_unknown_tasks_raise_on_the_async_twins(cairnq_db: Any) -> None:
    import asyncio

    import cairnq_django as cairnq

    with _with(UNKNOWN_TASKS="raise"):
        with pytest.raises(UnknownTask):
            asyncio.run(_asubmit_unknown())
        with pytest.raises(UnknownTask):
            asyncio.run(cairnq.asubmit_many([("no.such.task", {})]))
    assert _rows() == 0


def test_unknown_tasks_setting_is_checked() -> None:
    from cairnq_django.checks import check_configuration

    with _with(UNKNOWN_TASKS="loud", FOREIGN_TASKS="ts.*"):
        found = [m for m in check_configuration() if m.id == "cairnq.E015"]
    assert len(found) == 2 and all(m.hint for m in found)


# ---- the demo's printed next step ---------------------------------------------------

def test_demo_printed_runserver_serves_a_styled_admin(subprocess_env: dict[str, str]) -> None:
    import os
    import shlex
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    from testproject.pipeline.management.commands.cairnq_demo import RUNSERVER

    words = shlex.split(RUNSERVER)
    env = dict(subprocess_env)
    while "=" in words[0]:
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words[:3] == [".venv/bin/python", "manage.py", "runserver"], RUNSERVER
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload", *words[3:]],
        cwd=Path(__file__).resolve().parent.parent, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                login = urllib.request.urlopen(f"{base}/admin/login/", timeout=5).read().decode()
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        stylesheet = re.search(r'href="(/static/admin/css/base\.css)"', login)
        assert stylesheet, login[:500]
        with urllib.request.urlopen(base + stylesheet.group(1), timeout=5) as css:
            assert css.status == 200
            assert css.headers["Content-Type"].startswith("text/css")
            assert b"body" in css.read()
    finally:
        os.killpg(server.pid, 15)
        server.wait(10)


def test_the_worker_states_its_banner_once(project: FreshProject) -> None:
    # The command prints the banner on stdout; the log says in one line that it started.
    project.ok("migrate")
    run = project.ok("cairnq_worker", "--burst")
    both = run.stdout + run.stderr
    assert both.count("connections:") == 1, both
    assert run.stderr.count("worker started") == 1, run.stderr
