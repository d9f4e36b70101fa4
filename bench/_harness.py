"""Process plumbing for the harness: driver clients, worker processes, the UDP probe, /proc.

Everything here runs in the harness's own interpreter (the repository's
virtualenv); peers run in theirs and talk back through ``peers/_wire.py``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Self

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# The tree whose cairnq_django is measured: this repository unless bench/compare.py
# points the run at another commit's worktree (the harness itself stays this one).
CODE = Path(os.environ.get("CAIRNQ_BENCH_CODE") or REPO).resolve()
PEERS = BENCH / "peers"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def now() -> float:
    """Return ``CLOCK_MONOTONIC`` seconds, the clock every peer reports in."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def peer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment every peer process gets: ``bench`` and ``bench/peers`` importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH), str(PEERS), str(CODE)])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def process_cpu_seconds(pid: int | str) -> float:
    """Return user + system CPU time process ``pid`` used so far (utime and stime of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class PeerError(RuntimeError):
    """A peer's driver reported a failure or died."""


class Client:
    """A peer's JSON-lines driver process (``<peer>.py client ...``)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        # Held for the driver's lifetime and closed in close().
        self._err = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=peer_env(env),
            cwd=str(PEERS),
            text=True,
            bufsize=1,
        )

    def call(self, op: str, timeout: float = 600, **args: Any) -> Any:
        """Send one command and return its result (raise ``PeerError`` on failure)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"{op}: driver exited ({self.proc.poll()}); see {self.log}: {tail(self.log)}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise PeerError(f"{op}: {answer['error']}")
        return answer["result"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Worker:
    """A peer's worker, run as a real separate process."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        # Held for the worker's lifetime and closed in stop().
        self._out = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, stdout=self._out, stderr=subprocess.STDOUT, env=peer_env(env), cwd=str(PEERS), start_new_session=True
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 15.0) -> int:
        """Send SIGTERM, wait ``grace`` seconds, then SIGKILL; return the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        return self.proc.returncode

    def cpu_seconds(self) -> float:
        """Return user + system CPU time the worker used so far."""
        return process_cpu_seconds(self.pid)

    def memory(self) -> dict[str, float]:
        """Return the worker's resident set now and at its peak, in MB."""
        out: dict[str, float] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
        return {"rss_mb": out.get("VmRSS", 0.0), "peak_mb": out.get("VmHWM", 0.0)}


class Probe:
    """The UDP listener handlers report their start to (see ``peers/_wire.started``)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.events: queue.Queue[tuple[str, float, int]] = queue.Queue()
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            data = self.sock.recv(512).decode().split()
            self.events.put((data[0], float(data[1]), int(data[2])))

    def clear(self) -> None:
        while not self.events.empty():
            self.events.get_nowait()

    def wait(self, tag: str | None = None, timeout: float = 60.0) -> float:
        """Return the start time of the next report (with ``tag``, if given)."""
        deadline = now() + timeout
        while True:
            left = deadline - now()
            if left <= 0:
                raise TimeoutError(
                    f"no handler start{'' if tag is None else ' for trial ' + tag} within {timeout:.0f}s"
                )
            try:
                got, at, _count = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if tag is None or got == tag:
                return at


def tail(path: Path, lines: int = 6) -> str:
    """Return the last lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
