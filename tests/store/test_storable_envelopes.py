"""A failure is recorded whatever text the handler's exception holds.

Pins: an error envelope whose message, type or details carry NUL or a lone
surrogate (PostgreSQL's jsonb refuses the first, neither database stores the
second) is written with that text made storable, on both dialects alike,
through the single and the batched fail, instead of the write raising and
the task staying ``running`` until its lease expires.
"""

from __future__ import annotations

from typing import Any

from cairnq_django.protocol import payload
from cairnq_django.store.base import Failure, Store, SubmitSpec


def _claimed(store: Store, n: int) -> list[str]:
    for _ in range(n):
        store.submit(SubmitSpec(name="job", payload_json=payload.encode_object({})))
    rows = store.claim(["default"], "w1", limit=n)
    assert len(rows) == n
    return [row.id for row in rows]


def _envelope(text: str) -> dict[str, Any]:
    return {
        "type": f"Err{text}",
        "code": "handler_error",
        "message": f"bad {text} text",
        "retryable": False,
        "details": {"traceback": f"line {text}", f"k{text}": [text]},
    }


def test_fail_stores_nul_and_lone_surrogates_readably(store: Store) -> None:
    nul, surrogate = _claimed(store, 2)
    store.fail(nul, "w1", _envelope("\x00"), retryable=False)
    store.fail(surrogate, "w1", _envelope("\ud800"), retryable=False)

    row = store.get(nul)
    assert row is not None and row.status == "failed"
    assert row.error["message"] == "bad \\x00 text"
    assert row.error["type"] == "Err\\x00"
    assert row.error["details"] == {"traceback": "line \\x00", "k\\x00": ["\\x00"]}

    row = store.get(surrogate)
    assert row is not None and row.status == "failed"
    assert row.error["message"] == "bad ? text"
    assert row.error["details"]["traceback"] == "line ?"


def test_fail_many_records_every_failure_beside_an_unstorable_one(store: Store) -> None:
    ids = _claimed(store, 3)
    texts = ["plain", "\x00", "\udcff"]
    settled = store.fail_many(
        "w1", [Failure(i, _envelope(t), retryable=False, delay_ms=0) for i, t in zip(ids, texts)]
    )
    assert settled == dict.fromkeys(ids, "failed")
    messages = [store.get(i).error["message"] for i in ids]  # type: ignore[union-attr]
    assert messages == ["bad plain text", "bad \\x00 text", "bad ? text"]


def test_an_ordinary_envelope_is_stored_unchanged(store: Store) -> None:
    (task_id,) = _claimed(store, 1)
    envelope = _envelope("é \\u0000 literal")
    store.fail(task_id, "w1", envelope, retryable=False)
    row = store.get(task_id)
    assert row is not None and row.error == envelope
