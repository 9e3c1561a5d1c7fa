"""Execution-time recipients and delivery (pure), and the contract fields that carry them."""

from __future__ import annotations

import json
import uuid

from streams.contracts import DISPATCH_REQUESTED, REMINDER_SETTINGS, decode
from streams.contracts.automation import DeliveryChannel
from streams.domain.automation.delivery import (
    DEFAULT_CHANNELS,
    Delivery,
    DeliverySettings,
    SettingDeliveryPolicy,
    SourceAttributeRecipients,
    resolve_delivery,
)

A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))
TEMPLATE = uuid.UUID(int=99)


def config(*attributes: str, channels: tuple[DeliveryChannel, ...] = ()) -> DeliverySettings:
    return DeliverySettings(uuid.UUID(int=5), TEMPLATE, channels, attributes)


def test_recipients_are_the_ids_the_named_attributes_hold_distinct_in_order() -> None:
    attributes = {
        "OwnerUserId": str(B),
        "Watchers": [str(A), str(B), "not-an-id", 7, None],
        "ManagerUserId": "nobody@example.com",
        "Other": str(C),
    }
    got = SourceAttributeRecipients().recipients(
        config("OwnerUserId", "Watchers", "ManagerUserId", "Missing"), attributes
    )
    assert got == (B, A)  # "Other" is not named; values that are not ids are ignored


def test_the_policy_uses_the_settings_template_and_channels_or_the_default() -> None:
    policy = SettingDeliveryPolicy()
    chosen = policy.delivery(
        config(channels=(DeliveryChannel.SMS, DeliveryChannel.EMAIL, DeliveryChannel.SMS)), (A,)
    )
    assert chosen == Delivery((A,), TEMPLATE, (DeliveryChannel.SMS, DeliveryChannel.EMAIL))
    assert policy.delivery(config(), ()).channels == DEFAULT_CHANNELS


def test_resolution_reads_the_current_configuration_and_attributes() -> None:
    recipients, policy = SourceAttributeRecipients(), SettingDeliveryPolicy()
    before = resolve_delivery(config("Owner"), {"Owner": str(A)}, recipients, policy)
    after = resolve_delivery(
        config("Owner", channels=(DeliveryChannel.PUSH,)), {"Owner": str(C)}, recipients, policy
    )
    assert (before.recipient_user_ids, after.recipient_user_ids) == ((A,), (C,))
    assert after.channels == (DeliveryChannel.PUSH,)
    # No delivery configuration stored: no recipients, the default channels.
    assert resolve_delivery(None, {"Owner": str(A)}, recipients, policy) == Delivery(
        (), None, DEFAULT_CHANNELS
    )


SETTING = {
    "SettingGuid": str(uuid.uuid4()),
    "BusinessUnitId": str(uuid.uuid4()),
    "SourceType": "Doc",
    "TriggerType": "DateBased",
    "TriggerKey": "ExpiresOn",
    "OffsetsDays": [7],
    "Active": True,
    "Version": 1,
}


def test_settings_without_the_delivery_fields_still_decode_and_new_ones_are_kept() -> None:
    old = decode(REMINDER_SETTINGS, json.dumps(SETTING).encode())
    assert (old.template_id, old.delivery_channels, old.recipient_attributes) == (None, [], [])
    new = decode(
        REMINDER_SETTINGS,
        json.dumps(
            SETTING
            | {
                "TemplateId": str(TEMPLATE),
                "DeliveryChannels": ["Email", "InApp"],
                "RecipientAttributes": ["OwnerUserId"],
            }
        ).encode(),
    )
    assert new.template_id == TEMPLATE
    assert new.delivery_channels == [DeliveryChannel.EMAIL, DeliveryChannel.IN_APP]
    assert new.recipient_attributes == ["OwnerUserId"]


def test_a_dispatch_request_without_the_resolution_fields_still_decodes() -> None:
    wire = {
        "SchedulerKey": "report-subscription:x:manual:y",
        "AutomationType": "ReportSubscription",
        "TriggerType": "ManualRun",
        "ScheduledOn": "2026-12-01T09:00:00+00:00",
        "InputHash": "a" * 64,
        "RequestedAt": "2026-12-01T09:00:01+00:00",
    }
    msg = decode(DISPATCH_REQUESTED, json.dumps(wire).encode())
    assert (msg.recipient_user_ids, msg.template_id, msg.delivery_channels) == ([], None, [])


def test_recurrence_and_immediate_notification_decode_from_the_wire_and_default_off() -> None:
    new = decode(
        REMINDER_SETTINGS,
        json.dumps(
            SETTING | {"TriggerType": "Recurring", "Recurrence": "Monthly", "OffsetsDays": []}
        ).encode(),
    )
    assert (new.recurrence, new.immediate_notification) == ("Monthly", False)
    asking = decode(
        REMINDER_SETTINGS, json.dumps(SETTING | {"ImmediateNotification": True}).encode()
    )
    assert (asking.recurrence, asking.immediate_notification) == (None, True)
