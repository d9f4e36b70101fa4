"""Pin the command's contract: a bad flag or setting is a ``CommandError``
naming it, an undeclared resource stops start-up naming it and listing the
declared ones (``--resource`` can declare it), unapplied migrations say to run
``migrate cairnq``, the worker runs from ``call_command`` on a non-main
thread without touching the host's signal handlers, and ``--concurrency``
defaults to the CPUs the process may use, at least 2, as ``--help`` and the
docs say (issue 35)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test.utils import override_settings

import cairnq_django as cq
from cairnq_django import conf
from cairnq_django.models import Task, Worker

from .conftest import REPO

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "x"], "--concurrency"),
        (["--lease-ms", "-5"], "--lease-ms"),
        (["--max-run-ms", "0"], "--max-run-ms"),
        (["--claim-batch", "1.5"], "--claim-batch"),
        (["--claim-ahead", "-1"], "--claim-ahead"),
        (["--poll-interval-ms", ""], "--poll-interval-ms"),
        (["--max-in-flight-bytes", "0"], "--max-in-flight-bytes"),
        (["--retry-backoff-ms", "-1"], "--retry-backoff-ms"),
        (["--retry-backoff-max-ms", "soon"], "--retry-backoff-max-ms"),
        (["--drain-timeout", "-1"], "--drain-timeout"),
        (["--drain-timeout", "nan"], "--drain-timeout"),
        (["--resource", "gpu"], "--resource"),
        (["--resource", "gpu=0"], "--resource"),
        (["--queue", ""], "--queue"),
        (["--max-tasks", "0"], "--max-tasks"),
    ],
)
def test_bad_flag_is_command_error_naming_it(args: list[str], flag: str) -> None:
    with pytest.raises(CommandError, match=flag):
        call_command("cairnq_worker", *args)


def test_unknown_task_flag(cairnq_db: Any) -> None:
    with pytest.raises(CommandError, match="--task: no handler registered for 'nope'"):
        call_command("cairnq_worker", "--task", "nope", "--burst")


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("CONCURRENCY", 0),
        ("LEASE_MS", "long"),
        ("DRAIN_TIMEOUT", -1),
        ("QUEUES", "default"),
        ("RESOURCES", [1]),
    ],
)
def test_bad_setting_is_command_error_naming_it(setting: str, value: Any) -> None:
    with (
        override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}, setting: value}),
        pytest.raises(CommandError, match=f'CAIRNQ\\["{setting}"\\]'),
    ):
        call_command("cairnq_worker", "--burst")


def test_undeclared_resource_stops_start_up(cairnq_db: Any) -> None:
    # testproject's demo.fleet.openai needs its global resource declared too.
    with override_settings(CAIRNQ={"RESOURCES": {"tpu": 4}, "GLOBAL_RESOURCES": {"openai": 2}}):
        with pytest.raises(CommandError) as caught:
            call_command("cairnq_worker", "--burst")
        assert "'gpu'" in str(caught.value) and "declared resources: openai, tpu" in str(
            caught.value
        )
        # Declared on the command line instead, it runs.
        task_id = cq.submit("demo.gpu", {"ms": 1}).id
        call_command("cairnq_worker", "--burst", "--resource", "gpu=1", verbosity=0)
    assert Task.objects.get(id=task_id).status == "succeeded"


def test_unapplied_migrations_say_run_migrate(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    env = dict(subprocess_env, DATABASE_URL=f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    done = subprocess.run(
        [sys.executable, "manage.py", "cairnq_worker", "--burst"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "run manage.py migrate cairnq" in done.stderr
    assert "Traceback" not in done.stderr


def test_call_command_from_a_thread_keeps_host_signal_handlers(cairnq_db: Any) -> None:
    ids = [cq.submit("demo.noop", {"result": i}).id for i in range(5)]

    def host_handler(signum: int, frame: Any) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, host_handler)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call_command(
                "cairnq_worker", "--max-tasks", "5", "--concurrency", "2", verbosity=0
            )
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(60)
        assert not thread.is_alive()
        assert not errors, errors
        assert signal.getsignal(signal.SIGTERM) is host_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert Task.objects.filter(id__in=ids, status="succeeded").count() == 5


def test_banner_names_worker_queues_handlers_resources(
    cairnq_db: Any, start_worker: Any
) -> None:
    worker = start_worker(
        "--burst", "--queue", "default", "--queue", "other", "--concurrency", "3"
    )
    assert worker.wait() == 0
    out = worker.output()
    assert "cairnq worker worker_" in out
    assert "queues: default, other" in out
    assert "demo.batch batch=8" in out and "demo.gpu resource='gpu'" in out
    assert "resources: gpu=1" in out and "concurrency: 3" in out


# ---- the default --concurrency (docs/worker.md#concurrency) -------------------------------


def _usable_cpus() -> int:
    # Counted here, not through conf: the CPUs this process may run on.
    if hasattr(os, "process_cpu_count"):
        return int(os.process_cpu_count() or 1)
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("cpus", "default"), [(1, 2), (2, 2), (6, 6), (5000, 1024)])
def test_default_concurrency_is_the_usable_cpus_at_least_two(monkeypatch: Any, cpus: int, default: int) -> None:
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 99)  # the affinity wins over the machine's count
    assert conf.default_concurrency() == default


def test_default_concurrency_falls_back_to_the_cpu_count(monkeypatch: Any) -> None:
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert conf.default_concurrency() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert conf.default_concurrency() == 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
@pytest.mark.parametrize("pinned", [False, True])
def test_help_states_the_real_default_concurrency(subprocess_env: dict[str, str], pinned: bool) -> None:
    # A real process; pinned to one CPU (the affinity outlives exec), it
    # still gets the floor of 2. No preexec_fn: forking a threaded pytest warns.
    argv = [sys.executable, "manage.py", "cairnq_worker", "--help"]
    if pinned:
        cpu = min(os.sched_getaffinity(0))
        pin = f"import os, sys; os.sched_setaffinity(0, {{{cpu}}}); os.execv(sys.argv[1], sys.argv[1:])"
        argv = [sys.executable, "-c", pin, *argv]
    done = subprocess.run(argv, cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=60, check=True)
    expected = 2 if pinned else max(2, _usable_cpus())
    text = " ".join(done.stdout.split())
    assert f'(default CAIRNQ["CONCURRENCY"], {expected}; the CPUs this process may use, at least 2)' in text


def test_a_worker_without_the_setting_runs_at_the_default(cairnq_db: Any) -> None:
    # The test project pins CONCURRENCY to 1; a project that sets nothing gets the default.
    unset = {key: value for key, value in settings.CAIRNQ.items() if key != "CONCURRENCY"}
    with override_settings(CAIRNQ=unset):
        call_command("cairnq_worker", "--burst", verbosity=0)
    row = Worker.objects.filter(pid=os.getpid()).latest("started_at_ms")
    assert row.concurrency == conf.default_concurrency() == max(2, _usable_cpus())


def test_the_docs_state_the_default_and_the_connections_it_opens() -> None:
    worker = (REPO / "docs" / "worker.md").read_text()
    row = next(line for line in worker.splitlines() if line.startswith("| `--concurrency N` |"))
    assert "CPUs this process may use, at least 2" in row
    assert "## Concurrency" in worker
    assert "at most **3 + its concurrency** connections" in " ".join(worker.split())
    configuration = (REPO / "docs" / "configuration.md").read_text()
    assert "CPUs this process may use, at least 2" in configuration
