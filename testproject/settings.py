"""Settings of the runnable test and demo project.

The database comes from ``DATABASE_URL`` (django-environ); without it the
project uses a SQLite file next to this module. ``CAIRNQ_TEST_OVERRIDES`` (a
JSON object) overlays ``CAIRNQ`` so fault tests can shorten timings.

``CAIRNQ_TEST_POOLER=transaction`` says ``DATABASE_URL`` goes through a
PgBouncer in transaction mode (scripts/ensure-pgbouncer): cairnq is told so,
and the alias "direct" reaches the same database on port
``CAIRNQ_DIRECT_PORT`` (5432) for LISTEN and for tests that need a session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "cairnq-testproject-not-secret"
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "cairnq_django",
    "testproject.demo",
    "testproject.native",
    "testproject.pipeline",
    "testproject.faults",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DEFAULT_SQLITE = BASE_DIR.parent / "var" / "demo.sqlite3"
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DEFAULT_SQLITE}")}

_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    Path(_db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # BEGIN IMMEDIATE for every write transaction, WAL so readers never block
    # the worker, and a busy timeout so writers wait instead of failing.
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 5,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests need a real file (worker subprocesses open it too), never :memory:.
    _db["TEST"] = {"NAME": os.environ.get("CAIRNQ_TEST_SQLITE", str(BASE_DIR.parent / "var" / "test.sqlite3"))}
else:
    _db.setdefault("OPTIONS", {})
    if os.environ.get("CAIRNQ_TEST_DBNAME"):
        _db["TEST"] = {"NAME": os.environ["CAIRNQ_TEST_DBNAME"]}

CAIRNQ: dict[str, Any] = {
    "RESOURCES": {"gpu": 1},
    "GLOBAL_RESOURCES": {"openai": 2},
    # The suite submits raw names that only a test's own worker, a peer SDK's
    # process or nobody serves; tests/test_first_run.py pins the default ("raise").
    "UNKNOWN_TASKS": "allow",
    # One handler slot unless a test (or the demo) passes --concurrency: the
    # suite's worker tests count overlaps and hand-backs at one slot, and must
    # not change with the machine's CPUs, which the library's default follows.
    "CONCURRENCY": 1,
}

if os.environ.get("CAIRNQ_TEST_POOLER") == "transaction" and _db["ENGINE"] != "django.db.backends.sqlite3":
    # The test database is the same (its NAME follows "default": tests/conftest.py).
    DATABASES["direct"] = {**_db, "PORT": int(os.environ.get("CAIRNQ_DIRECT_PORT", "5432"))}
    CAIRNQ.update({"TRANSACTION_POOLING": True, "LISTEN_DATABASE": "direct"})

# Django's own @task (django.tasks, or the django-tasks backport on 5.2) runs
# on cairnq; an empty QUEUES list lets a task name any queue.
TASKS = {"default": {"BACKEND": "cairnq_django.backends.CairnqBackend", "QUEUES": []}}
CAIRNQ.update(json.loads(os.environ.get("CAIRNQ_TEST_OVERRIDES", "{}")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"cairnq_django": {"handlers": ["console"], "level": os.environ.get("CAIRNQ_LOG_LEVEL", "INFO")}},
}
