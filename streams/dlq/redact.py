"""Secret fields out of a value before it is dead-lettered (pure; no I/O).

A contract may name fields this service promises never to store (person documents:
PayloadCipher, SPEC §2 and seed 001). The DLQ is storage too, so its copy of such a
message leaves them out:

- a value that parses as JSON is written back (compact, same data) with every key that
  names a secret field removed, at any depth and in any letter case; the header
  ``dlq-redacted`` names the fields removed. A value without them is kept byte for byte.
- a value that does not parse (bad JSON, bad UTF-8) cannot be shown to be free of them:
  it is withheld (an empty value), with ``dlq-redacted: *`` and its original size. The
  original stays at the source coordinates in the headers for the topic's retention.

A redacted record is not the record the producer sent, so ``dlq replay`` refuses it (the
producer re-sends the original); see streams/dlq/rules.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

WITHHELD = "*"
# The value was written without these fields (comma-separated wire names), or withheld ("*").
H_REDACTED = "dlq-redacted"


@dataclass(frozen=True)
class Redacted:
    value: bytes | None
    # Names of the fields removed, or ("*",) when the whole value was withheld; empty: as is.
    removed: tuple[str, ...] = ()


def _strip(node: object, secret: frozenset[str], removed: set[str]) -> object:
    if isinstance(node, dict):
        out = {}
        for key, item in node.items():
            if key.casefold() in secret:
                removed.add(key)
                continue
            out[key] = _strip(item, secret, removed)
        return out
    if isinstance(node, list):
        return [_strip(item, secret, removed) for item in node]
    return node


def redact(value: bytes | None, secret_fields: Sequence[str]) -> Redacted:
    """``value`` without the contract's ``secret_fields`` (see the module docstring)."""
    if value is None or not secret_fields:
        return Redacted(value)
    secret = frozenset(name.casefold() for name in secret_fields)
    try:
        document = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Redacted(b"", (WITHHELD,))
    removed: set[str] = set()
    try:
        stripped = _strip(document, secret, removed)
        if not removed:
            return Redacted(value)
        text = json.dumps(stripped, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        return Redacted(b"", (WITHHELD,))
    return Redacted(text.encode("utf-8", "surrogatepass"), tuple(sorted(removed)))
