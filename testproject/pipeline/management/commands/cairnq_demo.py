"""Run the demo pipeline end to end: submit documents, run a real worker
process, draw a progress bar, then print a summary and how to open the admin."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

import cairnq_django as cairnq
from cairnq_django.models import Task

from ...models import IndexedDocument

STAGES = ("pipeline.parse", "pipeline.embed", "pipeline.index")
WORDS = (
    "queue lease worker batch retry durable commit index vector embed parse token "
    "django model admin signal budget resource heartbeat cancel result payload"
).split()


def _document(rng: random.Random, number: int) -> dict[str, Any]:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 400)))
    return {"doc_id": f"doc-{number:04d}", "title": f"Document {number}", "text": text}


# The printed way to the admin. The project runs with DEBUG off, and then
# runserver serves no static files: the admin would come up unstyled.
RUNSERVER = "DJANGO_DEBUG=1 .venv/bin/python manage.py runserver"


class Command(BaseCommand):
    help = "Run the demo pipeline (parse -> embed -> index) with a real cairnq worker."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--documents", type=int, default=200, help="documents to process")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds before giving up")

    def handle(self, *args: Any, documents: int, timeout: float, **options: Any) -> None:
        if documents < 1:
            raise CommandError("--documents must be at least 1")
        run = f"demo-{int(time.time())}"
        rng = random.Random(7)
        started = time.monotonic()
        cairnq.submit_many(
            [
                {"name": "pipeline.parse", "payload": _document(rng, n), "correlation_id": run}
                for n in range(documents)
            ]
        )
        self.stdout.write(f"Submitted {documents} documents (correlation id {run}).")

        log_path = Path(settings.BASE_DIR).parent / "var" / "demo-worker.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            worker = subprocess.Popen(
                [sys.executable, "manage.py", "cairnq_worker", "--concurrency", "4"],
                cwd=Path(settings.BASE_DIR).parent,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                self._follow(run, documents * len(STAGES), started + timeout, worker)
            finally:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()
        self._summary(run, time.monotonic() - started, log_path)

    def _follow(self, run: str, expected: int, deadline: float, worker: subprocess.Popen[bytes]) -> None:
        width = 40
        while True:
            tasks = Task.objects.filter(correlation_id=run)
            done = tasks.terminal().count()
            filled = width * done // expected
            bar = "#" * filled + "-" * (width - filled)
            self.stdout.write(f"\r[{bar}] {done}/{expected} tasks", ending="")
            self.stdout.flush()
            if done >= expected:
                self.stdout.write("")
                return
            if worker.poll() is not None:
                self.stdout.write("")
                raise CommandError(f"the worker exited with code {worker.returncode}; see var/demo-worker.log")
            if time.monotonic() > deadline:
                self.stdout.write("")
                raise CommandError("the demo did not finish in time; see var/demo-worker.log")
            time.sleep(0.2)

    def _summary(self, run: str, seconds: float, log_path: Path) -> None:
        rows = Task.objects.filter(correlation_id=run).values_list("name", "status")
        by_stage = Counter(rows)
        self.stdout.write(self.style.SUCCESS(f"\nPipeline finished in {seconds:.1f} s"))
        for stage in STAGES:
            counts = ", ".join(f"{n} {status}" for (name, status), n in sorted(by_stage.items()) if name == stage)
            self.stdout.write(f"  {stage:<16} {counts}")
        self.stdout.write(f"  search index: {IndexedDocument.objects.count()} documents")
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", "admin@example.com", "admin")
        self.stdout.write(
            "\nLook at what happened in the admin (DEBUG on, so runserver serves its CSS):\n"
            f"  {RUNSERVER}\n"
            "  open http://127.0.0.1:8000/admin/cairnq/task/  (user admin, password admin;\n"
            "  a local demo account on the demo database only)\n"
            f"Worker log: {log_path}"
        )
