"""Who may use the console's actions: pure checks of a request's credentials.

Actions are off unless ``WEB_ADMIN_TOKEN`` is set. Then a request carries the token as
``Authorization: Bearer <token>`` (scripts; no CSRF token needed, a browser never sends that
header by itself), or a session: the login form (POST /console/login with the token) sets
an HttpOnly, SameSite=Strict cookie signed with the token (HMAC), and every form of the
session carries a CSRF token derived from it (HMAC again), checked on each POST. Nothing is
stored server-side; changing the token ends every session. Every comparison is
``hmac.compare_digest``. The actor is the name given at login or in ``X-Operator`` (else
``admin``), never the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

COOKIE = "console_session"
SESSION_SECONDS = 8 * 3600
DEFAULT_ACTOR = "admin"
_ACTOR = re.compile(r"^[\w .@+-]{1,100}$")


@dataclass(frozen=True)
class Verdict:
    """``status`` 200 when allowed (with the actor), else 401 (no credential) or 403."""

    status: int
    actor: str = ""
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.status == 200


def actor_name(given: str | None) -> str:
    """An operator's name as recorded: letters, digits, ``.@+-_`` and spaces, else admin."""
    name = (given or "").strip()
    return name if _ACTOR.match(name) else DEFAULT_ACTOR


def _mac(token: str, purpose: str, value: str) -> str:
    return hmac.new(token.encode(), f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def new_session(token: str, actor: str, now: float) -> str:
    """A cookie value: issued-at, a random id and the actor, signed with the token."""
    who = base64.urlsafe_b64encode(actor_name(actor).encode()).decode().rstrip("=")
    body = f"{int(now)}.{secrets.token_hex(16)}.{who}"
    return f"{body}.{_mac(token, 'session', body)}"


def session_actor(token: str, cookie: str | None, now: float) -> str | None:
    """The actor of a valid, unexpired session cookie; None otherwise."""
    if not cookie or cookie.count(".") != 3:
        return None
    body, _, mac = cookie.rpartition(".")
    if not hmac.compare_digest(mac, _mac(token, "session", body)):
        return None
    issued, _, who = body.split(".")
    if not issued.isdigit() or not 0 <= now - int(issued) <= SESSION_SECONDS:
        return None
    try:
        return actor_name(base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode())
    except ValueError:
        return None


def csrf_token(token: str, cookie: str) -> str:
    """The CSRF token of a session: forms carry it, POSTs are checked against it."""
    return _mac(token, "csrf", cookie)


def bearer_ok(token: str, header: str | None) -> bool | None:
    """True for the right bearer token, False for a wrong one, None when none is given."""
    if not header:
        return None
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def authorize(
    token: str,
    headers: Mapping[str, str],
    cookie: str | None,
    csrf: str | None,
    now: float,
) -> Verdict:
    """May this POST act? ``token`` empty: actions are off (403)."""
    if not token:
        return Verdict(403, reason="console actions are off: WEB_ADMIN_TOKEN is not set")
    bearer = bearer_ok(token, headers.get("Authorization"))
    if bearer is True:
        return Verdict(200, actor=actor_name(headers.get("X-Operator")))
    if bearer is False:
        return Verdict(403, reason="wrong token")
    actor = session_actor(token, cookie, now)
    if actor is None:
        if cookie:
            return Verdict(403, reason="session expired or not valid: log in again")
        return Verdict(401, reason="log in at /console/login or send Authorization: Bearer")
    if not csrf or not hmac.compare_digest(csrf.encode(), csrf_token(token, cookie or "").encode()):
        return Verdict(403, reason="missing or wrong CSRF token: reload the page and try again")
    return Verdict(200, actor=actor)
