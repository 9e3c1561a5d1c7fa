"""The action buttons a row's detail page offers (POST forms with the CSRF token).

The contract between the console's pages and its actions: a detail page calls
``action_forms(listing, row, csrf)`` and places the HTML it returns. Each form posts to
``/console/actions/<action>`` with the fields ``listing``, ``target`` (the row's id as text),
``reason``, ``csrf`` and ``request_id`` (made here, one per form and page view: the same
form posted again — a double click, a browser's retry — is the same request and changes
nothing). With no actions declared for the listing it returns ``""``; with ``csrf`` None
(actions are off: no ``WEB_ADMIN_TOKEN``, or not logged in) it says how to turn them on
instead of offering forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from streams.console.layout import esc


def row_key(listing: str, row: Mapping[str, Any]) -> str:
    """The row's id as text: the listing's declared id column (streams/slices/*/listings.py)."""
    from streams.console.rows import UnknownListing, find

    try:
        value = row.get(find(listing).id_column)
    except UnknownListing:
        return ""
    return "" if value is None else str(value)


def action_forms(listing: str, row: Mapping[str, Any], csrf: str | None) -> str:
    from streams.console.perform import declared_actions

    offered = [a for (lst, _), a in declared_actions().items() if lst == listing and a.offered(row)]
    target = row_key(listing, row)
    if not offered or not target:
        return ""
    if csrf is None:
        return (
            '<p class="dim">actions: ' + esc(", ".join(a.name for a in offered)) + " — "
            '<a href="/console/login">log in</a> with WEB_ADMIN_TOKEN to use them</p>'
        )
    forms = []
    for a in offered:
        forms.append(
            f'<form class="inline" method="post" action="/console/actions/{esc(a.name)}">'
            f'<input type="hidden" name="listing" value="{esc(listing)}">'
            f'<input type="hidden" name="target" value="{esc(target)}">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            f'<input type="hidden" name="request_id" value="web-{uuid4().hex}">'
            f'<input name="reason" required maxlength="1000" placeholder="reason" '
            f'aria-label="reason to {esc(a.name)}">'
            f'<button type="submit" data-action="{esc(a.name)}">{esc(a.label or a.name)}</button>'
            "</form>"
        )
    return "".join(forms)
