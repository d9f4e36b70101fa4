"""Task and worker ids: ``task_`` / ``worker_`` + a ULID (protocol 2.3).

Pins: the ULID's layout (48-bit milliseconds, then 80 random bits, Crockford
base32, 26 digits) against a digit-by-digit reference encoder, including the
extremes, and that ids sort by their millisecond.
"""

from __future__ import annotations

import os
from unittest import mock

from cairnq_django.protocol import ids

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def reference_ulid(ms: int, randomness: bytes) -> str:
    value = ms << 80 | int.from_bytes(randomness, "big")
    return "".join(CROCKFORD[(value >> (5 * (25 - i))) & 31] for i in range(26))


def test_ulid_matches_the_reference_encoding() -> None:
    cases = [(0, bytes(10)), ((1 << 48) - 1, b"\xff" * 10), (1_764_000_000_000, bytes(range(10)))]
    cases += [(int.from_bytes(os.urandom(6), "big"), os.urandom(10)) for _ in range(500)]
    for ms, randomness in cases:
        with mock.patch("cairnq_django.protocol.ids.os.urandom", return_value=randomness):
            assert ids.ulid(ms) == reference_ulid(ms, randomness)


def test_ids_have_their_prefix_and_sort_by_millisecond() -> None:
    assert ids.task_id().startswith("task_") and len(ids.task_id()) == 31
    assert ids.worker_id().startswith("worker_")
    assert ids.ulid(1000) < ids.ulid(1001)
    assert ids.ulid(0)[0] == "0" and ids.ulid((1 << 48) - 1)[0] == "7"


def test_ids_made_in_bulk_match_the_reference_encoding() -> None:
    ms = int.from_bytes(os.urandom(6), "big")
    randomness = os.urandom(10 * 300)
    with mock.patch("cairnq_django.protocol.ids.os.urandom", return_value=randomness):
        made = ids.ulids(300, ms)
    assert made == [reference_ulid(ms, randomness[i : i + 10]) for i in range(0, 3000, 10)]
    bulk = ids.task_ids(1000)
    assert len(set(bulk)) == 1000 and all(t.startswith("task_") and len(t) == 31 for t in bulk)


def test_ids_made_in_bulk_are_handed_out_in_ascending_order() -> None:
    # Each is a fresh ULID; only the order is chosen, so a batch's rows reach
    # the indexes that end in the id in order (see ids.task_ids).
    bulk = ids.task_ids(500)
    assert bulk == sorted(bulk) and len(set(bulk)) == 500
    assert len({t[5:15] for t in bulk}) == 1  # one millisecond for the batch
