"""Shared wire conventions: PascalCase names, ISO-8601 instants with offset, ContractVersion 1."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_pascal

CONTRACT_VERSION = 1


def _iso(value: datetime) -> str:
    return value.isoformat()


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown IANA time zone {value!r}") from None
    return value


# An instant on the wire: ISO-8601 with an explicit offset, e.g. 2026-12-01T09:00:00+00:00.
Instant = Annotated[AwareDatetime, PlainSerializer(_iso, return_type=str, when_used="json")]
TimeZoneId = Annotated[str, AfterValidator(_zone)]


class Contract(BaseModel):
    """Base of every message: PascalCase on the wire, snake_case in Python, immutable."""

    model_config = ConfigDict(
        alias_generator=to_pascal,
        populate_by_name=True,
        frozen=True,
        # Producers may add fields (additive changes keep ContractVersion 1); we ignore them.
        extra="ignore",
        str_strip_whitespace=False,
    )

    contract_version: Literal[1] = 1

    def to_json(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class StateMessage(Contract):
    """An input that carries the full state of an entity with a per-entity Version."""

    version: int
