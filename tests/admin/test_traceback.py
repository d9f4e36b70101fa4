"""A failed task's stored traceback is near the top of its detail page, escaped.

Pins: a traceback kept only in the envelope's JSON at the bottom of the page,
one rendered as HTML (a handler's message can carry markup), a page that
breaks or shows an empty box when the envelope has no traceback or one of
another shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.urls import reverse

from . import WORKER, make_task

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app/tasks.py", line 12, in send\n'
    "    raise ValueError(\"<script>alert('x')</script>\")\n"
    "ValueError: <script>alert('x')</script>\n"
)


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def failed_with(store: Any, details: Any) -> str:
    task = make_task(store, "running")
    error = {"type": "ValueError", "code": "handler_error", "message": "bad <input>", "retryable": False}
    store.fail(task.id, WORKER, {**error, "details": details}, retryable=False)
    return task.id


def detail(client: Client, task_id: str) -> str:
    response = client.get(reverse("admin:cairnq_task_change", args=[task_id]))
    assert response.status_code == 200
    return response.content.decode()


def test_traceback_is_shown_under_the_error_summary_escaped(store: Any, root: Client) -> None:
    html = detail(root, failed_with(store, {"traceback": TRACEBACK, "exception_class": "builtins.ValueError"}))
    summary = html.index('id="cairnq-error-summary"')
    shown = html.index('<pre class="cairnq-traceback" id="cairnq-traceback">')
    # Under the summary line and above every field of the task.
    assert summary < html.index("bad &lt;input&gt;") < shown < html.index('class="form-row')
    pre = html[shown : html.index("</pre>", shown)]
    assert "ValueError: &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in pre
    assert "<script>alert" not in html
    # Line breaks kept: the traceback reads as the log would show it.
    assert '  File &quot;app/tasks.py&quot;, line 12, in send\n' in pre


@pytest.mark.parametrize("details", [{}, {"traceback": ""}, {"traceback": ["not", "text"]}, "text", None])
def test_no_traceback_no_box(store: Any, root: Client, details: Any) -> None:
    html = detail(root, failed_with(store, details))
    assert "cairnq-traceback" not in html
    # The summary still says what failed.
    assert 'id="cairnq-error-summary"' in html and "bad &lt;input&gt;" in html


def test_envelope_of_another_shape_shows_no_summary(store: Any, root: Client) -> None:
    task = make_task(store, "failed").id
    with connections["default"].cursor() as cursor:
        cursor.execute("UPDATE cairnq_tasks SET error = %s WHERE id = %s", [json.dumps(["odd", 1]), task])
    html = detail(root, task)
    assert 'id="cairnq-error-summary"' not in html
    assert "&quot;odd&quot;" in html  # still shown whole in the Data section


def test_a_long_traceback_is_cut(store: Any, root: Client) -> None:
    long = "x" * 150_000
    html = detail(root, failed_with(store, {"traceback": long}))
    shown = html.index('id="cairnq-traceback">') + len('id="cairnq-traceback">')
    assert html.index("</pre>", shown) - shown == 100_000
    assert "the whole traceback is in the error envelope below" in html


def test_error_comes_before_payload_and_result(store: Any, root: Client) -> None:
    """A task with an error shows its envelope first in the Data section; one without keeps payload first."""
    failed = detail(root, failed_with(store, {"traceback": TRACEBACK}))
    order = [failed.index(f"field-{field}_pretty") for field in ("error", "payload", "result")]
    assert order == sorted(order)
    assert failed.index('id="cairnq-error-summary"') < failed.index('class="form-row')
    done = detail(root, make_task(store, "succeeded").id)
    assert "cairnq-error-summary" not in done
    assert done.index("field-payload_pretty") < done.index("field-result_pretty") < done.index("field-error_pretty")
    # An empty field reads "—", not Django's "-".
    assert re.search(r'field-correlation_id.*?<div class="readonly">—</div>', done, re.S)
