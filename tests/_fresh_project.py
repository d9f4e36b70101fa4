"""A project made by ``django-admin startproject`` in a temporary directory, run by subprocesses.

Used by the first-run and tutorial tests: the project's own settings, as
``startproject`` wrote them, plus only what a newcomer adds. On SQLite its
``DATABASES`` stays Django's default file; on PostgreSQL (the suite's
dialect) a scratch database is created for the test and dropped after it,
and the settings read it from ``FRESH_DATABASE`` (JSON).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

_PG_SETTINGS = """
# Tests on PostgreSQL: a scratch database on the test server.
import json as _json
import os as _os

if _os.environ.get("FRESH_DATABASE"):
    DATABASES = {"default": _json.loads(_os.environ["FRESH_DATABASE"])}
"""


def suite_vendor() -> str:
    from django.conf import settings

    return "postgresql" if "postgresql" in settings.DATABASES["default"]["ENGINE"] else "sqlite"


@contextmanager
def scratch_database() -> Iterator[dict[str, Any] | None]:
    """None on SQLite; on PostgreSQL the settings of a fresh, empty database, dropped afterwards."""
    if suite_vendor() != "postgresql":
        yield None
        return
    import psycopg
    from django.conf import settings

    conf = settings.DATABASES["default"]
    name = f"cairnq_fresh_{uuid.uuid4().hex[:12]}"
    server = {
        "host": conf.get("HOST") or "127.0.0.1",
        "port": conf.get("PORT") or 5432,
        "user": conf.get("USER") or None,
        "password": conf.get("PASSWORD") or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "HOST": server["host"],
            "PORT": str(server["port"]),
            "USER": server["user"] or "",
            "PASSWORD": server["password"] or "",
        }
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class FreshProject:
    """``manage.py`` of a fresh project, run as subprocesses."""

    def __init__(self, root: Path, database: dict[str, Any] | None, name: str = "mysite") -> None:
        self.root = root
        self.settings = root / name / "settings.py"
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL") and not key.startswith("CAIRNQ_")
        }
        # The checkout's cairnq_django, as `pip install -e .` would give.
        self.env["PYTHONPATH"] = str(REPO)
        if database is not None:
            self.env["FRESH_DATABASE"] = json.dumps(database)
            self.append_settings(_PG_SETTINGS)

    def append_settings(self, text: str) -> None:
        with self.settings.open("a") as out:
            out.write("\n" + text)

    def install(self, *apps: str) -> None:
        """Add ``apps`` to INSTALLED_APPS, after the ones startproject listed."""
        source = self.settings.read_text()
        listed = "".join(f"    {app!r},\n" for app in apps)
        source, count = re.subn(r"(INSTALLED_APPS = \[\n(?:    .*\n)*)\]", lambda m: m.group(1) + listed + "]", source)
        assert count == 1, "startproject's INSTALLED_APPS not found"
        self.settings.write_text(source)

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = self.manage(*args, timeout=timeout)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def shell(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.manage("shell", "--no-imports", "-c", code, timeout=timeout)


def start_project(directory: Path, database: dict[str, Any] | None, name: str = "mysite") -> FreshProject:
    """Run ``django-admin startproject <name>`` in ``directory``; return its runner."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", name, str(directory)],
        check=True, capture_output=True, timeout=60,
    )
    return FreshProject(directory, database, name)
