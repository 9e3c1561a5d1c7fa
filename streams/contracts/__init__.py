"""The one contract package: every topic name, its message model and its key, as other teams see them
(which slice consumes or produces each: ``streams.slices.catalogue()``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from streams.contracts.automation import (
    BusinessUnitChanged,
    DispatchRequested,
    ReminderSettingChanged,
    ReportSubscriptionChanged,
    SourceEntityChanged,
)
from streams.contracts.base import CONTRACT_VERSION, Contract
from streams.contracts.calendar import CalendarEventChanged, ReminderDueEvent
from streams.contracts.profile import DocumentExpiryReminderEvent, PersonDocumentChanged
from streams.errors import SafeMessage

M = TypeVar("M", bound=Contract)

# The size contract: an event this service produces is at most its contract's
# ``max_payload_bytes`` serialized (checked when the outbox record is built: a larger one
# raises ContractTooLarge in the producer's transaction, before anything commits). The
# default leaves RECORD_OVERHEAD_BYTES (key, headers, Kafka's record and batch framing)
# under the relay producer's default OUTBOX_MAX_RECORD_BYTES of 1 MiB; the relay's settings
# refuse a producer limit that a produced contract would not fit.
DEFAULT_MAX_PAYLOAD_BYTES = 1_000_000
RECORD_OVERHEAD_BYTES = 16 * 1024


@dataclass(frozen=True)
class TopicContract(Generic[M]):
    name: str
    model: type[M]
    key: Callable[[M], str]
    # "in" (consumed), "out" (produced through the outbox) or "internal" (a slice's own topic
    # between its parts, e.g. per-owner work items; not part of the published contract)
    direction: str
    # Largest serialized payload (UTF-8 JSON bytes) of one message: the size contract.
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    # Wire names of fields this service never stores, not even in the DLQ (streams/dlq/redact.py).
    secret_fields: tuple[str, ...] = ()


CALENDAR_EVENTS = TopicContract(
    "pin.calendar.events.v1", CalendarEventChanged, lambda m: str(m.event_id), "in"
)
PERSON_DOCUMENTS = TopicContract(
    "pin.profile.person-documents.v1",
    PersonDocumentChanged,
    lambda m: str(m.owner_user_id),
    "in",
    secret_fields=("PayloadCipher",),
)
SOURCE_EVENTS = TopicContract(
    "pin.automation.source-events.v1",
    SourceEntityChanged,
    lambda m: f"{m.source_type}:{m.source_guid}",
    "in",
)
REMINDER_SETTINGS = TopicContract(
    "pin.automation.reminder-settings.v1",
    ReminderSettingChanged,
    lambda m: str(m.setting_guid),
    "in",
)
BUSINESS_UNITS = TopicContract(
    "pin.automation.business-units.v1", BusinessUnitChanged, lambda m: str(m.business_unit_id), "in"
)
REPORT_SUBSCRIPTIONS = TopicContract(
    "pin.automation.report-subscriptions.v1",
    ReportSubscriptionChanged,
    lambda m: str(m.subscription_guid),
    "in",
)
REMINDER_DUE = TopicContract(
    "pin.calendar.reminder-due.v1", ReminderDueEvent, lambda m: str(m.event_id), "out"
)
DOCUMENT_EXPIRY_REMINDERS = TopicContract(
    "pin.profile.document-expiry-reminders.v1",
    DocumentExpiryReminderEvent,
    lambda m: str(m.owner_user_id),
    "out",
)
DISPATCH_REQUESTED = TopicContract(
    "pin.automation.dispatch-requested.v1", DispatchRequested, lambda m: m.scheduler_key, "out"
)

DLQ_SUFFIX = ".dlq"


class ContractTooLarge(SafeMessage, ValueError):
    """A produced message larger than its contract's ``max_payload_bytes`` (no values)."""

    def __init__(self, contract: str, size: int, limit: int) -> None:
        super().__init__(
            f"{contract} message is {size} bytes serialized, over its contract's "
            f"max_payload_bytes of {limit}"
        )
        self.contract = contract
        self.size = size
        self.limit = limit


def produced_contracts() -> tuple[TopicContract[Any], ...]:
    """The contracts this service publishes through the outbox (the slices' "out" topics)."""
    from streams.slices import catalogue

    return tuple(c for c in catalogue() if c.direction == "out")


class ContractError(SafeMessage, ValueError):
    """A message that does not satisfy its contract. ``reason`` is safe to log (no values)."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind  # "json", "schema" or "contract-version"


# pydantic error types whose message comes from the schema alone (expected type, limits,
# allowed literals; a date parser's "input is too short") or from our own validators: kept.
# Any other is named by its type code, since some quote the input: uuid_parsing says
# "invalid character: found `Z` at 0", union_tag_invalid repeats the tag it was given.
_SCHEMA_MESSAGES = frozenset(
    {
        "missing",
        "string_type",
        "string_too_short",
        "string_too_long",
        "string_pattern_mismatch",
        "int_type",
        "int_parsing",
        "int_from_float",
        "float_type",
        "float_parsing",
        "finite_number",
        "bool_type",
        "bool_parsing",
        "literal_error",
        "enum",
        "date_type",
        "date_parsing",
        "date_from_datetime_parsing",
        "date_from_datetime_inexact",
        "datetime_type",
        "datetime_parsing",
        "datetime_object_invalid",
        "timezone_aware",
        "timezone_naive",
        "time_type",
        "time_parsing",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "list_type",
        "tuple_type",
        "set_type",
        "too_short",
        "too_long",
        "dict_type",
        "model_type",
        "model_attributes_type",
        "uuid_type",
        "uuid_version",
        "value_error",
        "assertion_error",
        "none_required",
        "decimal_type",
        "decimal_parsing",
    }
)
_FIXED_MESSAGES = {"uuid_parsing": "Input should be a valid UUID"}


def _message(error: Any) -> str:
    kind = str(error["type"])
    if kind in _FIXED_MESSAGES:
        return _FIXED_MESSAGES[kind]
    if kind in _SCHEMA_MESSAGES:
        return str(error["msg"])
    return f"invalid ({kind})"


def decode(contract: TopicContract[M], raw: bytes | None) -> M:
    """Parse and validate one message; raises ContractError with a value-free reason."""
    if raw is None:
        raise ContractError("message has no value (tombstone)", "json")
    try:
        # Wire names only (PascalCase aliases): snake_case is how our code builds models,
        # not something a producer may send. Strict: "5" is not a Version, 1.0 is not a
        # ContractVersion, a number is not an instant.
        return contract.model.model_validate_json(raw, by_alias=True, by_name=False, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise ContractError("value is not valid JSON", "json") from None
        if any(e["loc"] and e["loc"][0] == "ContractVersion" for e in errors):
            raise ContractError(
                f"unsupported ContractVersion (this service reads {CONTRACT_VERSION})",
                "contract-version",
            ) from None
        # Locations and value-free messages only: input values may hold PII and never
        # reach a log or a DLQ header.
        reason = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {_message(e)}" for e in errors
        )
        raise ContractError(reason[:1000], "schema") from None


__all__ = [
    "CONTRACT_VERSION",
    "Contract",
    "ContractError",
    "TopicContract",
    "decode",
]
