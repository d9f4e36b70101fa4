"""Helpers for the schema tests: scratch databases, catalog dumps, and the
upstream SDK and ``manage.py`` run in subprocesses with hard timeouts."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from psycopg import sql as pgsql

REPO = Path(__file__).resolve().parent.parent
UPSTREAM_PROTOCOL = Path(__import__("cairnq").__file__).resolve().parent / "_protocol"
SUBPROCESS_TIMEOUT_S = 90
# Every upstream call gets this budget inside its subprocess, and the
# subprocess itself is killed after SUBPROCESS_TIMEOUT_S: a failed SQLite
# connect can hang its process.
UPSTREAM_CALL_TIMEOUT_S = 30


def current_dialect() -> str:
    engine = settings.DATABASES["default"]["ENGINE"]
    return "sqlite" if engine.endswith("sqlite3") else "postgres"


# --- scratch databases ----------------------------------------------------


def _pg_server() -> dict[str, Any]:
    conf = settings.DATABASES["default"]
    return {
        "host": conf.get("HOST") or "127.0.0.1",
        "port": int(conf.get("PORT") or 5432),
        "user": conf.get("USER") or "root",
    }


def pg_dsn(dbname: str) -> str:
    s = _pg_server()
    return f"postgresql://{s['user']}@{s['host']}:{s['port']}/{dbname}"


@contextmanager
def scratch_database(tmp_path: Path) -> Iterator[str]:
    """Yield a ``DATABASE_URL`` for a new empty database of the current dialect."""
    if current_dialect() == "sqlite":
        path = tmp_path / f"scratch-{uuid.uuid4().hex[:8]}.sqlite3"
        yield f"sqlite:///{path}"
        return
    name = f"cairnq_scratch_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    try:
        yield pg_dsn(name)
    finally:
        with psycopg.connect(pg_dsn("postgres"), autocommit=True) as admin:
            admin.execute(
                pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
            )


def django_database_url() -> str:
    """Return the URL of the database Django's default alias uses right now."""
    from django.db import connections

    conf = connections["default"].settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(conf['NAME']).resolve()}"
    return pg_dsn(conf["NAME"])


def sqlite_path(url: str) -> str:
    assert url.startswith("sqlite:///"), url
    return url[len("sqlite:///") :]


@contextmanager
def raw_connection(url: str) -> Iterator[Any]:
    """Open a plain DB-API connection (autocommit) to ``url``, outside Django."""
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
    else:
        with psycopg.connect(url.replace("postgres://", "postgresql://"), autocommit=True) as conn:
            yield conn


def query(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read on a raw connection of either dialect; ``?`` placeholders."""
    if isinstance(conn, sqlite3.Connection):
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    cur = conn.execute(sql.replace("?", "%s"), params)
    return [tuple(r) for r in cur.fetchall()] if cur.description else []


# --- catalog dumps --------------------------------------------------------


def _normalise_sqlite_sql(text: str | None) -> str | None:
    # Compare DDL by tokens: comments, case, layout and "IF NOT EXISTS" are
    # spelling, not schema.
    if text is None:
        return None
    text = re.sub(r"--[^\n]*", " ", text)
    text = " ".join(text.split()).lower()
    text = re.sub(r"\s*([(),])\s*", r"\1", text)
    return text.replace(" if not exists ", " ")


def sqlite_catalog(conn: sqlite3.Connection) -> dict[str, Any]:
    objects = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE substr(tbl_name, 1, 7) = 'cairnq_' AND substr(tbl_name, 1, 14) <> 'cairnq_django_' ORDER BY type, name"
    ).fetchall()
    catalog: dict[str, Any] = {
        "objects": [(t, n, tbl, _normalise_sqlite_sql(s)) for t, n, tbl, s in objects],
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
    }
    for kind, name, _tbl, _sql in objects:
        if kind == "table":
            catalog[f"columns:{name}"] = conn.execute(
                "SELECT cid, name, type, \"notnull\", dflt_value, pk, hidden "
                "FROM pragma_table_xinfo(?)",
                (name,),
            ).fetchall()
            catalog[f"indexes:{name}"] = sorted(
                conn.execute(
                    "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?)", (name,)
                ).fetchall()
            )
            catalog[f"fks:{name}"] = conn.execute(
                "SELECT id, seq, \"table\", \"from\", \"to\", on_update, on_delete, \"match\" "
                "FROM pragma_foreign_key_list(?)",
                (name,),
            ).fetchall()
        else:
            catalog[f"index:{name}"] = conn.execute(
                "SELECT seqno, cid, name, \"desc\", coll, key FROM pragma_index_xinfo(?)", (name,)
            ).fetchall()
    return catalog


def pg_catalog(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    def rows(text: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.execute(text).fetchall()]

    return {
        "relations": rows(
            "SELECT relname, relkind FROM pg_class "
            "WHERE relnamespace = current_schema()::regnamespace "
            "AND left(relname, 7) = 'cairnq_' AND left(relname, 14) <> 'cairnq_django_' ORDER BY relname"
        ),
        "columns": rows(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
            "column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND left(table_name, 7) = 'cairnq_' AND left(table_name, 14) <> 'cairnq_django_' "
            "ORDER BY table_name, ordinal_position"
        ),
        "indexes": rows(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND left(tablename, 7) = 'cairnq_' AND left(tablename, 14) <> 'cairnq_django_' "
            "ORDER BY indexname"
        ),
        "constraints": rows(
            "SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid), "
            "k.condeferrable, k.condeferred, k.confdeltype "
            "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace "
            "AND left(c.relname, 7) = 'cairnq_' AND left(c.relname, 14) <> 'cairnq_django_' ORDER BY c.relname, k.conname"
        ),
        "triggers": rows(
            "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled "
            "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace "
            "AND left(c.relname, 7) = 'cairnq_' AND left(c.relname, 14) <> 'cairnq_django_' ORDER BY t.tgname"
        ),
        # The function body is this project's own; its behaviour is compared by
        # the NOTIFY sequence test instead of by text. The app's own functions
        # (cairnq_django_*, the fleet-limited claims) are not the protocol's.
        "functions": rows(
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid), "
            "p.prorettype::regtype::text, l.lanname, p.provolatile, p.prosecdef, p.proconfig "
            "FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.pronamespace = current_schema()::regnamespace "
            "AND left(p.proname, 7) = 'cairnq_' AND left(p.proname, 14) <> 'cairnq_django_' ORDER BY p.proname"
        ),
    }


def catalog(url: str) -> dict[str, Any]:
    """Dump every cairnq object of the database at ``url`` in a comparable form."""
    with raw_connection(url) as conn:
        return sqlite_catalog(conn) if isinstance(conn, sqlite3.Connection) else pg_catalog(conn)


def ledger(url: str) -> list[tuple[str, int]]:
    with raw_connection(url) as conn:
        return query(conn, "SELECT name, applied_at_ms FROM cairnq_migrations ORDER BY name")


def meta(url: str) -> dict[str, str]:
    with raw_connection(url) as conn:
        return dict(query(conn, "SELECT key, value FROM cairnq_meta"))


def snapshot(url: str) -> dict[str, Any]:
    """Catalog, ledger rows (with their timestamps) and meta rows together."""
    return {"catalog": catalog(url), "ledger": ledger(url), "meta": meta(url)}


# --- subprocesses ---------------------------------------------------------


def env_for(url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = url
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run(args: list[str], url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run a command against ``url`` and fail the test with its output if it fails."""
    proc = subprocess.run(
        args,
        check=False,
        cwd=REPO,
        env=env_for(url, **extra),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "manage.py", *args], url)


def django_shell(url: str, code: str, **env: str) -> Any:
    """Run ``code`` in ``manage.py shell`` against ``url``; it prints one JSON value."""
    proc = run([sys.executable, "manage.py", "shell", "-c", code], url, **env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextmanager
def upstream_reference(tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield a scratch database the upstream SDK alone installed, and its snapshot."""
    with scratch_database(tmp_path) as url:
        upstream(url)
        yield url, snapshot(url)


_UPSTREAM = r"""
import asyncio, json, os, sys, time
import cairnq

async def main(dialect, target, actions):
    client = cairnq.CairnQ.sqlite(target) if dialect == "sqlite" else cairnq.CairnQ.postgres(target)
    await client.connect()
    out = []
    try:
        for act in actions:
            if act["op"] == "submit":
                task = await client.submit(
                    act["name"], act.get("payload"), key=act.get("key"), queue=act.get("queue", "default")
                )
                out.append(task.id)
            elif act["op"] == "get":
                task = await client.get(act["id"])
                out.append(None if task is None else {
                    "status": str(task.status), "name": task.name,
                    "attempt": task.attempt, "payload": task.payload,
                })
            elif act["op"] == "purge":
                out.append(sorted(await client.purge(older_than_ms=0)))
            else:
                raise ValueError(act)
    finally:
        await client.close()
    return out

dialect, target, actions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
# Race tests start several installers at one agreed instant.
if os.environ.get("CAIRNQ_TEST_START_AT"):
    time.sleep(max(0.0, float(os.environ["CAIRNQ_TEST_START_AT"]) - time.time()))
result = asyncio.run(asyncio.wait_for(main(dialect, target, actions), TIMEOUT_S))
print(json.dumps(result))
""".replace("TIMEOUT_S", str(UPSTREAM_CALL_TIMEOUT_S))


def upstream_command(url: str, actions: list[dict[str, Any]] | None = None) -> list[str]:
    """Argv that runs the upstream SDK (connect, ``actions``, close) against ``url``."""
    dialect = "sqlite" if url.startswith("sqlite:") else "postgres"
    target = sqlite_path(url) if dialect == "sqlite" else url.replace("postgres://", "postgresql://")
    return [sys.executable, "-c", _UPSTREAM, dialect, target, json.dumps(actions or [])]


def upstream(
    url: str,
    actions: list[dict[str, Any]] | None = None,
    *,
    steps_up_to: str | None = None,
    workdir: Path | None = None,
) -> Any:
    """Connect the real upstream SDK to ``url`` in a subprocess and run ``actions``.

    ``steps_up_to`` (with a ``workdir`` for the copy) makes it behave like an
    older upstream release that only knew the migration steps up to that name.
    """
    extra: dict[str, str] = {}
    if steps_up_to is not None:
        assert workdir is not None
        extra["CAIRNQ_PROTOCOL_DIR"] = str(older_protocol_dir(steps_up_to, workdir))
    proc = run(upstream_command(url, actions), url, **extra)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def older_protocol_dir(steps_up_to: str, workdir: Path) -> Path:
    """Copy the installed upstream protocol files, keeping migrations up to a step.

    The copy lives in a temporary folder whose name is not ``cairnq-protocol``,
    and is handed to the subprocess through ``CAIRNQ_PROTOCOL_DIR`` only.
    """
    target = workdir / f"protocol-upto-{steps_up_to[:4]}"
    shutil.copytree(UPSTREAM_PROTOCOL, target)
    for dialect_dir in (target / "migrations").iterdir():
        for step in dialect_dir.glob("*.sql"):
            if step.name > steps_up_to:
                step.unlink()
    return target
