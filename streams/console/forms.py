"""The action buttons a row's detail page offers (POST forms with the CSRF token).

The contract between the console's pages and its actions: a detail page calls
``action_forms(listing, row, csrf)`` and places the HTML it returns. Each form posts to
``/console/actions/<action>`` with the fields ``listing``, ``target`` (the row's id as text),
``reason`` and ``csrf``. With no actions declared for the listing it returns ``""``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def action_forms(listing: str, row: Mapping[str, Any], csrf: str | None) -> str:
    return ""
