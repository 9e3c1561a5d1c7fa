"""Execution-time recipients and delivery (seed 003: IReminderRecipientProvider /
IReminderDeliveryPolicy). Pure: the setting's delivery configuration and the source state
in, what the dispatch request carries out.

They are resolved when a row is due, never when it is ensured: recipients, template and
channels are not part of a SchedulerKey or InputHash, so a template or delivery change leaves
Pending rows untouched and the next dispatch carries the new resolution.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from streams.contracts.automation import DeliveryChannel

# What a setting that names no channel is delivered through.
DEFAULT_CHANNELS: tuple[DeliveryChannel, ...] = (DeliveryChannel.IN_APP,)


@dataclass(frozen=True)
class DeliverySettings:
    """The part of a ReminderSetting execution reloads to address a reminder."""

    setting_guid: UUID
    template_id: UUID | None = None
    delivery_channels: tuple[DeliveryChannel, ...] = ()
    recipient_attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Delivery:
    """What the dispatch request carries: recipients, template, channels (identifiers only)."""

    recipient_user_ids: tuple[UUID, ...] = ()
    template_id: UUID | None = None
    channels: tuple[DeliveryChannel, ...] = ()


class RecipientProvider(Protocol):
    def recipients(
        self, settings: DeliverySettings, attributes: Mapping[str, Any]
    ) -> tuple[UUID, ...]:
        """The recipients of one due reminder, from its source's current attributes."""
        ...


class DeliveryPolicy(Protocol):
    def delivery(self, settings: DeliverySettings, recipients: tuple[UUID, ...]) -> Delivery:
        """Template and channels for the resolved recipients."""
        ...


def _guids(value: Any) -> Iterable[UUID]:
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            try:
                yield UUID(item)
            except ValueError:
                continue  # not an id: never guessed at, never logged


class SourceAttributeRecipients:
    """Recipients are the user ids held by the source attributes the setting names (a GUID or
    a list of GUIDs each); anything else is ignored. Distinct, in a stable order."""

    def recipients(
        self, settings: DeliverySettings, attributes: Mapping[str, Any]
    ) -> tuple[UUID, ...]:
        found: dict[UUID, None] = {}
        for name in settings.recipient_attributes:
            for guid in _guids(attributes.get(name)):
                found.setdefault(guid, None)
        return tuple(found)


class SettingDeliveryPolicy:
    """The setting's template and channels; a setting without channels gets ``default``."""

    def __init__(self, default: tuple[DeliveryChannel, ...] = DEFAULT_CHANNELS) -> None:
        self.default = default

    def delivery(self, settings: DeliverySettings, recipients: tuple[UUID, ...]) -> Delivery:
        channels = tuple(dict.fromkeys(settings.delivery_channels)) or self.default
        return Delivery(recipients, settings.template_id, channels)


def resolve_delivery(
    settings: DeliverySettings | None,
    attributes: Mapping[str, Any],
    recipients: RecipientProvider,
    policy: DeliveryPolicy,
) -> Delivery:
    """Recipients first, then the policy over them. A setting never loaded (no delivery
    configuration stored yet) resolves as one with none."""
    config = settings or DeliverySettings(UUID(int=0))
    return policy.delivery(config, recipients.recipients(config, attributes))
