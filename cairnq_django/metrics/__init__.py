"""Prometheus metrics: the queue gauges view (``queue_metrics``) and each worker's own endpoint.

``queue_metrics`` needs nothing beyond Django; the worker endpoint
(``cairnq_worker --metrics-port``, ``worker_endpoint.py``) needs the
``cairnq-django[metrics]`` extra and is imported only by that flag.
"""

from __future__ import annotations

from .view import queue_metrics

__all__ = ["queue_metrics"]
