"""Settings of the django-tasks-db peer (Django 6.1's ``django.tasks`` + django-tasks-db).

The database comes from ``BENCH_DIALECT`` ("postgres" or "sqlite") and
``BENCH_DB`` (a DSN or a file path), both set by the harness.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db", "djtasks_project"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = os.environ["BENCH_DB"]
if os.environ["BENCH_DIALECT"] == "postgres":
    _url = urlparse(_db)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _url.path.lstrip("/"),
            "USER": _url.username or "",
            "HOST": _url.hostname or "",
            "PORT": str(_url.port or ""),
        }
    }
else:
    # WAL like every other SQLite peer; synchronous stays at SQLite's default.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _db,
            "OPTIONS": {"timeout": 5, "init_command": "PRAGMA journal_mode=WAL;"},
        }
    }

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
