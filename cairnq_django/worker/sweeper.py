"""Run the ``CAIRNQ["RETENTION"]`` sweep from a running worker (protocol 4.15).

The thread sleeps first, then sweeps every ``RETENTION_INTERVAL_MS``, forever:
a failed sweep is logged and the next one still runs. It has its own
connection, so a long purge never delays claims or heartbeats.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from . import _db

if TYPE_CHECKING:
    from ..retention import PurgeRule
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")


class Sweeper:
    """The retention thread; started only when retention rules are configured."""

    def __init__(
        self, store: Store, *, interval_ms: int, application_name: str
    ) -> None:
        from ..retention import configured_rules

        if (
            isinstance(interval_ms, bool)
            or not isinstance(interval_ms, int)
            or interval_ms < 1
        ):
            raise ImproperlyConfigured(
                f'CAIRNQ["RETENTION_INTERVAL_MS"] must be an integer >= 1, got {interval_ms!r}'
            )
        self.rules: list[PurgeRule] = configured_rules()
        self.store = store
        self.interval = interval_ms / 1000
        self.application_name = application_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.rules:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"{self.application_name}:retention", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        from ..retention import sweep

        _db.tag_thread(self.store.alias, self.application_name)
        try:
            while not self._stop.wait(self.interval):
                _db.drop_if_broken(self.store.alias)
                try:
                    deleted = sweep(
                        self.store, rules=self.rules, should_stop=self._stop.is_set
                    )
                except Exception as exc:  # noqa: BLE001 - the next sweep still runs
                    logger.error("retention sweep failed: %s", exc)
                    _db.close_quietly(self.store.alias)
                    continue
                if deleted:
                    logger.info("retention sweep purged %d task(s)", deleted)
        finally:
            _db.close_quietly(self.store.alias)
