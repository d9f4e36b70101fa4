"""Shared fixtures: a clean queue on the real test database, and the settings
worker subprocesses need to reach that same database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

CAIRNQ_TABLES = (
    "cairnq_task_keys",
    "cairnq_tasks",
    "cairnq_django_fleet_start",
    "cairnq_django_queue_pause",
    "cairnq_django_queue_minute",
    "cairnq_django_worker",
    "cairnq_django_error_minute",
    "cairnq_django_bulk_operation",
)


def pytest_report_header(config: pytest.Config) -> str:
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return f"cairnq-django test database: {engine}"


def pytest_sessionstart(session: pytest.Session) -> None:
    # CI sets CAIRNQ_REQUIRE_DIALECT so a misconfigured run cannot silently
    # test SQLite twice while claiming to cover PostgreSQL.
    wanted = os.environ.get("CAIRNQ_REQUIRE_DIALECT")
    if not wanted:
        return
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if wanted not in engine:
        raise pytest.UsageError(f"CAIRNQ_REQUIRE_DIALECT={wanted} but DATABASE_URL gives {engine}")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any) -> Any:
    """pytest-django's setup; then the alias "direct" (the pooled run's unpooled
    connection, testproject/settings.py) names the test database too."""
    from django.conf import settings

    if "direct" in settings.DATABASES:
        settings.DATABASES["direct"]["NAME"] = settings.DATABASES["default"]["NAME"]
    return django_db_setup


def clear_queue(alias: str = "default") -> None:
    """Delete every task and key row (the migrated meta and ledger rows stay).

    The stores are made anew, so no claim cursor outlives the rows it was
    left on (store/postgres/claim_cursor.py).
    """
    from cairnq_django.store import clear_store_cache

    with connections[alias].cursor() as cursor:
        for table in CAIRNQ_TABLES:
            cursor.execute(f"DELETE FROM {table}")
    clear_store_cache()


@pytest.fixture
def cairnq_db(transactional_db: Any, django_db_blocker: Any) -> Any:
    """A real, committed database with an empty queue before and after the test.

    Django's flush skips unmanaged models, so the queue tables are cleared here.
    Transactional (not wrapped in one test transaction) because PostgreSQL's
    ``now()`` is frozen inside a transaction and worker subprocesses must see
    committed rows.
    """
    clear_queue()
    yield
    clear_queue()


@pytest.fixture
def dialect(cairnq_db: Any) -> str:
    return "postgres" if connections["default"].vendor == "postgresql" else "sqlite"


@pytest.fixture
def store(cairnq_db: Any) -> Any:
    from cairnq_django.store import get_store

    return get_store()


def database_url(alias: str = "default") -> str:
    """Return a ``DATABASE_URL`` naming the test database Django is using now."""
    conf = connections[alias].settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(conf['NAME']).resolve()}"
    user = conf.get("USER") or ""
    host = conf.get("HOST") or "127.0.0.1"
    port = conf.get("PORT") or 5432
    auth = f"{user}@" if user else ""
    return f"postgres://{auth}{host}:{port}/{conf['NAME']}"


@pytest.fixture
def subprocess_env(cairnq_db: Any) -> dict[str, str]:
    """Environment for a ``manage.py`` subprocess that talks to the test database."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url()
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


@pytest.fixture(autouse=True)
def _quick_password_hashing(settings: Any) -> None:
    # Django's default hasher takes ~0.3 s a password, by design: ~240 tests
    # create or log in a user, which cost minutes of every CI leg.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
