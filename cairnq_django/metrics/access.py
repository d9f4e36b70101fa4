"""Who may read the queue metrics: a bearer token equal to ``CAIRNQ["METRICS_TOKEN"]``, or staff with ``view_task``."""

from __future__ import annotations

import hmac
import logging
import time
from enum import Enum

from django.http import HttpRequest

from ..conf import get_config, metrics_token_problem

logger = logging.getLogger("cairnq_django.metrics")

# The scheme Prometheus sends for ``authorization: {credentials: ...}``.
BEARER = "bearer"
# A weak token is logged at most this often, however often the view is asked.
WEAK_TOKEN_LOG_EVERY_S = 60.0
_weak_token_logged_at = -WEAK_TOKEN_LOG_EVERY_S


class Access(Enum):
    ALLOWED = "allowed"
    # No credentials, or a token that does not match: answer 401 with a challenge.
    UNAUTHENTICATED = "unauthenticated"
    # A signed-in user without the permission: 403.
    FORBIDDEN = "forbidden"
    # METRICS_TOKEN breaks cairnq.E019's rule: nobody is served until it is fixed.
    MISCONFIGURED = "misconfigured"


def token_problem() -> str | None:
    """What is wrong with the configured token (``conf.metrics_token_problem``), logged when something is.

    Checked here, where the token is read, because a WSGI server never runs
    the system checks: a short token must not be served.
    """
    global _weak_token_logged_at
    problem = metrics_token_problem(get_config().get("METRICS_TOKEN"))
    if problem is not None and time.monotonic() - _weak_token_logged_at >= WEAK_TOKEN_LOG_EVERY_S:
        _weak_token_logged_at = time.monotonic()
        logger.error(
            'refusing to serve the queue metrics: CAIRNQ["METRICS_TOKEN"] %s (system check cairnq.E019); '
            "use a long random string such as secrets.token_urlsafe(32), or None",
            problem,
        )
    return problem


def check_access(request: HttpRequest) -> Access:
    if token_problem() is not None:
        return Access.MISCONFIGURED
    token = get_config().get("METRICS_TOKEN")
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, credentials = header.partition(" ")
        if scheme.lower() != BEARER or token is None:
            return Access.UNAUTHENTICATED
        # Constant time, on bytes: a timing difference must not spell the token out.
        if hmac.compare_digest(credentials.strip().encode("utf-8"), token.encode("utf-8")):
            return Access.ALLOWED
        return Access.UNAUTHENTICATED
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return Access.UNAUTHENTICATED
    if user.is_staff and user.has_perm("cairnq.view_task"):
        return Access.ALLOWED
    return Access.FORBIDDEN
