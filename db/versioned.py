"""What a ``*_version_advance`` statement says about states the cache thought unchanged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID


@dataclass(frozen=True, slots=True)
class Advanced:
    """Per key: moved forward (same stored fingerprint, newer Version), or stale (not newer
    than the stored Version: that Version and fingerprint, to correct the cache). A key in
    neither must take the full write."""

    advanced: set[UUID] = field(default_factory=set)
    stale: dict[UUID, tuple[int, str | None]] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], key: str) -> Advanced:
        out = cls()
        for r in rows:
            if r["status"] == "advanced":
                out.advanced.add(r[key])
            else:
                out.stale[r[key]] = (r["version"], r["fingerprint"])
        return out
