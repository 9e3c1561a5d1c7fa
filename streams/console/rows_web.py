"""The console's row pages on the worker's web server (GET only, nothing changes state):
``/console/rows``, ``/console/rows/<slice>/<listing>?state=&from=&to=&…&after=&limit=`` and
``/console/rows/<slice>/<listing>/<id>``; ``?format=json`` (or ``Accept: application/json``)
returns the same data as JSON."""

from __future__ import annotations

from typing import Any

from faust.web import Request, Response, View

from streams.asynctools import Shared
from streams.console import rows
from streams.console.listing import FilterError
from streams.console.rows_html import render_detail, render_error, render_index, render_page
from streams.console.web import page_csrf
from streams.slices.context import SliceContext


def wants_json(request: Request) -> bool:
    return request.query.get("format") == "json" or "application/json" in (
        request.headers.get("Accept", "")
    )


def _error(web: View, request: Request, status: int, message: str, **extra: Any) -> Response:
    if wants_json(request):
        return web.json({"error": message, **extra}, status=status)
    return web.html(render_error(status, message), status=status)


def register(ctx: SliceContext) -> None:
    app, runtime = ctx.app, ctx.runtime
    # Every listing's capped counts: one count a second at most, whoever asks.
    counts = Shared(lambda: rows.index(runtime), fresh=1.0, stamp=lambda: runtime.generation)

    @app.page("/console/rows")
    async def rows_index(web: View, request: Request) -> Response:
        data = await counts.get()
        return web.json(data) if wants_json(request) else web.html(render_index(data))

    @app.page("/console/rows/{slice_name}/{listing_name}")
    async def rows_page(
        web: View, request: Request, slice_name: str, listing_name: str
    ) -> Response:
        try:
            listing = rows.find(f"{slice_name}/{listing_name}")
            data = await rows.page(runtime, listing, dict(request.query))
        except rows.UnknownListing as exc:
            return _error(web, request, 404, str(exc))
        except FilterError as exc:
            return _error(web, request, 400, str(exc), parameter=exc.param)
        return web.json(data) if wants_json(request) else web.html(render_page(listing, data))

    @app.page("/console/rows/{slice_name}/{listing_name}/{ident}")
    async def row_detail(
        web: View, request: Request, slice_name: str, listing_name: str, ident: str
    ) -> Response:
        try:
            listing = rows.find(f"{slice_name}/{listing_name}")
            data = await rows.detail(runtime, listing, ident)
        except rows.UnknownListing as exc:
            return _error(web, request, 404, str(exc))
        except FilterError as exc:
            return _error(web, request, 400, str(exc), parameter=exc.param)
        if data is None:
            return _error(web, request, 404, f"no row {ident!r} in {listing.name}")
        return (
            web.json(data)
            if wants_json(request)
            else web.html(render_detail(listing, data, page_csrf(runtime, request)))
        )
