"""The batch open in this context (``batch.py``), read by every submit.

Apart from ``batch.py`` so ``client/submit.py``, loaded with the package
before the models, can read it: this module imports nothing. A
``ContextVar``: a thread or an asyncio task started elsewhere does not see
another's batch, and a submit with no batch open pays one ``get()``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

# The open ``Batch``, or None.
current_batch: ContextVar[Any] = ContextVar("cairnq_django_batch", default=None)
