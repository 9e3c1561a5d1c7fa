"""The gate in front of every route of the worker's web server (an aiohttp middleware): who
may read, how many reads run at once and on which pool, when a body is read, and the headers
every answer carries.

- Open (``OPEN``): ``/health``, ``/health/live``, ``/metrics`` (probes, scrapers), the login
  form and ``/static/``.
- Actions (any method but GET/HEAD/OPTIONS): the credential (admin bearer token or a valid
  admin session cookie) is checked before the body is read; the handler still checks the
  CSRF token (streams/console/auth.py). The body is then read within
  WEB_BODY_TIMEOUT_SECONDS (408), at most WEB_MAX_BODY_BYTES (413).
- Reads (everything else): with WEB_READ_TOKEN set, a request needs it or the admin token
  as a bearer token, or a console session (401 otherwise). At most WEB_READ_CONCURRENCY run
  at once; one more answers 503 with Retry-After at once. A read runs inside
  ``Runtime.reading()``: its statements go to the read pool (statement_timeout, read-only),
  never to the worker's; a database that cannot answer in time makes it 503, not 500.

Every refused credential is logged (``action=web_auth_failed``, never a value) and counted
in ``reminders_web_auth_failures_total``. Every answer carries a CSP without inline script
or style, ``frame-ancestors 'none'``, ``nosniff`` and, but for static files,
``Cache-Control: no-store``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from db.connector import classify
from streams import logs
from streams.console import auth
from streams.runtime import Runtime

log = logging.getLogger("streams.web")

OPEN = ("/health", "/health/live", "/metrics", "/console/login")
STATIC = "/static/"
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
READ_COOKIE = "console_read"
"""A login with WEB_READ_TOKEN: reads only (actions need the admin session, auth.COOKIE)."""

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
RETRY_AFTER = "1"

Kind = Literal["open", "action", "read"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.auth_failures = Counter(
            "reminders_web_auth_failures_total",
            "Requests refused for a missing or wrong credential, by kind: read (a read page "
            "without WEB_READ_TOKEN), action (a POST without the admin token or session), login",
            ["kind"],
            registry=registry,
        )
        self.refused = Counter(
            "reminders_web_requests_refused_total",
            "Requests refused before their handler: busy (WEB_READ_CONCURRENCY reads running), "
            "body_timeout, database (the read pool could not answer in time)",
            ["reason"],
            registry=registry,
        )


def kind_of(method: str, path: str) -> Kind:
    if path in OPEN or path.startswith(STATIC):
        return "open"
    return "read" if method in SAFE else "action"


@dataclass(frozen=True)
class Tokens:
    admin: str
    read: str

    def may_read(self, request: web.BaseRequest, now: float) -> str | None:
        """None when the request may read, else why not (no value in it)."""
        if not self.read:
            return None
        header = request.headers.get("Authorization")
        if header:
            for token in (self.read, self.admin):
                if token and auth.bearer_ok(token, header):
                    return None
            return "wrong token"
        admin_cookie = request.cookies.get(auth.COOKIE)
        if self.admin and auth.session_actor(self.admin, admin_cookie, now) is not None:
            return None
        if auth.session_actor(self.read, request.cookies.get(READ_COOKIE), now) is not None:
            return None
        if admin_cookie or request.cookies.get(READ_COOKIE):
            return "session expired or not valid"
        return "no credential"

    def may_act(self, request: web.BaseRequest, now: float) -> str | None:
        """None when the request carries the admin credential (CSRF is the handler's)."""
        if not self.admin:
            return None  # the handler answers 403: actions are off
        header = request.headers.get("Authorization")
        if header:
            return None if auth.bearer_ok(self.admin, header) else "wrong token"
        if auth.session_actor(self.admin, request.cookies.get(auth.COOKIE), now) is not None:
            return None
        return (
            "session expired or not valid" if request.cookies.get(auth.COOKIE) else "no credential"
        )


LOG_EVERY_SECONDS = 10.0
"""Refused credentials are counted each, logged one line per kind this often at most (with how
many were not logged since): a flood of wrong tokens must not become a flood of log lines."""
_logged: dict[str, tuple[float, int]] = {}


def auth_failed(runtime: Runtime, kind: str, request: Any, why: str) -> None:
    """Count one refused credential; log it (path, peer, why; never a credential) unless a line
    of this kind was logged less than LOG_EVERY_SECONDS ago."""
    runtime.metrics.family(WebMetrics).auth_failures.labels(kind).inc()
    now = time.monotonic()
    last, quiet = _logged.get(kind, (-LOG_EVERY_SECONDS, 0))
    if now - last < LOG_EVERY_SECONDS:
        _logged[kind] = (last, quiet + 1)
        return
    _logged[kind] = (now, 0)
    logs.event(
        log,
        logging.WARNING,
        "web_auth_failed",
        kind=kind,
        method=request.method,
        path=request.path,
        peer=request.remote,
        why=why,
        not_logged_since=quiet,
    )


def _json(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _secure(response: web.StreamResponse, path: str) -> None:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if not path.startswith(STATIC):
        response.headers["Cache-Control"] = "no-store"


def middleware(runtime: Runtime) -> Any:
    """The gate for ``runtime``'s settings (aiohttp middleware)."""
    settings = runtime.settings
    tokens = Tokens(
        settings.web_admin_token.get_secret_value(), settings.web_read_token.get_secret_value()
    )
    metrics = runtime.metrics.family(WebMetrics)
    limit = settings.web_read_concurrency
    running = 0

    async def serve(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal running
        kind = kind_of(request.method, request.path)
        now = time.time()
        if kind == "read":
            why = tokens.may_read(request, now)
            if why is not None:
                auth_failed(runtime, "read", request, why)
                return _json(
                    401, f"{why}: send Authorization: Bearer <token> or log in at /console/login"
                )
            if running >= limit:
                metrics.refused.labels("busy").inc()
                return _json(503, "busy: too many reads at once", **{"Retry-After": RETRY_AFTER})
            running += 1
            try:
                with runtime.reading():
                    return await handler(request)
            except Exception as exc:
                if classify(exc) is None:
                    raise
                metrics.refused.labels("database").inc()
                return _json(503, f"database: {type(exc).__name__}", **{"Retry-After": RETRY_AFTER})
            finally:
                running -= 1
        if kind == "action":
            why = tokens.may_act(request, now)
            if why is not None:
                auth_failed(runtime, "action", request, why)
                status = 403 if why == "wrong token" or request.cookies.get(auth.COOKIE) else 401
                refused = _json(status, why)
                refused.force_close()  # its body is never read: the connection goes
                return refused
        if request.method not in SAFE and request.can_read_body:
            try:
                await asyncio.wait_for(request.read(), settings.web_body_timeout_seconds)
            except TimeoutError:
                metrics.refused.labels("body_timeout").inc()
                late = _json(408, "the request body did not arrive in time")
                late.force_close()
                return late
        try:
            return await handler(request)
        finally:
            if kind == "action":
                runtime.generation += 1  # what the pages show may have changed

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await serve(request, handler)
        except web.HTTPException as exc:
            _secure(exc, request.path)
            raise
        _secure(response, request.path)
        return response

    return gate


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def application_options(runtime: Runtime) -> dict[str, Any]:
    """Faust's ``web_application_options``: the gate, the body limit, and the header timeout
    (aiohttp closes a connection idle this long with no complete request: from its opening,
    or from its last response)."""
    settings = runtime.settings
    if not settings.web_read_token.get_secret_value() and not is_loopback(settings.web_host):
        # Not refused (a cluster-internal port may be meant to be open), but said at start.
        logs.event(
            log,
            logging.WARNING,
            "web_reads_open",
            web_host=settings.web_host,
            hint="set WEB_READ_TOKEN: every read page is open to whoever reaches the port",
        )
    return {
        "middlewares": [middleware(runtime)],
        "client_max_size": settings.web_max_body_bytes,
        "handler_args": {
            "keepalive_timeout": settings.web_header_timeout_seconds,
            # What is left of a refused request's body is drained for this long at most.
            "lingering_time": min(settings.web_body_timeout_seconds, 2.0),
        },
    }
