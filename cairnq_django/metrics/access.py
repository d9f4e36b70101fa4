"""Who may read the queue metrics: a bearer token equal to ``CAIRNQ["METRICS_TOKEN"]``, or staff with ``view_task``."""

from __future__ import annotations

import hmac
from enum import Enum

from django.http import HttpRequest

from ..conf import get_config

# The scheme Prometheus sends for ``authorization: {credentials: ...}``.
BEARER = "bearer"


class Access(Enum):
    ALLOWED = "allowed"
    # No credentials, or a token that does not match: answer 401 with a challenge.
    UNAUTHENTICATED = "unauthenticated"
    # A signed-in user without the permission: 403.
    FORBIDDEN = "forbidden"


def configured_token() -> str | None:
    """The token, or None when unset or not text (``cairnq.E019`` reports a bad one)."""
    token = get_config().get("METRICS_TOKEN")
    return token if isinstance(token, str) and token else None


def check_access(request: HttpRequest) -> Access:
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, credentials = header.partition(" ")
        token = configured_token()
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
