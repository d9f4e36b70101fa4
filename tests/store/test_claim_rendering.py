"""The claim statements rendered from one template per dialect send what the
hand-kept files sent (issue 34).

Pins the refactor: ``claim_snapshot.json`` was generated once from the eight
claim files per dialect and PostgreSQL's four claim functions as they stood
at f01bccd, before the templates replaced them. A rendered statement must
equal its old file once comment lines are dropped and white space folded,
under the same first line (the name ``pg_stat_activity`` shows); a function
must be the old file to the byte, since migrations 0006-0011 create it from
this text and a new body would need a new migration. For a change meant to
alter the SQL itself, rewrite the snapshot with
``python -m tests.store.test_claim_rendering`` and review its diff.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cairnq_django.store.sql_files import folder_of, load, statement, statement_names
from cairnq_django.store.sql_templates import VARIANTS, render

SNAPSHOT_FILE = Path(__file__).parent / "claim_snapshot.json"
SNAPSHOT = json.loads(SNAPSHOT_FILE.read_text("utf-8"))


def _code(text: str) -> str:
    """The statement without its comment lines, white space folded."""
    return " ".join(" ".join(line for line in text.splitlines() if not line.lstrip().startswith("--")).split())


@pytest.mark.parametrize("key", sorted(SNAPSHOT["statements"]))
def test_rendered_claim_sends_the_old_statement(key: str) -> None:
    dialect, name = key.split("/")
    expected = SNAPSHOT["statements"][key]
    assert name in statement_names(dialect)
    assert load(dialect, name).splitlines()[0] == expected["title"]
    assert _code(load(dialect, name)) == expected["code"]
    assert _code(statement(dialect, name)) == expected["code"]


@pytest.mark.parametrize("name", sorted(SNAPSHOT["functions"]))
def test_rendered_claim_function_is_the_old_file_to_the_byte(name: str) -> None:
    text = load("postgres", f"functions/{name}")
    assert _code(text) == SNAPSHOT["functions"][name]["code"]  # the readable diff, if any
    assert hashlib.sha256(text.encode()).hexdigest() == SNAPSHOT["functions"][name]["sha256"]
    assert name in statement_names("postgres", "functions")


def test_every_rendered_variant_is_pinned_and_no_hand_kept_copy_remains() -> None:
    pinned = {*SNAPSHOT["statements"], *(f"postgres/functions/{name}" for name in SNAPSHOT["functions"])}
    rendered = {f"{dialect}/{name}" for dialect, names in VARIANTS.items() for name in names}
    # PostgreSQL's claim_limited & co. are the one-line calls of the functions, still files of their own.
    assert rendered == pinned - {
        f"postgres/{name}"
        for name in ("claim_limited", "claim_limited_keyed", "claim_concurrent", "claim_concurrent_keyed")
    }
    for key in rendered:
        dialect, name = key.split("/", 1)
        # load() renders a variant before it looks for a file: a copy left beside it would drift unread.
        assert not folder_of(dialect).joinpath(f"{name}.sql").is_file(), f"{key}.sql is rendered; delete the copy"


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("-- t\n-- [one_queue]\nx\n", "never closed"),
        ("-- t\n-- [one_queue]\nx\n-- [/one_name]\n", "closes no"),
        ("-- t\n-- [one_queu]\nx\n-- [/one_queu]\n", "no variant has"),  # a typo would drop the block unseen
        ("-- t\nSELECT {nowhere}\n", "no {nowhere}"),
    ],
)
def test_a_template_mistake_fails_loudly(template: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        render("sqlite", "claim_one_queue", template)


def test_blocks_keep_their_lines_for_the_flags_they_name() -> None:
    template = "-- t\n-- [many_queues]\nA\n-- [one_name]\nB\n-- [/one_name]\n-- [/many_queues]\n-- [one_queue names]\nC\n-- [/one_queue names]\n"
    assert render("sqlite", "claim", template) == "-- t\nA\n"
    assert render("sqlite", "claim_one_name", template) == "-- t\nA\nB\n"
    assert render("sqlite", "claim_one_queue", template) == "-- t\nC\n"
    assert render("sqlite", "claim_one_queue_one_name", template) == "-- t\n"


def _snapshot() -> dict[str, dict[str, dict[str, str]]]:
    """The snapshot of the statements as they render now."""
    statements = {
        f"{dialect}/{name}": {"title": load(dialect, name).splitlines()[0], "code": _code(load(dialect, name))}
        for dialect, name in (key.split("/") for key in SNAPSHOT["statements"])
    }
    functions = {}
    for name in SNAPSHOT["functions"]:
        text = load("postgres", f"functions/{name}")
        functions[name] = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "code": _code(text)}
    return {"functions": functions, "statements": statements}


if __name__ == "__main__":  # rewrite the snapshot after a change meant to alter the SQL (see above)
    SNAPSHOT_FILE.write_text(json.dumps(_snapshot(), indent=1, sort_keys=True) + "\n")
