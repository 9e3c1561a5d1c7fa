"""Rows by slice and state: the declared listings run for the console's pages and the
``rows`` commands, as plain JSON-able data (the web pages and the CLI print the same)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from db.connector import connection
from streams import slices
from streams.console.listing import FilterError, Listing, plain
from streams.runtime import Runtime

COUNT_CAP = 10_000
"""States are counted up to this (``10000+``): a count is then one bounded index range."""


class UnknownListing(LookupError):
    def __init__(self, name: str) -> None:
        known = ", ".join(listing.name for listing in declared())
        super().__init__(f"no listing {name!r} (listings: {known})")
        self.name = name


def declared() -> tuple[Listing, ...]:
    """Every listing of the declared slices, in their order."""
    found: list[Listing] = []
    for s in slices.declared():
        for listing in s.listings:
            if listing.slice != s.name:
                raise ValueError(f"slice {s.name} declares listing {listing.name}: not its own")
            found.append(listing)
    return tuple(found)


def find(name: str) -> Listing:
    for listing in declared():
        if listing.name == name:
            return listing
    raise UnknownListing(name)


def href(listing: Listing, params: dict[str, str] | None = None) -> str:
    base = f"/console/rows/{listing.name}"
    return f"{base}?{urlencode(params)}" if params else base


async def index(runtime: Runtime) -> dict[str, Any]:
    """Each listing with its rows by state (counted up to COUNT_CAP)."""
    out = []
    async with connection(await runtime.pool()) as conn:
        for listing in declared():
            counts = await listing.counts(conn, COUNT_CAP)
            out.append(
                {
                    "name": listing.name,
                    "title": listing.title,
                    "table": listing.table,
                    "about": listing.about,
                    "filters": ["state", "from", "to", *listing.filters],
                    "states": {state: counts.get(state, 0) for state in listing.states},
                    "href": href(listing),
                }
            )
    return {"listings": out, "count_cap": COUNT_CAP}


async def page(runtime: Runtime, listing: Listing, params: dict[str, str]) -> dict[str, Any]:
    """One page of ``listing`` for the query ``params`` (FilterError names a bad parameter):
    its rows, and the cursor of the next page (None on the last)."""
    query = listing.query(params)
    async with connection(await runtime.pool()) as conn:
        # Planned for the filter's values: whether a key prefix or an owner matches a handful
        # of rows or most of them decides which index reads the page (a generic plan cannot).
        with conn.planning_for_parameters():
            # One row more than the page says whether there is a next page.
            rows = await listing.page(conn, replace(query, limit=query.limit + 1))
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    following = listing.cursor_of(rows[-1]) if more else None
    shown = [{c: row.get(c) for c in listing.columns} for row in rows]
    return {
        "listing": listing.name,
        "title": listing.title,
        "states": list(listing.states),
        "filters": ["state", "from", "to", *listing.filters],
        "order": [listing.time_column, listing.id_column]
        if not listing.newest_first
        else [f"{listing.time_column} desc", f"{listing.id_column} desc"],
        "query": query.params() | ({"after": params["after"]} if query.after else {}),
        "rows": plain(shown),
        "ids": [str(row[listing.id_column]) for row in rows],
        "next": following,
        "next_href": href(listing, {**query.params(), "after": following}) if following else None,
    }


async def detail(runtime: Runtime, listing: Listing, ident: str) -> dict[str, Any] | None:
    """One row's detail (FilterError when ``ident`` is not an id of the listing), None when
    there is no such row."""
    key = listing.parse_id(ident)
    found = await listing.detail(runtime, key)
    if found is None:
        return None
    return {"listing": listing.name, "title": listing.title, "id": str(key), **plain(found)}


__all__ = ["COUNT_CAP", "FilterError", "UnknownListing", "declared", "detail", "find", "index"]
