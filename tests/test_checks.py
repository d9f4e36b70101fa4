"""Pin that every misconfiguration of ``CAIRNQ`` and of the queue database is reported
by ``manage.py check`` with its documented id and a hint, and that the shipped
test settings pass clean (so a check that fires on valid settings fails here)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from cairnq_django.checks import check_configuration

DOCS = Path(__file__).resolve().parent.parent / "docs" / "checks.md"


# The ids this module's checks own; cairnq.E010 (undeclared resource) belongs to
# the worker's checks and may legitimately fire when RESOURCES is overridden.
OWN_IDS = {f"cairnq.E{n:03d}" for n in (1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14, 15, 17, 19)} | {"cairnq.W005"}


def cairnq_messages() -> list[checks.CheckMessage]:
    # Only the cairnq tag: model checks on Django 6.1 open a database connection.
    return [m for m in checks.run_checks(tags=["cairnq"]) if m.id in OWN_IDS]


def ids(config: dict[str, Any]) -> list[str]:
    """Return the ids reported with ``config`` laid over the project's CAIRNQ."""
    with override_settings(CAIRNQ={**settings.CAIRNQ, **config}):
        return sorted(str(m.id) for m in cairnq_messages())


@contextmanager
def databases(value: dict[str, Any]) -> Iterator[None]:
    """Override DATABASES for a settings-only check (Django warns about the override)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Overriding setting DATABASES")
        with override_settings(DATABASES=value):
            yield


# The full check command runs model checks, which on Django 6.1 ask SQLite
# whether it supports JSON: a database query.
@pytest.mark.django_db
def test_shipped_settings_pass() -> None:
    assert cairnq_messages() == []
    call_command("check")  # raises SystemCheckError on any error


def test_every_message_has_a_hint_and_a_documented_id() -> None:
    bad = {"LEASE_MSS": 1, "LEASE_MS": 0, "RESOURCES": {"gpu": 0}, "MAX_QUEUE_DEPTH": "x",
           "QUEUES": [], "DATABASE": "nowhere"}
    with override_settings(CAIRNQ={**settings.CAIRNQ, **bad}):
        messages = cairnq_messages()
    assert messages
    documented = DOCS.read_text()
    for message in messages:
        assert message.hint, message
        assert f"`{message.id}`" in documented, message.id


def test_unknown_alias_is_e001() -> None:
    assert ids({"DATABASE": "replica"}) == ["cairnq.E001"]
    with override_settings(CAIRNQ={"DATABASE": "replica"}):
        (message,) = cairnq_messages()
    assert "replica" in message.msg and "default" in message.hint


def test_unsupported_vendor_is_e002() -> None:
    with databases({"default": {**settings.DATABASES["default"]}, "legacy": {"ENGINE": "django.db.backends.dummy"}}):
        assert ids({"DATABASE": "legacy"}) == ["cairnq.E002"]
    # A backend whose driver is missing cannot even load: still unsupported.
    with databases({"default": {**settings.DATABASES["default"]}, "legacy": {"ENGINE": "django.db.backends.oracle"}}):
        assert ids({"DATABASE": "legacy"}) == ["cairnq.E002"]


def test_postgresql_without_psycopg_is_e003(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes ``import psycopg`` raise ImportError.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    pg = {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}
    with databases({"default": {**settings.DATABASES["default"]}, "pg": pg}):
        assert ids({"DATABASE": "pg"}) == ["cairnq.E003"]


def test_sqlite_transaction_mode_unset_is_fine_and_deferred_is_w005(tmp_path: Path) -> None:
    plain = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "x.sqlite3")}
    deferred = {**plain, "OPTIONS": {"transaction_mode": "DEFERRED"}}
    immediate = {**plain, "OPTIONS": {"transaction_mode": "immediate"}}
    exclusive = {**plain, "OPTIONS": {"transaction_mode": "EXCLUSIVE"}}
    with databases(
        {"default": {**settings.DATABASES["default"]}, "lite": plain, "deferred": deferred, "ok": immediate, "x": exclusive}
    ):
        # Unset (startproject's default): the app opens IMMEDIATE itself, nothing to report.
        assert ids({"DATABASE": "lite"}) == []
        assert ids({"DATABASE": "deferred"}) == ["cairnq.W005"]
        assert ids({"DATABASE": "ok"}) == []
        assert ids({"DATABASE": "x"}) == []
        with override_settings(CAIRNQ={**settings.CAIRNQ, "DATABASE": "deferred"}):
            [warning] = [m for m in check_configuration() if m.id == "cairnq.W005"]
        # A warning: migrate and the worker still run on these settings.
        assert warning.level == checks.WARNING and not warning.is_serious()


@pytest.mark.django_db
def test_system_check_command_fails_on_errors() -> None:
    with override_settings(CAIRNQ={"DATABASE": "replica"}), pytest.raises(SystemCheckError, match="cairnq.E001"):
        call_command("check")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"LEASE_MS": 30_000, "HEARTBEAT_INTERVAL_MS": 10_001}, ["cairnq.E004"]),
        ({"LEASE_MS": 30_000, "HEARTBEAT_INTERVAL_MS": 10_000}, []),
        ({"LEASE_MS": 100}, ["cairnq.E004"]),  # the 50 ms floor gives 150 > 100
        ({"LEASE_MS": 150}, []),
        ({"LEASE_MS": 100, "HEARTBEAT_INTERVAL_MS": 30}, []),
    ],
)
def test_lease_shorter_than_three_heartbeats_is_e004(config: dict[str, Any], expected: list[str]) -> None:
    assert ids(config) == expected


@pytest.mark.parametrize(
    "config",
    [
        {"LEASE_MS": 0},
        {"LEASE_MS": "30000"},
        {"CONCURRENCY": 0},
        {"CONCURRENCY": True},
        {"POLL_INTERVAL_MS": -5},
        {"HEARTBEAT_INTERVAL_MS": 0},
        {"MAX_RUN_MS": 0},
        {"CLAIM_BATCH": 2.5},
        {"CLAIM_AHEAD": -1},
        {"CLAIM_AHEAD": None},
        {"MAX_IN_FLIGHT_BYTES": -1},
        {"RETRY_BACKOFF_MS": -1},
        {"DRAIN_TIMEOUT": "soon"},
        {"MAX_QUEUE_WAIT_MS": -1},
        {"SQLITE_BUSY_TIMEOUT_MS": None},
        {"RETENTION_INTERVAL_MS": 0},
        {"WORKER_KEEP_MS": 0},
        {"WORKER_KEEP_MS": None},
    ],
)
def test_bad_numbers_are_e006(config: dict[str, Any]) -> None:
    assert ids(config) == ["cairnq.E006"]
    with override_settings(CAIRNQ={**settings.CAIRNQ, **config}):
        (message,) = cairnq_messages()
    assert next(iter(config)) in message.msg


def test_good_numbers_pass() -> None:
    assert ids({"DRAIN_TIMEOUT": 2.5, "MAX_RUN_MS": None, "CLAIM_BATCH": 16, "RETRY_BACKOFF_MS": 0}) == []


@pytest.mark.parametrize(
    "resources",
    [{"gpu": 0}, {"gpu": "1"}, {"gpu": 1.5}, {"gpu": True}, {"": 1}, ["gpu"], None],
)
def test_bad_resources_are_e007(resources: Any) -> None:
    assert ids({"RESOURCES": resources}) == ["cairnq.E007"]


def test_unknown_key_is_e008_with_a_suggestion() -> None:
    with override_settings(CAIRNQ={"LEASE_MSS": 1000, "ZZZ": 1}):
        messages = sorted(cairnq_messages(), key=lambda m: m.msg)
    assert [m.id for m in messages] == ["cairnq.E008", "cairnq.E008"]
    assert '"LEASE_MSS"' in messages[0].msg and messages[0].hint == 'Did you mean "LEASE_MS"?'
    assert '"ZZZ"' in messages[1].msg and "Did you mean" not in messages[1].hint


@pytest.mark.parametrize(
    "depth",
    [0, -1, True, "100", 1.5, {"q": 0}, {"q": "1"}, {"": 5}],
)
def test_bad_max_queue_depth_is_e009(depth: Any) -> None:
    assert ids({"MAX_QUEUE_DEPTH": depth}) == ["cairnq.E009"]


def test_good_max_queue_depth_passes() -> None:
    assert ids({"MAX_QUEUE_DEPTH": 1}) == []
    assert ids({"MAX_QUEUE_DEPTH": {"emails": 10_000, "reports": 1}}) == []


@pytest.mark.parametrize("queues", [[], "default", [""], [1], None])
def test_bad_queues_are_e011(queues: Any) -> None:
    assert ids({"QUEUES": queues}) == ["cairnq.E011"]


@pytest.mark.parametrize(
    "token",
    ["short", "", " " * 20, "x" * 15, " " + "k3Jx9-aZq_7Lw2mR", 12345678901234567890, b"x" * 32, ["x" * 20], "x" * 16],
)
def test_weak_or_non_text_metrics_token_is_e019(token: Any) -> None:
    assert ids({"METRICS_TOKEN": token}) == ["cairnq.E019"]


def test_a_long_metrics_token_or_none_passes() -> None:
    assert ids({"METRICS_TOKEN": None}) == []
    assert ids({"METRICS_TOKEN": "k3Jx9-aZq_7Lw2mR"}) == []
    assert ids({"METRICS_TOKEN": "k3Jx9-aZq_7Lw2mR8pT4vN6yB0cE5fG1"}) == []


def test_non_dict_cairnq_is_e012() -> None:
    # Called directly: other checks (the worker's E010) read get_config(), which
    # cannot overlay a list on the defaults; this check must say why first.
    with override_settings(CAIRNQ=["LEASE_MS", 1]):
        assert [m.id for m in check_configuration()] == ["cairnq.E012"]


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"SCHEDULE": {"demo.noop": "61 * * * *"}}, ["cairnq.E013"]),
        ({"SCHEDULE": {"demo.noop": "*/5 * * * *"}}, []),
        ({"RETENTION": {"queued": 1000}}, ["cairnq.E014"]),
        ({"RETENTION": -5}, ["cairnq.E014"]),
        ({"RETENTION": {"failed": 86_400_000}}, []),
    ],
)
def test_schedule_and_retention_are_checked(config: dict[str, Any], expected: list[str]) -> None:
    assert ids(config) == expected
