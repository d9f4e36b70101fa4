"""Behind PgBouncer in transaction mode (issue 21): the client API, a caller's
transaction included, and real workers through a real pooler
(scripts/ensure-pgbouncer); LISTEN only over ``LISTEN_DATABASE``, polling
without it; the worker's statement and lock timeouts still bound a statement
that waits on someone else's lock; many workers on few server connections
without a prepared-statement error; and the checks that say which applies.
A pooler left as is (issue 35): found by the probe, named with the settings
to add by ``check --database`` and by a worker that refuses to start, and
never LISTENed through.

The pooler cases run on PostgreSQL (through their own PgBouncer when the run
itself is direct) and skip only on SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.db import connection, connections
from django.test import override_settings

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.store.postgres import transaction_timeouts

from .conftest import REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

POOLER_PORT = int(os.environ.get("CAIRNQ_PGBOUNCER_PORT", "6432"))
POOLED_RUN = os.environ.get("CAIRNQ_TEST_POOLER") == "transaction"
# Errors a pooler that lends another server connection per transaction
# provokes when a client relies on its session.
SESSION_ERRORS = ("prepared statement", "DuplicatePreparedStatement", "InvalidSqlStatementName")


def _direct_port() -> int:
    if POOLED_RUN:
        return int(settings.DATABASES["direct"]["PORT"])
    return int(connection.settings_dict.get("PORT") or 5432)


@pytest.fixture
def pooled_env(cairnq_db: Any, subprocess_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A subprocess environment whose DATABASE_URL goes through PgBouncer (transaction mode).

    In a direct run the pooler's idle server connections to the test database
    are dropped afterwards, or the database could not be dropped at the end.
    """
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections")
    subprocess.run([str(REPO / "scripts" / "ensure-pgbouncer")], check=True, env={**os.environ, "CAIRNQ_PGBOUNCER_PORT": str(POOLER_PORT)})
    conf = connection.settings_dict
    user = conf.get("USER") or ""
    auth = f"{user}@" if user else ""
    env = dict(subprocess_env)
    env.update(
        DATABASE_URL=f"postgres://{auth}127.0.0.1:{POOLER_PORT}/{conf['NAME']}",
        CAIRNQ_TEST_POOLER="transaction",
        CAIRNQ_DIRECT_PORT=str(_direct_port()),
    )
    yield env
    if not POOLED_RUN:
        admin = ["psql", "-qAt", "-h", "127.0.0.1", "-p", str(POOLER_PORT), "-U", user or "root", "pgbouncer"]
        subprocess.run([*admin, "-c", f"KILL {conf['NAME']}", "-c", f"RESUME {conf['NAME']}"], check=True, capture_output=True)


def _direct() -> Any:
    """A psycopg connection to the test database that bypasses the pooler."""
    import psycopg

    conf = connection.settings_dict
    return psycopg.connect(
        host="127.0.0.1", port=_direct_port(), dbname=conf["NAME"], user=conf.get("USER") or None, autocommit=True
    )


def _clean(output: str, handlers_raise: bool = False) -> None:
    for marker in (*SESSION_ERRORS, *(() if handlers_raise else ("Traceback",))):
        assert marker not in output, output[-3000:]


def _statuses(ids: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in Task.objects.filter(id__in=ids).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def _drained(ids: list[str]) -> bool:
    return _statuses(ids).get("succeeded", 0) == len(ids)


# ---- the client API through the pooler --------------------------------------------

_CLIENT_SCRIPT = """
import json
from django.db import transaction
import cairnq_django as cq

with transaction.atomic():
    one = cq.submit("demo.noop", {"n": 1})
    keyed = cq.submit("demo.noop", {"n": 2}, key="pooled-key")
    again = cq.submit("demo.noop", {"n": 3}, key="pooled-key")
    many = cq.submit_many([("demo.noop", {"n": i}) for i in range(60)])
    seen_inside = cq.get(one.id) is not None
try:
    with transaction.atomic():
        cq.submit("demo.noop", {"rolled": True}, key="rolled-back")
        raise RuntimeError("roll back")
except RuntimeError:
    pass
canceled = cq.cancel(many[-1].id)
print(json.dumps({
    "ids": [one.id, keyed.id] + [t.id for t in many],
    "reused": again.id == keyed.id,
    "seen_inside": seen_inside,
    "canceled": canceled.status,
    "rolled_back": cq.get_by_key("rolled-back") is None,
    "stats": cq.stats()["default"].get("queued"),
}))
"""


def test_client_api_inside_a_callers_transaction_through_the_pooler(pooled_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _CLIENT_SCRIPT],
        cwd=REPO, env=pooled_env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _clean(done.stderr)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["reused"] and answer["seen_inside"] and answer["rolled_back"]
    assert answer["canceled"] == "canceled"
    assert answer["stats"] == 61
    # Committed as the caller's transaction committed, and visible directly.
    assert Task.objects.filter(id__in=answer["ids"]).count() == 62
    assert cq.get_by_key("rolled-back") is None


# ---- workers through the pooler ----------------------------------------------------


def _listeners(worker_id: str) -> int:
    with _direct() as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = 'LISTEN cairnq_queued'",
            [f"cairnq_worker:{worker_id}"],
        ).fetchone()[0]


@pytest.mark.parametrize("listen", [True, False], ids=["listen-direct", "polling"])
def test_workers_drain_through_the_pooler(pooled_env: dict[str, str], start_worker: Any, listen: bool) -> None:
    poll_ms = 5000 if listen else 200
    overrides: dict[str, Any] = {"POLL_INTERVAL_MS": poll_ms}
    if not listen:
        overrides["LISTEN_DATABASE"] = None
    ids = [t.id for t in cq.submit_many([("demo.noop", {"n": i}) for i in range(120)])]
    workers = [start_worker("--concurrency", "4", overrides=overrides, env=pooled_env) for _ in range(2)]
    worker_ids = [w.wait_ready() for w in workers]
    wait_until(lambda: _drained(ids), 60, what="120 tasks drained through the pooler")
    banner = workers[0].output()
    if listen:
        assert "wake-ups: NOTIFY via 'direct'" in banner, banner
        wait_until(lambda: _listeners(worker_ids[0]) == 1, 10, what="the LISTEN on the direct connection")
        # Idle now: pickup takes a NOTIFY, far sooner than the 5 s poll.
        time.sleep(0.5)
        sent = time.monotonic()
        late = cq.submit("demo.noop", {"late": True}).id
        wait_until(lambda: _drained([late]), 4, what="pickup by NOTIFY")
        assert time.monotonic() - sent < 2.5
    else:
        assert f"wake-ups: polling every {poll_ms} ms" in banner, banner
        assert _listeners(worker_ids[0]) == 0
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.output()[-3000:]
        _clean(worker.output())
    assert Task.objects.filter(id__in=ids, attempt=1).count() == len(ids)


def test_many_workers_on_few_server_connections(pooled_env: dict[str, str], start_worker: Any) -> None:
    # Six processes of four handler threads each, plus their claim, settle
    # and heartbeat connections, share PgBouncer's 20 server connections;
    # a statement prepared on one of them would not exist on the next.
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 5})] * 240 + [("demo.flaky", {"fail_times": 1})] * 20)]
    overrides = {"LISTEN_DATABASE": None, "POLL_INTERVAL_MS": 100, "RETRY_BACKOFF_MS": 10, "RETRY_BACKOFF_MAX_MS": 20}
    workers = [start_worker("--concurrency", "4", overrides=overrides, env=pooled_env) for _ in range(6)]
    for worker in workers:
        worker.wait_ready()
    wait_until(lambda: _drained(ids), 120, interval=0.2, what="260 tasks drained by six pooled workers")
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(20) == 0, worker.output()[-3000:]
        _clean(worker.output(), handlers_raise=True)  # demo.flaky's tracebacks
        assert " ERROR " not in worker.output(), worker.output()[-3000:]


def test_lock_timeout_bounds_a_worker_statement_behind_the_pooler(
    pooled_env: dict[str, str], start_worker: Any
) -> None:
    # PgBouncer 1.18 drops the startup "options" that set the timeouts for a
    # direct session; here each statement must carry them itself, or the
    # claim below would wait for the lock as long as it is held.
    ids = [t.id for t in cq.submit_many([("demo.noop", {})] * 5)]
    worker = start_worker(
        overrides={"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 100, "LISTEN_DATABASE": None},
        env=pooled_env,
    )
    worker.wait_ready()
    wait_until(lambda: _drained(ids), 30, what="the first tasks")
    holder = _direct()
    holder.autocommit = False
    holder.execute("LOCK TABLE cairnq_tasks IN ACCESS EXCLUSIVE MODE")
    try:
        locked = time.monotonic()
        wait_until(
            lambda: "lock timeout" in worker.output() or "statement timeout" in worker.output(),
            12,
            what="the worker's statement to time out behind the lock",
        )
        waited = time.monotonic() - locked
        sent = time.monotonic()
        worker.signal(signal.SIGTERM)
        code = worker.wait(10)
        answered = time.monotonic() - sent
    finally:
        holder.rollback()
        holder.close()
    assert 1.5 < waited < 10, waited
    assert code == 0 and answered < 8, worker.output()[-3000:]


def test_transaction_timeouts_travel_with_each_statement(store: Any, dialect: str) -> None:
    # The store's half, on any PostgreSQL connection: the SET LOCAL pair goes
    # with the statement, its result is the statement's, and nothing stays
    # on the session afterwards.
    if dialect != "postgres":
        pytest.skip("statement_timeout is PostgreSQL's")
    wrapper = connections["default"]
    # An earlier in-process worker test may have bounded this thread's session; whatever it is, it must stay.
    with wrapper.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (before,) = cursor.fetchone()
    assert before != "1234ms"
    transaction_timeouts.bound_each_transaction(wrapper, 1234)
    try:
        with store._cursor("probe") as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')", None)
            assert cursor.fetchall() == [("1234ms", "1234ms")]
        assert get_store().now_ms() > 0
    finally:
        delattr(wrapper, transaction_timeouts._ATTRIBUTE)
    with wrapper.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == before


# ---- the checks ---------------------------------------------------------------------


@pytest.fixture
def two_databases() -> Iterator[None]:
    """A PostgreSQL queue database and its direct twin, for settings-only checks."""
    pg = {"ENGINE": "django.db.backends.postgresql", "NAME": "app", "HOST": "127.0.0.1", "PORT": 6432}
    value = {
        "default": pg,
        "direct": {**pg, "PORT": 5432},
        "files": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"},
    }
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Overriding setting DATABASES")
        with override_settings(DATABASES=value):
            yield


def _pooling_messages(**config: Any) -> list[checks.CheckMessage]:
    base = {key: value for key, value in settings.CAIRNQ.items() if key not in ("TRANSACTION_POOLING", "LISTEN_DATABASE")}
    with override_settings(CAIRNQ={**base, **config}):
        return [m for m in checks.run_checks(tags=["cairnq"]) if m.id in ("cairnq.E017", "cairnq.I018")]


def test_pooling_checks_report_malformed_settings(two_databases: None) -> None:
    bad = [
        (_pooling_messages(TRANSACTION_POOLING="yes"), "TRANSACTION_POOLING"),
        (_pooling_messages(LISTEN_DATABASE="nowhere"), "nowhere"),
        (_pooling_messages(LISTEN_DATABASE="files"), "not a PostgreSQL database"),
        (_pooling_messages(PREPARED_STATEMENTS="auto"), "PREPARED_STATEMENTS"),
    ]
    docs = (REPO / "docs" / "checks.md").read_text()
    for messages, needle in bad:
        (message,) = messages
        assert message.id == "cairnq.E017" and message.is_serious() and needle in message.msg, message
        assert message.hint and "`cairnq.E017`" in docs
    assert _pooling_messages() == []  # no pooling: nothing to say
    assert _pooling_messages(LISTEN_DATABASE="direct") == []


def test_pooling_check_says_which_fallback_applies(two_databases: None) -> None:
    (polling,) = _pooling_messages(TRANSACTION_POOLING=True, POLL_INTERVAL_MS=250)
    assert polling.id == "cairnq.I018" and not polling.is_serious()
    assert "poll for new tasks every 250 ms" in polling.msg and "prepared statements are off" in polling.msg
    assert "LISTEN_DATABASE" in str(polling.hint)
    (listening,) = _pooling_messages(TRANSACTION_POOLING=True, LISTEN_DATABASE="direct", PREPARED_STATEMENTS=True)
    assert "LISTEN for new tasks over the direct connection 'direct'" in listening.msg
    assert "client calls prepare their statements as set" in listening.msg
    assert "`cairnq.I018`" in (REPO / "docs" / "checks.md").read_text()


def test_prepared_statements_default_follows_pooling() -> None:
    from cairnq_django.conf import DEFAULTS, listen_alias, prepared_statements

    assert DEFAULTS["PREPARED_STATEMENTS"] is None
    assert prepared_statements({"PREPARED_STATEMENTS": None, "TRANSACTION_POOLING": False}) is True
    assert prepared_statements({"PREPARED_STATEMENTS": None, "TRANSACTION_POOLING": True}) is False
    assert prepared_statements({"PREPARED_STATEMENTS": True, "TRANSACTION_POOLING": True}) is True
    assert listen_alias({"DATABASE": "q", "TRANSACTION_POOLING": False, "LISTEN_DATABASE": None}) == "q"
    assert listen_alias({"DATABASE": "q", "TRANSACTION_POOLING": True, "LISTEN_DATABASE": None}) is None
    assert listen_alias({"DATABASE": "q", "TRANSACTION_POOLING": True, "LISTEN_DATABASE": "d"}) == "d"



# ---- a pooler left as is (issue 35): detected, never LISTENed through ----------------


@pytest.fixture
def probe_aliases(pooled_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Two aliases of this thread to the test database: through PgBouncer, and past it.

    Registered on this thread's connection handler only, and never connected
    by Django: the probe opens connections of its own.
    """
    names = ("probe_pooled", "probe_direct")
    for name, port in zip(names, (POOLER_PORT, _direct_port())):
        wrapper = connections.create_connection("default")
        wrapper.settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": port}
        connections[name] = wrapper
    yield names
    for name in names:
        del connections[name]


def _as_is(pooled_env: dict[str, str]) -> dict[str, str]:
    """The issue's project: DATABASES at PgBouncer, and nothing else set (no "direct" alias either)."""
    return {**pooled_env, "CAIRNQ_TEST_POOLER": ""}


def _check(
    env: dict[str, str], *args: str, overrides: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py check *args`` with ``overrides`` as the whole of CAIRNQ_TEST_OVERRIDES."""
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=REPO, env={**env, "CAIRNQ_TEST_OVERRIDES": json.dumps(overrides or {})},
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_detect_tells_a_transaction_pooler_from_a_direct_connection(probe_aliases: tuple[str, str]) -> None:
    from cairnq_django.store.postgres.pooler import detect

    pooled, direct = probe_aliases
    started = time.monotonic()
    through = detect(pooled)
    took = time.monotonic() - started
    past = detect(direct)
    assert through.pooled, through
    assert "server process" in through.evidence and through.server_port == _direct_port(), through
    assert f"DATABASES says port {POOLER_PORT}" in through.evidence, through
    assert not past.pooled and past.evidence == "each client connection kept one server process of its own", past
    # Its own connections only: the aliases' Django connections were never opened.
    assert connections[pooled].connection is None and connections[direct].connection is None
    assert took < 2.0, took  # two connections and a few one-row queries


def test_check_database_is_silent_on_the_shipped_settings(cairnq_db: Any) -> None:
    # SQLite: nothing to probe. PostgreSQL directly: no pooler. Through
    # PgBouncer (the pooled leg): TRANSACTION_POOLING is declared and
    # LISTEN_DATABASE is direct, which is what the errors ask for.
    messages = checks.run_checks(databases=["default"], tags=["cairnq"])
    assert not [m for m in messages if m.is_serious()], messages
    if connection.vendor == "postgresql":
        from cairnq_django.store.postgres.pooler import detect

        assert detect("default").pooled == POOLED_RUN


def test_check_database_names_the_settings_for_a_pooler_left_as_is(pooled_env: dict[str, str]) -> None:
    as_is = _check(_as_is(pooled_env), "--database", "default")
    assert as_is.returncode == 1, as_is.stdout + as_is.stderr
    assert "cairnq.E024" in as_is.stderr and "Database 'default' goes through a transaction pooler" in as_is.stderr
    assert '"_pg3_0" already exists' in as_is.stderr and "a worker would LISTEN through it" in as_is.stderr
    expected = (
        'CAIRNQ = {..., "TRANSACTION_POOLING": True, "LISTEN_DATABASE": "direct"} and DATABASES["direct"] = '
        f'{{**DATABASES["default"], "HOST": "<PostgreSQL\'s own host>", "PORT": {_direct_port()}}}'
    )
    assert expected in " ".join(as_is.stderr.split()), as_is.stderr
    assert 'DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True' in as_is.stderr
    # Without --database it does not connect, so it does not know.
    assert _check(_as_is(pooled_env)).returncode == 0
    # The hint's settings (what CAIRNQ_TEST_POOLER sets up): silent.
    followed = _check(pooled_env, "--database", "default")
    assert followed.returncode == 0 and "cairnq.E02" not in followed.stderr + followed.stdout, followed.stderr
    # Pooling declared, but the LISTEN alias is the pooler itself.
    listen_pooled = _check(pooled_env, "--database", "default", overrides={"LISTEN_DATABASE": "default"})
    assert listen_pooled.returncode == 1 and "cairnq.E025" in listen_pooled.stderr, listen_pooled.stderr
    assert "cairnq.E024" not in listen_pooled.stderr
    docs = (REPO / "docs" / "checks.md").read_text()
    assert "`cairnq.E024`" in docs and "`cairnq.E025`" in docs


def test_worker_refuses_to_start_behind_a_pooler_left_as_is(
    pooled_env: dict[str, str], start_worker: Any
) -> None:
    waiting = cq.submit("demo.noop", {}).id
    worker = start_worker(env=_as_is(pooled_env))
    assert worker.wait(60) == 1, worker.output()[-3000:]  # a CommandError's exit code
    out = worker.output()
    assert "cairnq.E024" in out, out[-3000:]
    assert '"TRANSACTION_POOLING": True' in out and '"LISTEN_DATABASE": "direct"' in out, out[-3000:]
    # Refused before it built a worker: no banner, no claim, no LISTEN, no traceback.
    assert "Traceback" not in out and "cairnq worker worker_" not in out, out[-3000:]
    assert Task.objects.get(id=waiting).status == "queued"


def _listening_backends() -> int:
    """Server processes of the test database whose last statement was the worker's LISTEN."""
    with _direct() as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = 'LISTEN cairnq_queued'"
        ).fetchone()[0]


def test_worker_never_listens_through_a_pooler(pooled_env: dict[str, str], start_worker: Any) -> None:
    # Pooling declared, but LISTEN_DATABASE names the pooled alias: the
    # worker finds it pooled at start, polls, and says why once.
    assert _listening_backends() == 0
    worker = start_worker(overrides={"LISTEN_DATABASE": "default", "POLL_INTERVAL_MS": 100}, env=pooled_env)
    worker.wait_ready()
    out = worker.output()
    assert "wake-ups: polling every 100 ms" in out and "+ 0 listen" in out, out[-3000:]
    warnings_said = [line for line in out.splitlines() if "not listening for new tasks over database 'default'" in line]
    assert len(warnings_said) == 1 and " WARNING " in warnings_said[0], out[-3000:]
    assert "transaction pooler" in warnings_said[0] and "LISTEN_DATABASE" in warnings_said[0]
    ids = [t.id for t in cq.submit_many([("demo.noop", {"n": i}) for i in range(5)])]
    wait_until(lambda: _drained(ids), 30, what="tasks picked up by polling")
    assert _listening_backends() == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output()[-3000:]
    _clean(worker.output())
