"""Run the demo pipeline end to end: clear earlier runs' tasks, submit
documents, run a real worker process, draw a progress bar, report the
pipeline's time as soon as its tasks have ended, stop the worker gracefully,
then print a summary and how to open the admin."""

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


# The demo's worker: four calls in flight, so parse (two at a time), embed
# (one batch on the "gpu") and index all run at once.
CONCURRENCY = 4
# On SIGTERM the worker waits this long for calls in flight, then hands back
# what still runs (queued again, never left running); the demo waits for that
# and a margin, and kills only a worker that hangs past both.
DRAIN_TIMEOUT_S = 10.0
STOP_MARGIN_S = 20.0


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
        cleared = self._clear_earlier_runs()
        if cleared:
            self.stdout.write(f"Cleared {cleared} tasks of earlier demo runs.")
        # Milliseconds: two runs within one second get their own ids.
        run = f"demo-{time.time_ns() // 1_000_000}"
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
        names = [arg for stage in STAGES for arg in ("--task", stage)]
        with log_path.open("w") as log:
            worker = subprocess.Popen(
                [sys.executable, "manage.py", "cairnq_worker", "--concurrency", str(CONCURRENCY),
                 "--drain-timeout", f"{DRAIN_TIMEOUT_S:g}", *names],
                cwd=Path(settings.BASE_DIR).parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the terminal reaches the demo
                # only, which then stops the worker with one SIGTERM (a second
                # signal would make it exit without settling what it holds).
                start_new_session=True,
            )
            try:
                self._follow(run, documents * len(STAGES), started + timeout, worker)
                # The pipeline's time: its tasks have ended; the worker's stop is not part of it.
                seconds = time.monotonic() - started
                self.stdout.write(self.style.SUCCESS(f"\nPipeline finished in {seconds:.1f} s"))
            except KeyboardInterrupt:
                self.stdout.write("")
                raise CommandError("interrupted (the next run clears this run's tasks)") from None
            finally:
                self._stop(worker)
        self._summary(run, log_path)

    def _clear_earlier_runs(self) -> int:
        """Delete earlier runs' tasks and the search index: each run measures only its own.

        An interrupted run's tasks would still be queued (or held by a worker
        that is gone, until its lease expires) and share this run's worker.
        """
        deleted = Task.objects.filter(name__in=STAGES).delete()[0]
        IndexedDocument.objects.all().delete()
        return deleted

    def _stop(self, worker: subprocess.Popen[bytes]) -> None:
        """SIGTERM, then wait while the worker settles (or hands back) what it holds."""
        if worker.poll() is not None:
            return
        self.stdout.write("Stopping the worker (SIGTERM; it settles what it holds)...", ending="")
        self.stdout.flush()
        begun = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=DRAIN_TIMEOUT_S + STOP_MARGIN_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            self.stdout.write("")
            raise CommandError(
                f"the worker did not stop within {DRAIN_TIMEOUT_S + STOP_MARGIN_S:g} s of SIGTERM and was "
                "killed: a task it held stays running until its lease expires; see var/demo-worker.log"
            ) from None
        self.stdout.write(f" stopped in {time.monotonic() - begun:.1f} s (exit code {code}).")

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
            time.sleep(0.1)

    def _summary(self, run: str, log_path: Path) -> None:
        rows = Task.objects.filter(correlation_id=run).values_list("name", "status")
        by_stage = Counter(rows)
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
