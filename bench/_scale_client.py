"""The client processes of ``fleet_scale.py``: a submitter and a claim probe, on the bench project.

    python bench/_scale_client.py submit --n N --name NAME   # N submits, one at a time
    python bench/_scale_client.py claim                      # time store claims of one row each

Each reads one line on stdin (the harness's "go", so every client starts at
once), does its work (the claim probe: until a second line or ``--seconds``)
and prints one JSON line: counts, errors, timings. Errors
are counted, not raised: a run reports "no client error" only if it saw none.
The database settings come from the environment (``ours_project.settings``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback

os.environ["DJANGO_SETTINGS_MODULE"] = "ours_project.settings"


def submit(n: int, name: str, every_atomic: int) -> dict[str, object]:
    from django.db import connection, transaction

    import cairnq_django as cairnq

    errors: list[str] = []
    ok = 0
    start = time.monotonic()
    for i in range(n):
        try:
            if every_atomic and i % every_atomic == 0:
                # Some submits ride on a caller's transaction, as a view's would.
                with transaction.atomic():
                    cairnq.submit(name, {"i": i}, queue="bench")
            else:
                cairnq.submit(name, {"i": i}, queue="bench")
            ok += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            # As Django does at the end of a request: drop a broken connection,
            # so the next submit opens a new one instead of failing too.
            connection.close()
    return {"submitted": ok, "errors": len(errors), "first_errors": errors[:5], "seconds": time.monotonic() - start}


def claim(seconds: float, interval: float) -> dict[str, object]:
    # The store calls a worker's poll makes, for one row, then settle it at
    # once: the probe competes with the workers for the same rows and index.
    # As a worker does, it reuses its plans and looks for leaseless rows
    # once per lease period, not on every probe.
    from cairnq_django.store import get_store
    from cairnq_django.store.base import ClaimRequest

    store = get_store()
    lease_ms = 30_000
    full_probe_at = -1e9
    worker_id = "worker_bench_claim_probe"
    times_ms: list[float] = []
    empty = 0
    errors: list[str] = []
    stop = threading.Event()

    def wait_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_stop, daemon=True).start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        try:
            t0 = time.monotonic()
            full = t0 - full_probe_at >= lease_ms / 1000
            if full:
                full_probe_at = t0
            probe = store.probe_claim(["bench"], None, leaseless=full)
            request = ClaimRequest(["bench"], worker_id, lease_ms, None, probe=probe, single_draw=True, reuse_plans=True)
            rows = store.claim_session(request, lambda draw: draw(None, 1)) or []
            times_ms.append((time.monotonic() - t0) * 1000)
            if rows:
                store.complete_many(worker_id, [(row.id, None) for row in rows])
            else:
                empty += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        time.sleep(interval)
    return {
        "claims": len(times_ms),
        "empty": empty,
        "times_ms": times_ms,
        "errors": len(errors),
        "first_errors": errors[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["submit", "claim"])
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--name", default="bench.scale_record")
    parser.add_argument("--every-atomic", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--interval", type=float, default=0.01)
    args = parser.parse_args()
    import django

    django.setup()
    sys.stdin.readline()
    try:
        if args.role == "submit":
            out = submit(args.n, args.name, args.every_atomic)
        else:
            out = claim(args.seconds, args.interval)
    except Exception:  # noqa: BLE001 - the harness reads the failure from stdout
        out = {"fatal": traceback.format_exc()[-1500:]}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
