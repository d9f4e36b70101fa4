"""Whatever a row holds and whatever a URL carries, the admin's pages answer and say what is odd.

Rows are written with raw SQL, as another SDK or a careless operator would:
times past datetime's years, NaN or infinite progress, text in SQLite's
numeric columns, JSON Python cannot decode. Pins: a 500 on the task list, the
detail page or the dashboard for every operator because of one such row, an
odd value shown as if it were ordinary (or not at all), a NUL in a filter,
search term, ordering, page or object id that reaches PostgreSQL as an error,
and an undecodable row an operator cannot cancel from its page.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from django.db import DatabaseError, connections, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cairnq_django.models import Task
from cairnq_django.protocol.payload import Undecodable

from . import make_task, status_of

CHANGELIST = "admin:cairnq_task_changelist"
DASHBOARD = "admin:cairnq_task_dashboard"
TIME_COLUMNS = (
    "run_at_ms",
    "created_at_ms",
    "completed_at_ms",
    "lease_until_ms",
    "cancel_requested_at_ms",
    "updated_at_ms",
)
# The last millisecond of 9999-12-31 UTC: in range in UTC, past it east of UTC.
LAST_UTC_MS = 253_402_300_799_999


def change_url(task_id: str) -> str:
    return reverse("admin:cairnq_task_change", args=[task_id])


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def is_postgres() -> bool:
    return connections["default"].vendor == "postgresql"


def write_raw(task_id: str, **columns: Any) -> None:
    """Set columns with a plain UPDATE, past every check the Python API makes."""
    assignments = ", ".join(f"{column} = %s" for column in columns)
    with connections["default"].cursor() as cursor:
        cursor.execute(f"UPDATE cairnq_tasks SET {assignments} WHERE id = %s", [*columns.values(), task_id])
        assert cursor.rowcount == 1


def write_raw_unchecked(task_id: str, column: str, text: str) -> None:
    """SQLite only: store text its json_valid CHECK would refuse, as a writer with checks off can."""
    with connections["default"].cursor() as cursor:
        cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            cursor.execute(f"UPDATE cairnq_tasks SET {column} = %s WHERE id = %s", [text, task_id])
        finally:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")


def pages(client: Client, task_id: str, **query: str) -> dict[str, str]:
    """GET the list, the task's detail page and the dashboard; each must answer 200."""
    bodies = {}
    for label, url in (
        ("list", reverse(CHANGELIST)),
        ("detail", change_url(task_id)),
        ("dashboard", reverse(DASHBOARD)),
    ):
        response = client.get(url, query if label == "list" else {})
        assert response.status_code == 200, (label, response.status_code)
        bodies[label] = response.content.decode()
    return bodies


def cell(html: str, task_id: str, column: str) -> str:
    """Return one changelist cell's inner HTML for the row of ``task_id``."""
    at = html.index(f'<span class="cairnq-id" title="{task_id}">')
    row = html[html.rindex("<tr", 0, at) :]
    row = row[: row.index("</tr>")]
    match = re.search(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', row, re.S)
    assert match, (column, row)
    return match.group(1)


@pytest.mark.parametrize("value", [2**62, -(2**62), LAST_UTC_MS, -62_135_596_800_001])
def test_times_outside_datetime_range_are_marked(store: Any, root: Client, value: int) -> None:
    hostile = make_task(store, "cancel_requested").id  # a lease and a cancel request to show
    done = make_task(store, "succeeded").id
    plain = make_task(store).id
    waiting = make_task(store).id
    write_raw(hostile, **{column: value for column in TIME_COLUMNS})
    write_raw(done, completed_at_ms=value, run_at_ms=value)
    write_raw(waiting, created_at_ms=value, run_at_ms=value)

    # East of UTC, so the last UTC millisecond of year 9999 overflows too.
    with timezone.override("Asia/Kolkata"):
        html = pages(root, hostile)
        done_detail = root.get(change_url(done)).content.decode()
    marker = f"out of range ({value} ms)"
    assert marker in cell(html["list"], hostile, "created_display")
    assert "out of range" not in cell(html["list"], plain, "created_display")
    timeline = html["detail"][html["detail"].index('class="cairnq-timeline"') :]
    timeline = timeline[: timeline.index("</table>")]
    # All five rows of the timeline are there, each marked; the lease too.
    assert timeline.count(marker) == 5
    assert html["detail"].count(marker) == 6
    assert done_detail.count(marker) == 2
    # The dashboard's oldest-queued age says the stored time is odd instead
    # of computing from it (a far-future one is not the oldest, nor due).
    assert (marker in html["dashboard"]) is (value < 0)


def test_far_future_delay_written_by_a_foreign_writer_keeps_the_list_up(store: Any, root: Client) -> None:
    task = make_task(store).id
    write_raw(task, run_at_ms=2**62)  # what delay_ms far in the future stores
    html = root.get(reverse(CHANGELIST), {"status": "queued"}).content.decode()
    assert task in html  # the due time is not a list column; the task's page marks it
    assert "out of range (4611686018427387904 ms)" in root.get(change_url(task)).content.decode()


def odd_progress_values() -> list[tuple[Any, str]]:
    """Values each dialect can hold in the progress column, and how the page names them."""
    if is_postgres():
        return [(float("nan"), "progress nan"), (float("inf"), "progress inf"), (float("-inf"), "progress -inf")]
    # SQLite has no NaN (it stores NULL), but it keeps infinities and text.
    return [
        (float("inf"), "progress inf"),
        (float("-inf"), "progress -inf"),
        ("abc", "progress not a number: &#x27;abc&#x27;"),
    ]


def test_nan_infinite_and_text_progress_are_shown_readably(store: Any, root: Client) -> None:
    tasks = []
    for value, shown in odd_progress_values():
        task = make_task(store, "running").id
        write_raw(task, progress=value, message="halfway <b>")
        tasks.append((task, shown))
    fine = make_task(store, "running").id
    write_raw(fine, progress=0.25)

    for task, shown in tasks:
        html = pages(root, task)
        progress = cell(html["list"], task, "progress_bar")
        assert shown in progress and "<progress" not in progress
        assert "halfway &lt;b&gt;" in progress
        assert shown in html["detail"]
    assert '<progress max="1" value="0.250">' in cell(html["list"], fine, "progress_bar")


def test_text_in_numeric_columns(store: Any, root: Client, dialect: str) -> None:
    task = make_task(store, "running").id
    odd = {"attempt": "x", "max_attempts": "", "priority": "p", "progress": "abc", "run_at_ms": "soon"}
    if dialect == "postgres":
        # PostgreSQL's types refuse the text outright, so no page can meet it there.
        for column, value in odd.items():
            with pytest.raises(DatabaseError), transaction.atomic():
                write_raw(task, **{column: value})
        pages(root, task)
        return
    write_raw(task, **odd)
    write_raw(make_task(store).id, created_at_ms="yesterday")  # the dashboard's oldest queued task

    html = pages(root, task)
    attempts = cell(html["list"], task, "status_cell")
    assert "attempt not a number: &#x27;x&#x27; / not a number: &#x27;&#x27;" in re.sub(r"<[^>]+>", "", attempts)
    assert "progress not a number: &#x27;abc&#x27;" in cell(html["list"], task, "progress_bar")
    for shown in ("not a number: &#x27;x&#x27;", "not a number: &#x27;p&#x27;", "not a time: &#x27;soon&#x27;"):
        assert shown in html["detail"]
    assert "not a time: &#x27;yesterday&#x27;" in html["dashboard"]
    # Sorting by the odd columns is SQLite's mixed-type order, not an error.
    for order in range(12):
        assert root.get(reverse(CHANGELIST), {"o": str(order)}).status_code == 200


def test_blobs_and_numbers_in_text_columns(store: Any, root: Client) -> None:
    # SQLite keeps a blob or a number as it is; PostgreSQL casts them to text
    # (a bytea's text is its hex spelling). Either way the row reaches the page.
    task = make_task(store, "running").id
    write_raw(task, name=b"\x00\xff", worker_id=7, message=b"\xfe", correlation_id=1.5, parent_id=3)
    html = pages(root, task)
    assert task in html["list"] and "cairnq-name" in cell(html["list"], task, "task_cell")
    assert re.search(r'field-worker_link.*?<div class="readonly">7</div>', html["detail"], re.S)
    assert root.get(reverse(CHANGELIST), {"q": "7"}).status_code == 200


NUL = "\x00"
JUNK_PARAMETERS = [
    {"queue": NUL},
    {"name": f"a{NUL}b"},
    {"q": NUL},
    {"q": f"task_{NUL}"},
    {"status": NUL},
    {"handler": NUL},
    {"status": "queued", "queue": f"default{NUL}"},
    {"o": NUL},
    {"o": "99.-3.x.--1"},
    {"o": "9" * 5000},
    {"p": NUL},
    {"p": "-1"},
    {"p": "9" * 5000},
    {"p": "1e9"},
    {"all": NUL},
    {"e": NUL},
]


@pytest.mark.parametrize("query", JUNK_PARAMETERS, ids=lambda query: repr(query)[:40])
def test_junk_query_parameters_never_answer_500(store: Any, root: Client, query: dict[str, str]) -> None:
    task = make_task(store).id
    response = root.get(reverse(CHANGELIST), query)
    # 200, or the admin's own redirect to "?e=1" for a parameter it refuses.
    assert response.status_code in (200, 302), response.status_code
    if response.status_code == 302:
        assert "e=1" in response["Location"]
        return
    html = response.content.decode()
    matches_nothing = any(NUL in value for key, value in query.items() if key in ("queue", "name", "q"))
    assert (task in html) is not matches_nothing
    assert NUL not in html


def test_unknown_and_nul_parameter_names_redirect_cleanly(store: Any, root: Client) -> None:
    make_task(store)
    for query in ({NUL: "x"}, {"run_at_ms__gt": NUL}, {f"queue{NUL}": "x"}):
        response = root.get(reverse(CHANGELIST), query)
        assert response.status_code in (302, 400), (query, response.status_code)


@pytest.mark.parametrize("object_id", [NUL, f"task_{NUL}", "task_" + "Z" * 5000, "../../admin", "%00", "\ufffd"])
def test_junk_object_ids_are_a_clean_not_found(store: Any, root: Client, object_id: str) -> None:
    make_task(store)
    base = f"/admin/cairnq/task/{quote(object_id, safe='')}/"
    for suffix in ("change/", "history/", "delete/"):
        response = root.get(base + suffix)
        # The admin's "does not exist" redirect (or 403 for delete, which nobody may do).
        assert response.status_code in (302, 403, 404), (suffix, response.status_code)
    for suffix in ("cancel/", "retry/"):
        response = root.post(base + suffix)
        assert response.status_code in (302, 404), (suffix, response.status_code)


def deep_json(dialect: str) -> str:
    # The deepest each database's own parser accepts (SQLite's json_valid stops
    # at 2,000 levels, PostgreSQL's jsonb at its stack limit), both past
    # Python's recursion limit of 1,000.
    depth = 2_000 if dialect == "sqlite" else 10_000
    return "[" * depth + "]" * depth


def undecodable_texts(dialect: str) -> dict[str, str]:
    texts = {
        "deep": deep_json(dialect),
        "short_deep": "[" * 1020 + "]" * 1020,  # whole in the list's payload preview
        "huge_int": '{"n": ' + "7" * 5000 + "}",
    }
    return texts


@pytest.mark.parametrize("column", ["payload", "result", "error", "metadata"])
@pytest.mark.parametrize("kind", ["deep", "short_deep", "huge_int"])
def test_undecodable_json_is_shown_marked_and_can_be_canceled(
    store: Any, root: Client, dialect: str, column: str, kind: str
) -> None:
    text = undecodable_texts(dialect)[kind]
    task = make_task(store).id
    write_raw(task, **{column: text})
    neighbour = make_task(store).id

    row = Task.objects.get(pk=task)
    html = pages(root, task)
    assert neighbour in html["list"] and task in html["list"]
    if kind == "short_deep" and not isinstance(getattr(row, column), Undecodable):
        # Python 3.11 stops at 1,000 levels; 3.12 bounds the C stack instead
        # and decodes these 1,020. Either way the pages answer (above) and
        # agree with the model: nothing is marked.
        assert "ndecodable JSON" not in html["detail"] + html["list"]
        return
    assert isinstance(getattr(row, column), Undecodable) and getattr(row, column).text == text
    if column == "payload":
        preview = cell(html["list"], task, "payload_preview")
        if "(large payload:" in preview:
            # PostgreSQL previews only payloads stored in 2,048 bytes or
            # fewer, and jsonb keeps these in more than that.
            assert dialect == "postgres"
        else:
            # A payload short enough to preview whole says it is undecodable;
            # a longer one shows its first characters, as any large payload does.
            if len(text) <= 2048:
                assert "undecodable JSON:" in preview
            assert text[:20].replace('"', "&quot;") in preview
    detail = html["detail"]
    assert "Undecodable JSON (" in detail
    raw = re.search(r'<pre class="cairnq-json cairnq-json--raw">(.*?)</pre>', detail, re.S)
    assert raw and raw.group(1) == text[:100_000].replace('"', "&quot;")
    assert ("Cut at 100000 characters" in detail) is (len(text) > 100_000)
    assert 'name="cancel"' in detail


@pytest.mark.parametrize("column", ["payload", "metadata"])
def test_undecodable_row_can_be_canceled_from_its_page(store: Any, root: Client, dialect: str, column: str) -> None:
    task = make_task(store).id
    write_raw(task, **{column: deep_json(dialect)})
    neighbour = make_task(store).id
    response = root.post(reverse("admin:cairnq_task_cancel", args=[task]), follow=True)
    assert response.status_code == 200
    assert [str(message) for message in response.context["messages"]] == ["1 canceled"]
    assert status_of(task)[0] == "canceled" and status_of(neighbour)[0] == "queued"


def test_malformed_json_past_sqlites_check(store: Any, root: Client, dialect: str) -> None:
    task = make_task(store).id
    malformed = '{"a": [1, 2'
    if dialect == "postgres":
        # jsonb parses on the way in: malformed text never reaches a row.
        with pytest.raises(DatabaseError), transaction.atomic():
            write_raw(task, payload=malformed)
        pages(root, task)
        return
    with pytest.raises(DatabaseError), transaction.atomic():
        write_raw(task, payload=malformed)  # the CHECK is on...
    write_raw_unchecked(task, "payload", malformed)  # ...and a writer with checks off gets past it
    write_raw_unchecked(task, "metadata", "not json")
    write_raw_unchecked(task, "result", "[" * 100_000 + "]" * 100_000)  # past json_valid's depth too

    html = pages(root, task)
    assert "undecodable JSON: {&quot;a&quot;: [1, 2" in cell(html["list"], task, "payload_preview")
    assert html["detail"].count("Undecodable JSON (") == 3
    assert 'name="cancel"' in html["detail"]
