"""Settings of the bench-only Django project that runs cairnq-django.

The database comes from ``BENCH_DIALECT`` ("postgres" or "sqlite") and
``BENCH_DB`` (a DSN or a file path), both set by the harness. SQLite uses the
options ``docs/installation.md`` asks for (IMMEDIATE, WAL); synchronous stays
at SQLite's default, as for every other SQLite peer.

``bench/fleet_scale.py`` (issue 21) adds two switches, PostgreSQL only:
``BENCH_POOLER`` ("host:port" of a PgBouncer in transaction mode) sends the
default alias through it with ``CAIRNQ["TRANSACTION_POOLING"]``, and
``BENCH_LISTEN=direct`` adds a ``direct`` alias past the pooler for
``CAIRNQ["LISTEN_DATABASE"]`` (without it workers poll).
"""

from __future__ import annotations

import json
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

# BENCH_CAIRNQ: JSON of settings to override, for experiments (e.g. '{"CLAIM_AHEAD": 0}').
CAIRNQ: dict[str, object] = json.loads(os.environ.get("BENCH_CAIRNQ", "{}"))

_pooler = os.environ.get("BENCH_POOLER", "")
if _pooler and os.environ["BENCH_DIALECT"] == "postgres":
    _host, _, _port = _pooler.rpartition(":")
    DATABASES["direct"] = dict(DATABASES["default"])
    # Server-side cursors outlive a transaction: PgBouncer's transaction mode
    # cannot hold them (Django's own advice for it).
    DATABASES["default"].update(HOST=_host, PORT=_port, DISABLE_SERVER_SIDE_CURSORS=True)
    CAIRNQ["TRANSACTION_POOLING"] = True
    if os.environ.get("BENCH_LISTEN") == "direct":
        CAIRNQ["LISTEN_DATABASE"] = "direct"
    else:
        del DATABASES["direct"]
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
