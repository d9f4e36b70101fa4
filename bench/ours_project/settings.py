"""Settings of the bench-only Django project that runs cairnq-django.

The database comes from ``BENCH_DIALECT`` ("postgres" or "sqlite") and
``BENCH_DB`` (a DSN or a file path), both set by the harness. SQLite uses the
options ``docs/installation.md`` asks for (IMMEDIATE, WAL); synchronous stays
at SQLite's default, as for every other SQLite peer.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "cairnq_django", "ours_project"]
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
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _db,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 5,
                "init_command": "PRAGMA journal_mode=WAL;",
            },
        }
    }

CAIRNQ: dict[str, object] = {}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
