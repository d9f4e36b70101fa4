"""The demo's search index: what the pipeline's last stage writes."""

from __future__ import annotations

from django.db import models


class IndexedDocument(models.Model):
    doc_id = models.CharField(max_length=64, unique=True)
    title = models.CharField(max_length=200)
    words = models.PositiveIntegerField()
    # A tiny embedding, stored as JSON so the demo needs no vector extension.
    vector = models.JSONField()
    indexed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.title
