"""Statements rendered from one template per family (``store/<dialect>/sql/<family>.template.sql``).

The claim is written once per dialect and fleet-limited claims once more:
each variant a caller loads by name (``claim_one_queue``,
``functions/claim_limited_keyed``, ...) is its template with the blocks its
flags choose and its slots filled in. Two marks, both plain SQL:

* ``-- [flag ...]`` and ``-- [/flag ...]``, each on a line of its own: the lines
  between stay when the variant has every flag named; blocks nest;
* ``{slot}``: the variant's text for it (``SLOTS``, by flag); ``{name}`` is the
  statement's own name.

Every other line is kept as written, comments included.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Variant(NamedTuple):
    template: str  # <template>.template.sql in the dialect's sql/ folder
    flags: frozenset[str]


def _variants(template: str, **flags_by_name: str) -> dict[str, Variant]:
    folder, _, _ = template.rpartition("/")
    prefix = f"{folder}/" if folder else ""
    return {f"{prefix}{name}": Variant(template, frozenset(flags.split())) for name, flags in flags_by_name.items()}


# The plain claims: several queues (a lateral join over them) or one, any of a name list or one name.
_CLAIMS = {
    "claim": "many_queues names",
    "claim_one_name": "many_queues one_name",
    "claim_one_queue": "one_queue names",
    "claim_one_queue_one_name": "one_queue one_name",
}
# Fleet-limited claims: counted from the start log (limited) or from the running tasks (concurrent,
# global_concurrency alone), per name or per key. "admits": the draw picks the admitted ids, then locks them;
# PostgreSQL's unkeyed concurrent claim locks each queue's head as it reads it instead.
_LIMITED = {
    "claim_limited": "limited unkeyed admits",
    "claim_limited_keyed": "limited keyed admits",
    "claim_concurrent": "concurrent unkeyed",
    "claim_concurrent_keyed": "concurrent keyed admits",
}

VARIANTS: dict[str, dict[str, Variant]] = {
    "postgres": {**_variants("claim", **_CLAIMS), **_variants("functions/claim_limited", **_LIMITED)},
    "sqlite": {**_variants("claim", **_CLAIMS), **_variants("claim_limited", **_LIMITED)},
}

# (dialect, template) -> flag -> the text of each {slot} the flag sets.
SLOTS: dict[tuple[str, str], dict[str, dict[str, str]]] = {
    ("postgres", "claim"): {
        # The cursor (claim_cursor.py) of the lateral join's queue, or of the one queue.
        "many_queues": {
            "columns": "ctid, id, priority, run_at_ms",
            "queue": "wanted.queue",
            "from_priority": "wanted.from_priority",
            "from_floor": "(wanted.from_run_at_ms, wanted.from_id)",
        },
        "one_queue": {
            "columns": "ctid",
            "queue": "%(queue)s",
            "from_priority": "%(from_priority)s",
            "from_floor": "(%(from_run_at_ms)s, %(from_id)s::text)",
        },
        "names": {"name_test": "(%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))"},
        "one_name": {"name_test": "name = %(name)s AND name BETWEEN %(name)s AND %(name)s"},
    },
    ("postgres", "functions/claim_limited"): {
        # The rows the keyed claims' first read takes, and a key's room when nothing counted it.
        "limited": {"ahead_rows": "p_scan", "fresh_room": "p_fresh_room"},
        "concurrent": {"ahead_rows": "p_head", "fresh_room": "p_concurrency"},
    },
    ("sqlite", "claim_limited"): {
        "limited": {"candidate_rows": "%(scan)s", "ahead_rows": "%(scan)s"},
        "concurrent": {"candidate_rows": "%(limit)s", "ahead_rows": "%(head)s"},
    },
}

_MARK = re.compile(r"--\s*\[(/?)([a-z_ ]+)\]")
_SLOT = re.compile(r"\{(\w+)\}")


def render(dialect: str, name: str, template: str) -> str:
    """The text of statement ``name``: ``template`` (its template's text) for its flags."""
    variant = VARIANTS[dialect][name]
    known = set().union(*(v.flags for v in VARIANTS[dialect].values() if v.template == variant.template))
    slots = {"name": name.rpartition("/")[2]}
    for flag, values in SLOTS.get((dialect, variant.template), {}).items():
        if flag in variant.flags:
            slots.update(values)

    def fill(match: re.Match[str]) -> str:
        if match[1] not in slots:
            raise ValueError(f"{variant.template}.template.sql: no {{{match[1]}}} for {name}")
        return slots[match[1]]

    kept: list[str] = []
    open_blocks: list[tuple[str, bool]] = []  # (the mark's words, whether its lines stay)
    for number, line in enumerate(template.splitlines(), 1):
        mark = _MARK.fullmatch(line.strip())
        if mark is None:
            if all(keep for _, keep in open_blocks):
                kept.append(_SLOT.sub(fill, line))
            continue
        closing, words = mark[1] == "/", mark[2]
        where = f"{variant.template}.template.sql:{number}"
        if unknown := set(words.split()) - known:  # a misspelt flag would drop its block unseen
            raise ValueError(f"{where}: no variant has {sorted(unknown)}")
        if not closing:
            open_blocks.append((words, set(words.split()) <= variant.flags))
        elif not open_blocks or open_blocks.pop()[0] != words:
            raise ValueError(f"{where}: [/{words}] closes no [{words}]")
    if open_blocks:
        raise ValueError(f"{variant.template}.template.sql: [{open_blocks[-1][0]}] is never closed")
    return "\n".join(kept) + "\n"
