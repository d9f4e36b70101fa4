"""COPY text fields: what the PostgreSQL bulk submit sends for each value."""

from __future__ import annotations

import pytest

from cairnq_django.store.postgres.copy_text import NULL, text


def test_none_is_the_null_marker() -> None:
    assert text(None) == NULL == "\\N"


@pytest.mark.parametrize("value", ["plain", "with spaces", "é ✓ \U0001f600", '{"json":[1,2]}', ""])
def test_printable_text_without_backslashes_is_sent_as_is(value: str) -> None:
    assert text(value) is value


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("a\tb", "a\\tb"),
        ("a\nb", "a\\nb"),
        ("a\rb", "a\\rb"),
        ("a\\b", "a\\\\b"),
        ("\\N", "\\\\N"),  # the text backslash-N, not NULL
        ("\\.", "\\\\."),  # not the end-of-data marker
        ('{"s":"q\\"t"}', '{"s":"q\\\\"t"}'),  # a JSON escape keeps its backslash
        ("vt\x0b nbsp\u00a0", "vt\x0b nbsp\u00a0"),  # unprintable, but not special to COPY
    ],
)
def test_the_four_special_characters_are_escaped_and_nothing_else(value: str, field: str) -> None:
    assert text(value) == field
