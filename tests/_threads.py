"""A small helper for tests that need a second client acting a little later."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections


class Later:
    """Run ``fn`` on another thread (own DB connection) after ``delay`` seconds."""

    def __init__(self, delay: float, fn: Callable[[], Any]) -> None:
        self.errors: list[BaseException] = []
        self.result: Any = None

        def body() -> None:
            try:
                time.sleep(delay)
                self.result = fn()
            except BaseException as exc:  # surfaced by join()
                self.errors.append(exc)
            finally:
                connections.close_all()

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(30)
        assert not self.thread.is_alive()
        if self.errors:
            raise self.errors[0]
        return self.result
