"""A small, realistic pipeline with local computation only.

documents -> parse (two at a time) -> embed (batches of 32 on the one "gpu")
-> index (writes the search index in the same transaction as its completion).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

import cairnq_django as cairnq

from .models import IndexedDocument

DIMENSIONS = 16


@cairnq.task("pipeline.parse", concurrency=2)
def parse(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    words = re.findall(r"[a-zA-Z']+", payload["text"].lower())
    ctx.progress(0.5, "tokenized")
    ctx.submit("pipeline.embed", {"doc_id": payload["doc_id"], "title": payload["title"], "words": words})
    return {"words": len(words)}


def _embed(words: list[str]) -> list[float]:
    # Hash each word into a fixed-size bag of words, then normalise: a stand-in
    # for a model that runs anywhere without weights.
    vector = [0.0] * DIMENSIONS
    for word in words:
        digest = hashlib.blake2b(word.encode(), digest_size=2).digest()
        vector[int.from_bytes(digest, "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [round(v / norm, 4) for v in vector]


@cairnq.task("pipeline.embed", batch=32, resource="gpu")
def embed(items: list[Any]) -> dict[str, Any]:
    results = {}
    for item in items:
        vector = _embed(item.payload["words"])
        item.submit(
            "pipeline.index",
            {"doc_id": item.payload["doc_id"], "title": item.payload["title"],
             "words": len(item.payload["words"]), "vector": vector},
        )
        results[item.task_id] = {"dimensions": len(vector)}
    return results


@cairnq.task("pipeline.index")
def index(ctx: Any, payload: dict[str, Any]) -> None:
    # The index row and the task's success commit together: an attempt whose
    # lease was lost rolls its write back, so a retry never indexes twice.
    with ctx.atomic() as done:
        IndexedDocument.objects.update_or_create(
            doc_id=payload["doc_id"],
            defaults={"title": payload["title"], "words": payload["words"], "vector": payload["vector"]},
        )
        done.result = {"indexed": payload["doc_id"]}
