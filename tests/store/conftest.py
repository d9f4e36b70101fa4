"""The store suites run once per write mode the dialect has.

SQLite has two: the single ``RETURNING`` statements (payload limit at or
under 8 MiB, the default) and large-row mode (pick / write / read without
RETURNING, for deployments that admit large payloads). Both must keep every
protocol rule, so every conformance and batch test runs in each.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from cairnq_django.conf import get_config
from cairnq_django.store.sqlite.store import LARGE_ROW_BYTES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # PostgreSQL has one mode (it returns rows without copying them).
    if "write_mode" in metafunc.fixturenames:
        sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
        modes = ["returning", "large_rows"] if sqlite else ["returning"]
        metafunc.parametrize("write_mode", modes, indirect=True)


@pytest.fixture
def write_mode(request: Any, cairnq_db: Any) -> Any:
    if request.param == "large_rows":
        with override_settings(CAIRNQ={**get_config(), "MAX_PAYLOAD_BYTES": 2 * LARGE_ROW_BYTES}):
            yield request.param
        return
    yield request.param


@pytest.fixture
def store(cairnq_db: Any, write_mode: str) -> Any:
    from cairnq_django.store import get_store

    return get_store()
