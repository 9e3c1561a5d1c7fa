"""The console's row pages as HTML: the listings with their counts by state, one listing's
page with its filter form and next-page link, and a row's detail (with its action forms)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from streams.console.forms import action_forms
from streams.console.layout import esc, shell, table, td, text
from streams.console.listing import OPTIONAL_FILTERS, Listing

JSON_LINK = '<p class="dim"><a href="{href}">this page as JSON</a></p>'


def _with_json(path: str) -> str:
    return path + ("&" if "?" in path else "?") + "format=json"


def render_index(data: dict[str, Any]) -> str:
    cap = data["count_cap"]
    parts = []
    for i, listing in enumerate(data["listings"]):
        cells = "".join(
            f'<tr><td><a href="{esc(listing["href"])}?state={esc(state)}">{esc(state)}</a></td>'
            + (
                f'<td class="n" data-k="listings.{i}.states.{esc(state)}">{n}+</td>'
                if n >= cap
                else td(n, f"listings.{i}.states.{state}")
            )
            + "</tr>"
            for state, n in listing["states"].items()
        )
        parts.append(
            f'<h2><a href="{esc(listing["href"])}">{esc(listing["title"])}</a> '
            f'<span class="dim">{esc(listing["name"])} · {esc(listing["table"])}</span></h2>'
            f'<p class="small">{esc(listing["about"])}</p>' + table(("state", "rows"), cells)
        )
    body = "".join(parts) + JSON_LINK.format(href="/console/rows?format=json")
    return shell("rows", body)


def _form(listing: Listing, query: dict[str, str]) -> str:
    options = "".join(
        f"<option{' selected' if s == query.get('state') else ''}>{esc(s)}</option>"
        for s in listing.states
    )
    menu = "select"  # a tag name, kept apart from the attributes (no SQL-looking text here)
    fields = [f'<label>state <{menu} name="state">{options}</{menu}></label>']
    for name, hint in (("from", "ISO-8601, UTC"), ("to", "ISO-8601, UTC")):
        fields.append(
            f'<label>{name} <input name="{name}" value="{esc(query.get(name, ""))}" '
            f'placeholder="{hint}" size="22"></label>'
        )
    for name in listing.filters:
        fields.append(
            f'<label>{esc(name.replace("_", " "))} <input name="{name}" '
            f'value="{esc(query.get(name, ""))}" title="{esc(OPTIONAL_FILTERS[name])}" '
            f'size="36"></label>'
        )
    fields.append(
        f'<label>limit <input name="limit" value="{esc(query.get("limit", ""))}" size="4"></label>'
    )
    return (
        f'<form class="inline" method="get" action="/console/rows/{esc(listing.name)}">'
        + " ".join(fields)
        + ' <button type="submit">filter</button></form>'
    )


def render_page(listing: Listing, data: dict[str, Any]) -> str:
    rows = "".join(
        "<tr>"
        + "".join(
            (
                f'<td data-k="rows.{i}.{c}"><a href="/console/rows/{esc(listing.name)}/'
                f'{esc(quote(data["ids"][i], safe=""))}">{esc(text(row.get(c)))}</a></td>'
            )
            if c == listing.id_column
            else td(row.get(c), f"rows.{i}.{c}", key=c)
            for c in listing.columns
        )
        + "</tr>"
        for i, row in enumerate(data["rows"])
    )
    order = ", ".join(data["order"])
    following = (
        f'<p><a id="next" href="{esc(data["next_href"])}">next page</a></p>'
        if data["next_href"]
        else '<p class="dim">last page</p>'
    )
    path = f"/console/rows/{listing.name}"
    here = _with_json(f"{path}?{urlencode(data['query'])}")
    body = (
        f'<p class="small">{esc(listing.about)} Ordered by {esc(order)}.</p>'
        + _form(listing, data["query"])
        + f'<div class="hscroll">{table(listing.columns, rows)}</div>'
        + following
        + JSON_LINK.format(href=esc(here))
    )
    return shell(f"{listing.title}: {data['query']['state']}", body)


OUTBOX_COLUMNS = (
    "outbox_id",
    "topic",
    "delivery",
    "created_at",
    "published_at",
    "partition",
    "offset",
    "parked",
)


def _kv(values: dict[str, Any], path: str) -> str:
    rows = "".join(
        f"<tr><th>{esc(k)}</th>{td(v, f'{path}.{k}' if path else k, key=k)}</tr>"
        for k, v in values.items()
    )
    return f'<table class="kv">{rows}</table>'


def render_detail(listing: Listing, data: dict[str, Any], csrf: str | None = None) -> str:
    outbox = "".join(
        "<tr>"
        + "".join(td(record.get(c), f"outbox.{i}.{c}", key=c) for c in OUTBOX_COLUMNS)
        + "</tr>"
        for i, record in enumerate(data["outbox"])
    )
    lineage = data.get("lineage")
    body = (
        f'<p><a href="/console/rows/{esc(listing.name)}">{esc(listing.title)}</a></p>'
        + action_forms(listing.name, data["row"], csrf)
        + "<h2>row</h2>"
        + _kv(data["row"], "row")
        + "<h2>attempts and last error</h2>"
        + _kv({"attempts": data["attempts"], "last_error": data["last_error"]}, "")
        + "<h2>outbox records</h2>"
        + table(OUTBOX_COLUMNS, outbox)
        + "<h2>lineage</h2>"
        + (_kv(lineage, "lineage") if isinstance(lineage, dict) else '<p class="dim">none</p>')
        + JSON_LINK.format(href=esc(_with_json(f"/console/rows/{listing.name}/{data['id']}")))
    )
    return shell(f"{listing.title}: {data['id']}", body)


def render_error(status: int, message: str) -> str:
    return shell(f"rows: {status}", f'<p class="bad badge">{esc(message)}</p>')
