"""Tell whether a database alias reaches PostgreSQL through a transaction pooler (issue 35).

A pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) lends
each transaction whichever server connection is free, so whatever a client
leaves on its session -- a prepared statement, a LISTEN -- stays on a server
connection that other clients get next. Two client connections of our own
show it through the server process ids (``pg_backend_pid()``) they see:

* connected directly, or through a pooler in session mode, a client
  connection keeps one server process for its life, and no two client
  connections share one;
* through a transaction pooler, client B's transaction usually runs on the
  server process client A's has just released (PgBouncer hands out the most
  recently released server connection first), and while B holds its
  transaction open, A's next one must run on another server process.

Either sighting proves a transaction pooler and needs nothing from the pooler
itself (no admin console, no ``SHOW``). One client alone proves nothing: an
idle PgBouncer gives a lone client the same server connection every time. A
few rounds cover a busy pooler whose other clients take the released server
connection in between. The port the server reports (``inet_server_port()``)
is not used to decide, since a Docker port mapping or a TCP proxy changes it
too, but it is reported: it is the port a direct alias would use.

Cost: two short-lived connections of the alias's own settings and at most a
dozen one-row queries (about 10 ms on one host). The alias's Django
connections are not touched, and a probe that fails decides nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections

# Rounds of the two-client sighting before concluding "no pooler".
_ROUNDS = 3
# A probe must not hang a check or a worker's start on an unreachable host.
_CONNECT_TIMEOUT_S = 3
_SERVER_PROCESS = "SELECT pg_backend_pid(), inet_server_port()"
APPLICATION_NAME = "cairnq_pooler_probe"


@dataclass(frozen=True)
class Finding:
    """What a probe of ``alias`` found."""

    alias: str
    # True only when a transaction pooler was seen; False when none was, or
    # when the probe could not tell (``evidence`` says which).
    pooled: bool
    evidence: str
    # The port PostgreSQL itself listens on, as it reports it (None over a
    # Unix socket, or when unknown).
    server_port: int | None = None


def detect(alias: str) -> Finding:
    """Probe ``alias``: does it reach PostgreSQL through a transaction pooler? SQLite: no probe."""
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        return Finding(alias, False, f"not PostgreSQL ({wrapper.vendor})")
    try:
        with _client(wrapper) as first, _client(wrapper) as second:
            finding = _observe(alias, first, second)
    except Exception as exc:  # noqa: BLE001 - a probe that fails decides nothing
        return Finding(alias, False, f"could not tell: {str(exc).strip() or type(exc).__name__}")
    configured = wrapper.settings_dict.get("PORT")
    if finding.pooled and finding.server_port and str(configured or "") not in ("", str(finding.server_port)):
        detail = f"; DATABASES says port {configured}, PostgreSQL reports port {finding.server_port}"
        return Finding(alias, True, finding.evidence + detail, finding.server_port)
    return finding


@contextlib.contextmanager
def _client(wrapper: Any) -> Iterator[Any]:
    """A psycopg connection in autocommit with ``wrapper``'s settings, closed afterwards."""
    # psycopg is optional (the postgres extra); only a PostgreSQL alias gets here.
    import psycopg

    params = wrapper.get_connection_params()
    for key in ("cursor_factory", "context", "pool"):
        params.pop(key, None)
    params["application_name"] = APPLICATION_NAME
    params.setdefault("connect_timeout", _CONNECT_TIMEOUT_S)
    conn = psycopg.connect(**params, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def _observe(alias: str, first: Any, second: Any) -> Finding:
    """Run the two-client sighting on open connections ``first`` and ``second``."""
    seen: tuple[list[int], list[int]] = ([], [])
    server_port: int | None = None

    def sighting(client: int, conn: Any) -> str | None:
        nonlocal server_port
        pid, server_port = conn.execute(_SERVER_PROCESS).fetchone()
        if pid not in seen[client]:
            seen[client].append(pid)
        return _proof(seen)

    for _ in range(_ROUNDS):
        # A's transaction ends at once (autocommit), and so does B's first.
        proof = sighting(0, first) or sighting(1, second)
        if proof is None:
            with second.transaction():
                # B holds a server process: A's next transaction cannot run on it.
                proof = sighting(1, second) or sighting(0, first)
        if proof is not None:
            return Finding(alias, True, proof, server_port)
    return Finding(alias, False, "each client connection kept one server process of its own", server_port)


def _proof(seen: tuple[list[int], list[int]]) -> str | None:
    """The sighting that proves a transaction pooler, in words, or None."""
    for pids in seen:
        if len(pids) > 1:
            return f"one client connection ran its transactions on server processes {pids[0]} and {pids[1]}"
    shared = sorted(set(seen[0]) & set(seen[1]))
    if shared:
        return f"two client connections ran on the same server process {shared[0]}"
    return None
