"""The console's mutating routes on the worker's web server, all POST: the login form
(POST /console/login), the row actions (POST /console/actions/<action>) and pausing or resuming
a schedule (POST /console/actions/timers/pause|resume). Each is refused
unless WEB_ADMIN_TOKEN is set and the request carries it (bearer) or a logged-in session
with its CSRF token (streams/console/auth.py). Read pages are gated by WEB_READ_TOKEN
(streams/web/guard.py); a login with that token reads only.
"""

from __future__ import annotations

import time
from typing import Any

from faust.web import Request, Response, View

from db import timer_pauses
from db.connector import transaction
from streams.console import auth
from streams.console.actions import UnknownAction
from streams.console.layout import esc, shell
from streams.console.perform import BadRequest, lookup, perform
from streams.runtime import Runtime
from streams.slices.context import SliceContext
from streams.web import guard

LOGIN = "/console/login"
ACTIONS = "/console/actions/{action}"
TIMER_ACTIONS = "/console/actions/timers/{verb}"


def _token(runtime: Runtime) -> str:
    return runtime.settings.web_admin_token.get_secret_value()


def page_csrf(runtime: Runtime, request: Request) -> str | None:
    """The CSRF token forms on this request's page carry (``action_forms``), or None when
    actions are off or the request has no valid session."""
    token, cookie = _token(runtime), request.cookies.get(auth.COOKIE)
    if not token or auth.session_actor(token, cookie, time.time()) is None:
        return None
    return auth.csrf_token(token, cookie or "")


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("Accept", "") or bool(
        request.headers.get("Authorization")
    )


async def _fields(request: Request) -> dict[str, str]:
    if request.headers.get("Content-Type", "").startswith("application/json"):
        try:
            body = await request.json()
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in body.items()} if isinstance(body, dict) else {}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _login_form(message: str = "", *, off: bool = False) -> str:
    if off:
        body = "<p>Console actions are off: set <code>WEB_ADMIN_TOKEN</code> to turn them on.</p>"
    else:
        body = (
            f'<p class="bad">{esc(message)}</p>'
            * bool(message)
            + f'<form method="post" action="{LOGIN}"><p><label>token '
            '<input type="password" name="token" required autocomplete="off"></label></p>'
            '<p><label>your name (recorded in the audit) <input name="actor" maxlength="100">'
            '</label></p><p><button type="submit">log in</button></p></form>'
        )
    return shell("console login", body)


def register(ctx: SliceContext) -> None:
    app, runtime = ctx.app, ctx.runtime

    @app.page(LOGIN)
    class Login(View):
        async def get(self, request: Request, **kwargs: Any) -> Response:
            return self.html(_login_form(off=not _token(runtime)))

        async def post(self, request: Request, **kwargs: Any) -> Response:
            token = _token(runtime)
            reader = runtime.settings.web_read_token.get_secret_value()
            if not token and not reader:
                return self.html(_login_form(off=True), status=403)
            fields = await _fields(request)
            given = fields.get("token", "")
            if not given:
                guard.auth_failed(runtime, "login", request, "no credential")
                return self.html(_login_form("give the token"), status=401)
            if reader and auth.bearer_ok(reader, f"Bearer {given}"):
                # The read token logs in to read only (streams/web/guard.py).
                token, name = reader, guard.READ_COOKIE
            elif token and auth.bearer_ok(token, f"Bearer {given}"):
                name = auth.COOKIE
            else:
                guard.auth_failed(runtime, "login", request, "wrong token")
                return self.html(_login_form("wrong token"), status=403)
            response = self.html(
                shell("console login", '<p>Logged in. <a href="/console/rows">rows</a></p>'),
                status=303,
                headers={"Location": "/console/rows"},
            )
            cookie = auth.new_session(token, fields.get("actor", ""), time.time())
            response.set_cookie(  # type: ignore[attr-defined]
                name,
                cookie,
                httponly=True,
                samesite="Strict",
                path="/",
                max_age=auth.SESSION_SECONDS,
            )
            return response

    @app.page(ACTIONS)
    class Actions(View):
        async def post(self, request: Request, action: str, **kwargs: Any) -> Response:
            fields = await _fields(request)
            verdict = auth.authorize(
                _token(runtime),
                request.headers,
                request.cookies.get(auth.COOKIE),
                fields.get("csrf"),
                time.time(),
            )
            if not verdict.allowed:
                return _answer(self, request, verdict.status, verdict.reason)
            try:
                declared = lookup(fields.get("listing", ""), action)
                pool = await runtime.pool()
                done = await perform(
                    pool,
                    declared,
                    fields.get("target", ""),
                    verdict.actor,
                    fields.get("reason", ""),
                    runtime.clock.now(),
                    request_id=fields.get("request_id", ""),
                )
            except UnknownAction as exc:
                return _answer(self, request, 404, str(exc))
            except BadRequest as exc:
                return _answer(self, request, 400, str(exc))
            status = 200 if done.ok else (404 if done.result.outcome == "not_found" else 409)
            return _answer(
                self,
                request,
                status,
                done.text,
                outcome=done.result.outcome,
                state_before=done.result.state_before,
                state_after=done.result.state_after,
                audit_id=done.result.audit_id,
                replayed=done.replayed,
                listing=declared.listing,
                target=done.target,
            )

    @app.page(TIMER_ACTIONS)
    class TimerActions(View):
        """Pause or resume a schedule on every worker: what ``timers pause|resume`` does."""

        async def post(self, request: Request, verb: str, **kwargs: Any) -> Response:
            fields = await _fields(request)
            verdict = auth.authorize(
                _token(runtime),
                request.headers,
                request.cookies.get(auth.COOKIE),
                fields.get("csrf"),
                time.time(),
            )
            if not verdict.allowed:
                return _answer(self, request, verdict.status, verdict.reason)
            if verb not in ("pause", "resume"):
                return _answer(self, request, 404, f"no timer action {verb!r} (pause, resume)")
            name, reason = fields.get("schedule", ""), fields.get("reason", "")
            if name not in ctx.registry.names:
                known = ", ".join(ctx.registry.names)
                return _answer(self, request, 404, f"no timer named {name!r} (known: {known})")
            if len(reason) > 1000:
                return _answer(self, request, 400, "the reason is longer than 1000 characters")
            change = timer_pauses.pause if verb == "pause" else timer_pauses.resume
            pool = await runtime.pool()
            async with transaction(pool) as conn:
                result = await change(conn, name, verdict.actor, reason, runtime.clock.now())
            await ctx.registry.refresh_pauses()
            if result.outcome == "changed":
                text = (
                    f"timer {name}: {result.state_before} -> {result.state_after} on every worker"
                )
            else:
                text = f"timer {name} is {result.state_before} already: nothing changed"
            return _answer(
                self,
                request,
                200,
                text,
                outcome=result.outcome,
                state_before=result.state_before,
                state_after=result.state_after,
                audit_id=result.audit_id,
                schedule=name,
            )

    from streams.console import dlq_page

    dlq_page.register(ctx, _token, page_csrf, _answer)


def _answer(view: View, request: Request, status: int, text: str, **data: Any) -> Response:
    """JSON for scripts (bearer, or Accept: application/json), a small page for the browser."""
    if _wants_json(request):
        return view.json({"message": text, **data}, status=status)
    back = ""
    if "listing" in data:
        href = f"/console/rows/{data['listing']}/{data['target']}"
        back = f' <a href="{esc(href)}">back to the row</a>'
    cls = "ok" if status == 200 else "bad"
    return view.html(
        shell("console action", f'<p class="badge {cls}">{esc(text)}</p>{back}'),
        status=status,
    )
