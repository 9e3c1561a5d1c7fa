"""Shared wire conventions: PascalCase names, ISO-8601 instants with offset, ContractVersion 1."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, available_timezones

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_pascal

CONTRACT_VERSION = 1


def _iso(value: datetime) -> str:
    return value.isoformat()


# Every zone key the tz database has (no folders such as "America", no "posix/" copies).
_ZONES = frozenset(available_timezones()) | {"UTC"}
# Instants outside these years are refused: date arithmetic near year 1 or 9999 overflows.
MIN_YEAR, MAX_YEAR = 1900, 9000
# Largest Version that fits PostgreSQL's bigint.
MAX_VERSION = 2**63 - 1


def _zone(value: str) -> str:
    # Looked up in the set first: ZoneInfo("America") raises IsADirectoryError and a very
    # long name OSError, neither of which a validator may let escape.
    if value not in _ZONES:
        raise ValueError("unknown IANA time zone")
    try:
        ZoneInfo(value)
    except Exception:
        raise ValueError("unknown IANA time zone") from None
    return value


_EARLIEST = datetime(MIN_YEAR, 1, 1, tzinfo=UTC)
_LATEST = datetime(MAX_YEAR, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def _instant(value: datetime) -> datetime:
    # Compared as instants (aware comparison cannot overflow), not by the written local year;
    # a local year strictly inside the range is inside as an instant too (offsets are under
    # a day), which settles almost every value without the slower aware comparison.
    if MIN_YEAR < value.year < MAX_YEAR:
        return value
    if not _EARLIEST <= value <= _LATEST:
        raise ValueError(f"instant must be between the years {MIN_YEAR} and {MAX_YEAR} (UTC)")
    return value


# An instant on the wire: ISO-8601 with an explicit offset, e.g. 2026-12-01T09:00:00+00:00.
Instant = Annotated[
    AwareDatetime,
    AfterValidator(_instant),
    PlainSerializer(_iso, return_type=str, when_used="json"),
]
TimeZoneId = Annotated[str, Field(max_length=64), AfterValidator(_zone)]


class Contract(BaseModel):
    """Base of every message: PascalCase on the wire, snake_case in Python, immutable."""

    model_config = ConfigDict(
        alias_generator=to_pascal,
        populate_by_name=True,
        frozen=True,
        # Producers may add fields (additive changes keep ContractVersion 1); we ignore them.
        extra="ignore",
        # NaN and Infinity cannot be written back as JSON (they would become null).
        allow_inf_nan=False,
        str_strip_whitespace=False,
    )

    contract_version: Literal[1] = 1

    def to_json(self) -> bytes:
        """The wire form: ``model_dump_json(by_alias=True)`` as UTF-8 bytes, taken from the
        serializer as bytes (``model_dump_json`` decodes them to text, which was encoded
        back here: a third of the call's time for an outbox event)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True)


class StateMessage(Contract):
    """An input that carries the full state of an entity with a per-entity Version."""

    version: int = Field(ge=0, le=MAX_VERSION)
