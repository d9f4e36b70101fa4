"""The changelist's payload column: a short, truthful preview read cheaply.

Pins: a small payload not shown as compact JSON, a large one not cut (or read
whole), multi-byte text cut mid-character, and on SQLite a page whose query
count grows with its rows, a preview read on another database alias than the
page's, or a crash (or another task's payload) when a row goes away between
the page query and the blob read.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.admin import preview as admin_preview
from cairnq_django.admin.preview import PREVIEW_SOURCE_CHARS
from cairnq_django.admin.task_admin import TaskAdmin
from cairnq_django.conf import get_config
from cairnq_django.models import Task
from cairnq_django.store import SubmitSpec

from . import ROW_ID

CHANGELIST = "admin:cairnq_task_changelist"
ROW = re.compile(
    ROW_ID + r'.*?<td class="field-payload_preview"><code class="cairnq-preview"[^>]*>(.*?)</code></td>',
    re.DOTALL,
)


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def submit(store: Any, payload_json: str) -> str:
    return str(store.submit(SubmitSpec(name="admin.preview", payload_json=payload_json)).id)


def previews(client: Client) -> dict[str, str]:
    """Return each changelist row's payload preview, unescaped, by task id."""
    response = client.get(reverse(CHANGELIST))
    assert response.status_code == 200
    return {task_id: html_lib.unescape(cell) for task_id, cell in ROW.findall(response.content.decode())}


def sqlite_only() -> None:
    if connections["default"].vendor != "sqlite" or not admin_preview.BLOB_IO:
        pytest.skip("blob reads are SQLite's (Python 3.11+)")


def test_small_payload_is_compact_sorted_json(store: Any, superuser_client: Client) -> None:
    task_id = submit(store, '{"b": [1,\n 2], "a": "<x>"}')
    assert previews(superuser_client)[task_id] == '{"a": "<x>", "b": [1, 2]}'


def test_large_payload_is_cut(store: Any, superuser_client: Client, dialect: str) -> None:
    # Hex digits compress too little for PostgreSQL to store them under the preview size.
    blob = "".join(f"{(i * 2654435761) % 2**32:08x}" for i in range(1000))
    task_id = submit(store, json.dumps({"blob": blob}))
    shown = previews(superuser_client)[task_id]
    if dialect == "sqlite":
        assert shown == '{"blob": "' + blob[:49] + "…"
    else:
        assert re.fullmatch(r"\(large payload: \d+ bytes stored\)", shown), shown


def test_sqlite_parses_up_to_the_source_limit_and_cuts_past_it(store: Any, superuser_client: Client) -> None:
    sqlite_only()

    def payload(length: int) -> str:
        text = '{"b": 1, "a": "' + "p" * (length - 17) + '"}'
        assert len(text) == length
        return text

    fits = submit(store, payload(PREVIEW_SOURCE_CHARS))
    over = submit(store, payload(PREVIEW_SOURCE_CHARS + 1))
    shown = previews(superuser_client)
    # Whole document read: parsed and shown compact with sorted keys.
    assert shown[fits].startswith('{"a": "ppp')
    # One character more: the head is the stored text's start, as stored.
    assert shown[over].startswith('{"b": 1, "a": "ppp')


def test_multibyte_text_is_cut_on_a_character(store: Any, superuser_client: Client, dialect: str) -> None:
    text = "日本語😀é" * 3000
    task_id = submit(store, json.dumps({"s": text}, ensure_ascii=False))
    shown = previews(superuser_client)[task_id]
    assert "\ufffd" not in shown
    if dialect == "sqlite" or not shown.startswith("(large payload"):
        assert shown == '{"s": "' + text[:52] + "…"


def test_page_queries_do_not_grow_with_rows(store: Any, superuser_client: Client, dialect: str) -> None:
    def page_queries() -> list[str]:
        with CaptureQueriesContext(connections["default"]) as queries:
            assert len(previews(superuser_client)) == Task.objects.count()
        return [query["sql"] for query in queries.captured_queries]

    for _ in range(2):
        submit(store, '{"n": 1}')
    few = page_queries()
    for _ in range(20):
        submit(store, json.dumps({"n": "x" * 5000}))
    many = page_queries()
    assert len(many) == len(few)
    task_sql = [sql for sql in many if "cairnq_tasks" in sql]
    if dialect == "sqlite" and admin_preview.BLOB_IO:
        # The page query leaves the payload column alone; one lookup finds the rowids.
        assert not any('"cairnq_tasks"."payload"' in sql or "SUBSTR" in sql.upper() for sql in task_sql), task_sql
        assert len([sql for sql in task_sql if "rowid" in sql]) == 1


def _page_tasks(ids: list[str]) -> list[Task]:
    return list(Task.objects.defer("payload").filter(pk__in=ids).order_by("pk"))


def test_heads_cut_the_byte_budget_on_a_character(store: Any) -> None:
    sqlite_only()
    stored = '"' + "😀" * 10 + '"'
    task_id = submit(store, stored)
    [task] = _page_tasks([task_id])
    # Three characters read as 3 * 4 + 4 = 16 bytes: three emoji and a cut fourth.
    admin_preview.fill_payload_heads("default", [task], 3)
    assert task.payload_head == '"😀😀'  # type: ignore[attr-defined]
    assert task.payload_bytes == len(stored.encode())  # type: ignore[attr-defined]


def test_a_row_gone_before_the_read_shows_a_dash(store: Any) -> None:
    sqlite_only()
    kept, gone = submit(store, '{"k": 1}'), submit(store, '{"g": 1}')
    tasks = _page_tasks([kept, gone])
    with connections["default"].cursor() as cursor:
        cursor.execute("DELETE FROM cairnq_tasks WHERE id = %s", [gone])
    admin_preview.fill_payload_heads("default", tasks, PREVIEW_SOURCE_CHARS + 1)
    by_id = {task.pk: task for task in tasks}
    assert by_id[kept].payload_head == '{"k": 1}'  # type: ignore[attr-defined]
    assert (by_id[gone].payload_head, by_id[gone].payload_bytes) == (None, None)  # type: ignore[attr-defined]
    model_admin = TaskAdmin(Task, None)  # type: ignore[arg-type]
    assert model_admin.payload_preview(by_id[gone]) == '<code class="cairnq-preview">—</code>'


def test_a_reused_rowid_is_not_read_as_the_task(store: Any) -> None:
    sqlite_only()
    first, second = submit(store, '{"mine": 1}'), submit(store, '{"other": 1}')
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT rowid FROM cairnq_tasks WHERE id = %s", [second])
        [(other_rowid,)] = cursor.fetchall()
    # As if a purge and a new insert gave ``first``'s old rowid to ``second``.
    assert admin_preview._read_head(connection.connection, first, other_rowid, "UTF-8", 100) is None
    assert admin_preview._read_head(connection.connection, second, other_rowid, "UTF-8", 100) == ('{"other": 1}', 12)


@pytest.fixture
def mirror_alias(cairnq_db: Any) -> Iterator[str]:
    """A second alias on the same SQLite file, as a deployment with CAIRNQ["DATABASE"] elsewhere."""
    sqlite_only()
    connections.settings["preview_mirror"] = dict(connections["default"].settings_dict)
    # The test case admits only "default": connect past its guard, once.
    connections["preview_mirror"].connect()
    try:
        with override_settings(CAIRNQ={**get_config(), "DATABASE": "preview_mirror"}):
            yield "preview_mirror"
    finally:
        connections["preview_mirror"].close()
        del connections["preview_mirror"]
        del connections.settings["preview_mirror"]


def test_heads_are_read_on_the_pages_alias(store: Any, superuser_client: Client, mirror_alias: str) -> None:
    task_id = submit(store, '{"where": "mirror"}')
    with CaptureQueriesContext(connections[mirror_alias]) as mirror:
        with CaptureQueriesContext(connections["default"]) as default:
            assert previews(superuser_client)[task_id] == '{"where": "mirror"}'
    assert any("rowid" in query["sql"] for query in mirror.captured_queries)
    assert not any("cairnq_tasks" in query["sql"] for query in default.captured_queries)
