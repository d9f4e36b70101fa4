"""End the claim loop's idle wait early when work may have arrived.

PostgreSQL: one dedicated connection LISTENs on ``cairnq_queued`` and wakes the
loop only for a payload naming one of the worker's queues. It connects through
``CAIRNQ["LISTEN_DATABASE"]`` when set; under ``TRANSACTION_POOLING`` without
it there is no session to LISTEN in, and the worker only polls. Nor does it
LISTEN over an alias found at start to go through a transaction pooler
(``past_poolers``): it polls and says why. A refused or lost
LISTEN connection is retried with backoff; polling stays the fallback
throughout and never depends on it.

SQLite has no push channel. Its connections keep a counter that moves when
another connection commits (``PRAGMA data_version``, a read of the shared WAL
index, no disk access), and that counter decides. On Linux the wait sleeps
until the kernel reports a write to the ``-wal`` file (inotify, see
wal_watch.py), so an idle worker costs nothing between commits. A write is
not yet a visible commit (the writer flushes, then publishes it in the WAL
index), so after a write the counter is read again at growing intervals
until it moves: a probe woken by the write alone could find nothing yet and
leave the task to the poll interval. Elsewhere the wait reads the counter
every few milliseconds instead. Either way it probes the database only when
the counter moves or the poll interval ends.
"""

from __future__ import annotations

import logging
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

from django.db import DatabaseError, connections

from ..protocol.backoff import Backoff
from ..store.postgres import pooler
from .wal_watch import WalWatch

logger = logging.getLogger("cairnq_django.worker")

# A driver command on the listener's own connection; the channel name is the
# protocol's literal and takes no parameters, and SQLite has no counterpart,
# so it is not a per-dialect statement file.
_LISTEN = "LISTEN cairnq_queued"
# A refused or lost LISTEN connection is retried after 1 s doubling to 30 s;
# polling covers the gap meanwhile.
_RELISTEN_FIRST_S = 1.0
_RELISTEN_MAX_S = 30.0
_SLICE = 0.1
# How often an idle SQLite worker reads its commit counter where it cannot
# watch the WAL file. Pickup waits half of it on average, and each check (a
# timed wake-up, two file locks and a stat) costs CPU, so this trades pickup
# latency against an idle worker's share of a core.
_COMMIT_CHECK = 0.020
# After a write to the WAL the counter is read again after these pauses until
# it moves: the commit is published once the writer's flush ends.
_PUBLISH_RECHECKS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064)


class Waker:
    """The idle wait: returns on a wake-up, a stop request, or the timeout."""

    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        self.event = threading.Event()
        # Whether a wake-up since the last arm() was a notification that work
        # arrived (LISTEN), as opposed to a freed slot: only an empty claim
        # after a notification means another worker took the task.
        self.notified = False

    def arm(self) -> None:
        """Forget earlier wake-ups; call right before a claim."""
        self.notified = False
        self.event.clear()

    def wake(self) -> None:
        self.event.set()

    def notify(self) -> None:
        """Wake up because work arrived in one of the worker's queues."""
        self.notified = True
        self.wake()

    def wait(self, timeout: float, extra: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not self.should_stop():
            left = deadline - time.monotonic()
            if left <= 0 or (extra is not None and extra()):
                return
            if self.event.wait(min(left, _SLICE)):
                return

    def hold_off(self, seconds: float) -> None:
        """Sleep through wake-ups for ``seconds`` (a stop request still ends it).

        Wake-ups that land meanwhile stay set, so the wait after this returns
        at once if any came: many of them become one claim.
        """
        deadline = time.monotonic() + seconds
        while not self.should_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, _SLICE))

    def describe(self, poll_ms: int) -> str:
        """What ends an idle wait early, for the worker's banner."""
        return f"polling every {poll_ms} ms"

    def start(self) -> None:
        """Start any background listener (none by default)."""

    def stop(self) -> None:
        """Stop any background listener."""


class CommitWaker(Waker):
    """SQLite: notice other connections' commits by the connection's ``data_version``.

    The counter is per connection and ignores the connection's own commits,
    so the loop's own claims never wake it; commits of the worker's other
    connections (settlements, heartbeats) and of every other process do.
    Reads run on the calling thread's connection (the claim loop's), and so
    do ``start``, ``arm``, ``wait`` and ``stop``; ``wake`` may come from any
    thread.

    After ``start`` (on Linux) the wait sleeps on a WAL watch and on a pipe
    that ``wake`` writes to; before it, or where the watch cannot be had,
    the counter is polled every ``_COMMIT_CHECK``.
    """

    def __init__(self, should_stop: Callable[[], bool], alias: str) -> None:
        super().__init__(should_stop)
        self.alias = alias
        self.seen = self._version()
        self.watch: WalWatch | None = None
        # (read end, write end); the lock keeps a late wake() off a closed descriptor.
        self._pipe: tuple[int, int] | None = None
        self._pipe_lock = threading.Lock()

    def describe(self, poll_ms: int) -> str:
        return f"commits to the database file, else polling every {poll_ms} ms"

    def _version(self) -> tuple[int, int] | None:
        # Paired with the driver connection's identity: a reopened connection
        # counts from its own start (a spurious wake-up at worst).
        connection = connections[self.alias]
        try:
            connection.ensure_connection()
            raw = connection.connection
            return id(raw), raw.execute("PRAGMA data_version").fetchone()[0]
        except (DatabaseError, sqlite3.Error):
            return None  # unreachable for now: the poll interval still ends the wait

    def _database_file(self) -> str | None:
        """The main database's file as SQLite opened it (None for a memory database)."""
        connection = connections[self.alias]
        try:
            connection.ensure_connection()
            rows = connection.connection.execute("PRAGMA database_list").fetchall()
        except (DatabaseError, sqlite3.Error):
            return None
        return next((row[2] for row in rows if row[1] == "main" and row[2]), None)

    def start(self) -> None:
        path = self._database_file()
        watch = WalWatch.open(path) if path else None
        if watch is None:
            return
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        with self._pipe_lock:
            self.watch, self._pipe = watch, (read_end, write_end)
        self.arm()

    def stop(self) -> None:
        with self._pipe_lock:
            watch, pipe = self.watch, self._pipe
            self.watch = self._pipe = None
        if watch is not None:
            watch.close()
        if pipe is not None:
            for fd in pipe:
                os.close(fd)

    def wake(self) -> None:
        super().wake()
        with self._pipe_lock:
            if self._pipe is not None:
                try:
                    os.write(self._pipe[1], b"w")
                except BlockingIOError:
                    pass  # the pipe is full: it is readable already

    def arm(self) -> None:
        # Runs before every claim: the pipe holds a byte only after a wake(),
        # which sets the event first, so a quiet claim makes no extra read.
        pipe = self._pipe
        if pipe is not None and self.event.is_set():
            _empty(pipe[0])
        super().arm()
        self.seen = self._version()

    def wait(self, timeout: float, extra: Callable[[], bool] | None = None) -> None:
        watch, pipe = self.watch, self._pipe
        if watch is None or pipe is None:
            self._poll(timeout, extra)
            return
        deadline = time.monotonic() + timeout
        # A write already reported (since the last wait, the loop's own claim
        # included) may be a commit not yet published: look again shortly.
        rechecks = iter(_PUBLISH_RECHECKS if watch.drain() else ())
        check_at = time.monotonic() + next(rechecks, _SLICE)
        while not self.should_stop():
            now = time.monotonic()
            left = deadline - now
            if left <= 0 or (extra is not None and extra()) or self.event.is_set():
                return
            ready, _, _ = select.select([watch.fd, pipe[0]], [], [], max(0.0, min(left, check_at - now)))
            if pipe[0] in ready:
                _empty(pipe[0])  # arm() skips a byte that came as it cleared the event
                return
            if watch.fd in ready and watch.drain():
                rechecks = iter(_PUBLISH_RECHECKS)
            elif time.monotonic() < check_at:
                # A write to another file of the directory (the watch covers
                # it all): nothing of ours to read, so a busy neighbour costs
                # an idle worker no reads.
                continue
            # Also on a plain timeout: a commit the watch did not report
            # (none is known to go unreported) waits one slice at most.
            if self._version() != self.seen:
                return
            check_at = time.monotonic() + next(rechecks, _SLICE)

    def _poll(self, timeout: float, extra: Callable[[], bool] | None) -> None:
        deadline = time.monotonic() + timeout
        while not self.should_stop():
            left = deadline - time.monotonic()
            if left <= 0 or (extra is not None and extra()):
                return
            if self.event.wait(min(left, _COMMIT_CHECK)):
                return
            if self._version() != self.seen:
                return


def _empty(fd: int) -> None:
    """Read a non-blocking descriptor until nothing is left."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def past_poolers(alias: str | None) -> str | None:
    """``alias`` to LISTEN over, or None (poll) if it goes through a transaction pooler.

    LISTEN subscribes a session. Through a transaction pooler that is a
    server connection the pooler lends to other clients next, which stays
    subscribed after this worker is gone (transaction mode resets nothing),
    and the pooler then warns at every NOTIFY. Probed once, at start.
    """
    if alias is None:
        return None
    finding = pooler.detect(alias)
    if not finding.pooled:
        return alias
    logger.warning(
        "not listening for new tasks over database %r: it goes through a transaction pooler (%s), "
        "where LISTEN would stay on a server connection other clients get; polling instead. Point "
        'CAIRNQ["LISTEN_DATABASE"] at a direct alias (cairnq.E025, docs/deployment.md#connection-poolers)',
        alias,
        finding.evidence,
    )
    return None


class PgWaker(Waker):
    """PostgreSQL: LISTEN on a dedicated connection, filtered by the worker's queues."""

    def __init__(
        self,
        should_stop: Callable[[], bool],
        alias: str,
        queues: Sequence[str],
        application_name: str,
    ) -> None:
        super().__init__(should_stop)
        self.alias = alias
        self.queues = frozenset(queues)
        self.application_name = application_name
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"{application_name}:listen", daemon=True
        )
        self.listening = threading.Event()

    def describe(self, poll_ms: int) -> str:
        return f"NOTIFY via {self.alias!r}, else polling every {poll_ms} ms"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _connect(self):  # type: ignore[no-untyped-def]
        # psycopg is optional (the postgres extra), and this module loads in SQLite workers too.
        import psycopg

        params = connections[self.alias].get_connection_params()
        for key in ("cursor_factory", "context", "pool"):
            params.pop(key, None)
        params["application_name"] = self.application_name[:63]
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(_LISTEN)
        return conn

    def _run(self) -> None:
        retries = Backoff(_RELISTEN_FIRST_S, _RELISTEN_MAX_S, jitter=False)
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                self.listening.set()
                retries.reset()
                # Work may have arrived while the listener was down.
                self.wake()
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        if note.payload in self.queues:
                            self.notify()
            except Exception as exc:  # noqa: BLE001 - LISTEN never affects correctness
                self.listening.clear()
                if self._stop.is_set():
                    break
                delay = retries.next_delay()
                logger.warning(
                    "LISTEN connection failed (%s); polling, retrying in %.0f s",
                    exc,
                    delay,
                )
                self._stop.wait(delay)
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception as exc:  # noqa: BLE001
                        logger.debug("closing the LISTEN connection failed: %s", exc)
