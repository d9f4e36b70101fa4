"""``manage.py`` whose process has the OpenTelemetry SDK configured, its spans written as JSON lines.

Run as ``python tests/worker/_traced_worker.py cairnq_worker ARGS`` with
``SPAN_FILE`` naming the file; each finished span is one line
(``ReadableSpan.to_json``), flushed as it ends.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(os.environ["SPAN_FILE"], "a", buffering=1)  # noqa: SIM115 - open for the process's life
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    import django

    django.setup()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
