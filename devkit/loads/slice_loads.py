"""Document-expiry and automation load for the fault matrix, and the effects they must lead to.

Each load keeps what the broker acknowledged (``Acked``) and computes the expected effects
from that alone, with the product's pure rules (streams/domain/profile.py for seed 001,
streams/domain/automation/triggers.py for seed 003), so the auditor never asks the service
what it should have done. Both loads include reverts to an earlier state: a document
Active → Archived → Active and ExpiresAt moved out of the window and back; a source
deactivated and reactivated, its target date moved and moved back, its metric dropped
below the threshold and raised again. Changes that remove an effect are sent while that
effect is far from due (the automation load's ``margin``), so timing cannot change the answer.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from devkit.loads.calendar_load import Acked
from streams.contracts.automation import (
    BusinessUnitChanged,
    Comparator,
    FiringPolicy,
    ReminderSettingChanged,
    SourceEntityChanged,
    Threshold,
    TriggerType,
)
from streams.domain.automation.triggers import TriggerInput, default_providers
from streams.domain.profile import DEFAULT_THRESHOLDS, crossed, days_left, scan_window

DOCUMENTS_TOPIC = "pin.profile.person-documents.v1"
SOURCES_TOPIC = "pin.automation.source-events.v1"
SETTINGS_TOPIC = "pin.automation.reminder-settings.v1"
UNITS_TOPIC = "pin.automation.business-units.v1"


class AckedSender:
    """One idempotent producer; each message is sent and acknowledged before the next, and a
    failed send is retried with the same bytes (at worst a replay) until acknowledged."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.producer: AIOKafkaProducer | None = None
        self.attempts = 0
        self.errors = 0
        self._lock = asyncio.Lock()

    async def send(self, topic: str, key: str, payload: dict[str, Any], kind: str) -> Acked:
        raw = json.dumps(payload).encode()
        failures = 0
        async with self._lock:
            while True:
                self.attempts += 1
                try:
                    if self.producer is None:
                        self.producer = AIOKafkaProducer(
                            bootstrap_servers=self.bootstrap,
                            acks="all",
                            enable_idempotence=True,
                            request_timeout_ms=10_000,
                            retry_backoff_ms=200,
                        )
                        await self.producer.start()
                    await self.producer.send_and_wait(self.prefix + topic, raw, key=key.encode())
                    return Acked(payload, datetime.now(UTC), kind)
                except (KafkaError, OSError, TimeoutError):
                    self.errors += 1
                    failures += 1
                    if failures % 5 == 0 and self.producer is not None:
                        stale, self.producer = self.producer, None
                        await asyncio.shield(stale.stop())
                    await asyncio.sleep(0.5)

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None


def newest(acked: Iterable[Acked], key: str) -> dict[str, dict[str, Any]]:
    """The newest acknowledged state per entity (highest Version wins, as the appliers do)."""
    out: dict[str, dict[str, Any]] = {}
    for a in acked:
        k = a.payload[key]
        if k not in out or a.payload["Version"] > out[k]["Version"]:
            out[k] = a.payload
    return out


# ---------------------------------------------------------------------- document expiry


def person_document(
    *, document_id: str, owner: str, person: str, expires: date, version: int, **over: Any
) -> dict[str, Any]:
    """A pin.profile.person-documents.v1 payload, field by field (SPEC §2)."""
    msg: dict[str, Any] = {
        "ContractVersion": 1,
        "DocumentId": document_id,
        "OwnerUserId": owner,
        "PersonId": person,
        "Type": "InternationalPassport",
        "NumberMask": "45** ****12",
        "ExpiresAt": expires.isoformat(),
        "Status": "Active",
        "IsDeleted": False,
        "Version": version,
        "OccurredAt": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "PayloadCipher": "CIPHER-matrix",
    }
    msg.update(over)
    return msg


@dataclass
class ExpiryLoad:
    """Documents of ``owners`` investors over simulated run days ``first_day + k``.

    Day 0's changes create every document; later days archive some and reactivate them
    (Active → Archived → Active), move some ExpiresAt out of the window and back, and
    replay old Versions. ``changes(k)`` are the messages to send before the run of day k.
    """

    seed: int
    first_day: date
    days: int = 6
    owners: int = 50
    thresholds: tuple[int, ...] = DEFAULT_THRESHOLDS
    acked: list[Acked] = field(default_factory=list)
    states_at_run: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _plan: dict[int, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        plan: dict[int, list[tuple[str, dict[str, Any]]]] = {k: [] for k in range(self.days)}
        for _ in range(self.owners):
            owner, person = str(uuid.uuid4()), str(uuid.uuid4())
            for _ in range(rng.randint(1, 3)):
                doc = str(uuid.uuid4())
                left = (
                    rng.randint(-1, self.days + 2) if rng.random() < 0.85 else rng.randint(27, 33)
                )
                first = person_document(
                    document_id=doc,
                    owner=owner,
                    person=person,
                    expires=self.first_day + timedelta(days=left),
                    version=1,
                )
                plan[0].append(("create", first))
                roll = rng.random()
                if roll < 0.15:  # archived on day a, active again on day b
                    a = rng.randint(1, self.days - 2)
                    b = rng.randint(a + 1, self.days - 1)
                    plan[a].append(("archive", {**first, "Version": 2, "Status": "Archived"}))
                    plan[b].append(("unarchive", {**first, "Version": 3}))
                elif roll < 0.25:  # ExpiresAt moved far out, then back to the first date
                    a = rng.randint(1, self.days - 2)
                    b = rng.randint(a + 1, self.days - 1)
                    far = (self.first_day + timedelta(days=400)).isoformat()
                    plan[a].append(("move-out", {**first, "Version": 2, "ExpiresAt": far}))
                    plan[b].append(("move-back", {**first, "Version": 4}))
                    plan[b].append(("replay-old", {**first, "Version": 2, "ExpiresAt": far}))
                elif roll < 0.3:  # deleted for good
                    a = rng.randint(1, self.days - 1)
                    plan[a].append(("delete", {**first, "Version": 2, "IsDeleted": True}))
        self._plan = plan

    def day(self, k: int) -> date:
        return self.first_day + timedelta(days=k)

    def changes(self, k: int) -> list[tuple[str, dict[str, Any]]]:
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        return [(kind, {**msg, "OccurredAt": stamp}) for kind, msg in self._plan.get(k, [])]

    def snapshot(self, k: int) -> dict[str, dict[str, Any]]:
        """Record the documents' states the run of day k must see (call before the run)."""
        self.states_at_run[k] = newest(self.acked, "DocumentId")
        return self.states_at_run[k]

    def expected(self, run_days: Sequence[int]) -> dict[tuple[str, int], int]:
        """(DocumentId, ThresholdDays) → the day whose run must remind it (seed 001: all
        crossed thresholds are marked, only t* = min(crossed - marked) is sent)."""
        marked: dict[str, set[int]] = {}
        out: dict[tuple[str, int], int] = {}
        for k in run_days:
            today = self.day(k)
            window = scan_window(today, self.thresholds)
            for doc_id, d in self.states_at_run[k].items():
                expires = date.fromisoformat(d["ExpiresAt"])
                if d["Status"] != "Active" or d["IsDeleted"] or expires not in window:
                    continue
                todo = crossed(days_left(expires, today), self.thresholds) - marked.get(
                    doc_id, set()
                )
                if todo:
                    out[(doc_id, min(todo))] = k
                    marked.setdefault(doc_id, set()).update(todo)
        return out

    def by_kind(self) -> Counter[str]:
        return Counter(a.kind for a in self.acked)


# ---------------------------------------------------------------------- automation


def wire(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True))


def one_utc_day(first: datetime, second: datetime) -> tuple[datetime, datetime]:
    """Two send instants (``first`` <= ``second``) on one UTC day: as they are, or, when
    midnight UTC falls between them, both moved later so that ``first`` is just after it."""
    if first.astimezone(UTC).date() == second.astimezone(UTC).date():
        return first, second
    midnight = datetime.combine(second.astimezone(UTC).date(), time(), tzinfo=UTC)
    shift = midnight + timedelta(seconds=5) - first
    return first + shift, second + shift


@dataclass
class AutomationLoad:
    """One business unit (UTC), two DateBased settings due at the ``send_at`` instants (on
    one UTC day: ``one_utc_day``), one ThresholdCondition setting (Booked ≥ 90,
    OncePerSource) and ``sources`` Booking sources, a share of them changed and reverted
    while their rows are far from due."""

    seed: int
    send_at: tuple[datetime, datetime]
    sources: int = 60
    margin: float = 30.0
    bu: uuid.UUID = field(default_factory=uuid.uuid4)
    acked_sources: list[Acked] = field(default_factory=list)
    settings: list[ReminderSettingChanged] = field(default_factory=list)
    skipped_changes: int = 0
    kinds: dict[uuid.UUID, str] = field(default_factory=dict)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    """Now: the wall clock for a live load; a fixed instant for a test of its rules."""
    day: date = field(init=False)
    """The UTC day of the send instants: every source's ExpiresOn."""

    def __post_init__(self) -> None:
        days = sorted({t.astimezone(UTC).date() for t in self.send_at})
        if len(days) != 1:
            raise ValueError(
                "AutomationLoad: the send instants must fall on one UTC day (a source has one "
                f"ExpiresOn date), got {', '.join(d.isoformat() for d in days)}; see one_utc_day"
            )
        self.day = days[0]
        self.rng = random.Random(self.seed)
        for at in self.send_at:
            self.settings.append(
                ReminderSettingChanged(
                    setting_guid=uuid.UUID(int=self.rng.getrandbits(128)),
                    business_unit_id=self.bu,
                    source_type="Booking",
                    trigger_type=TriggerType.DATE_BASED,
                    trigger_key="ExpiresOn",
                    offsets_days=[0],
                    send_time_local=at.astimezone(UTC).time().replace(microsecond=0),
                    active=True,
                    version=1,
                )
            )
        self.settings.append(
            ReminderSettingChanged(
                setting_guid=uuid.UUID(int=self.rng.getrandbits(128)),
                business_unit_id=self.bu,
                source_type="Booking",
                trigger_type=TriggerType.THRESHOLD_CONDITION,
                trigger_key="Capacity",
                threshold=Threshold(
                    metric_key="Booked",
                    value=90,
                    comparator=Comparator.GTE,
                    firing_policy=FiringPolicy.ONCE_PER_SOURCE,
                ),
                active=True,
                version=1,
            )
        )

    def setup_messages(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(topic, key, payload): the business unit and the settings, sent before any source."""
        unit = BusinessUnitChanged(business_unit_id=self.bu, time_zone_id="UTC", version=1)
        out = [(UNITS_TOPIC, str(self.bu), wire(unit))]
        out += [(SETTINGS_TOPIC, str(s.setting_guid), wire(s)) for s in self.settings]
        return out

    def _source(self, guid: uuid.UUID, version: int, **attrs: Any) -> dict[str, Any]:
        active = attrs.pop("active", True)
        src = SourceEntityChanged(
            source_type="Booking",
            source_guid=guid,
            business_unit_id=self.bu,
            version=version,
            occurred_at=self.clock(),
            is_active=active,
            attributes=attrs,
        )
        return wire(src)

    def plan(self) -> list[tuple[float, str, uuid.UUID]]:
        """(seconds after the load starts, kind, source): the first version of every source,
        then the changes and reverts a few seconds later."""
        out: list[tuple[float, str, uuid.UUID]] = []
        for i in range(self.sources):
            guid = uuid.UUID(int=self.rng.getrandbits(128))
            at = i * 0.3
            out.append((at, "create", guid))
            roll = self.rng.random()
            kind = (
                "plain"
                if roll < 0.35
                else "date-revert"
                if roll < 0.5
                else "deactivate-revert"
                if roll < 0.65
                else "deactivate"
                if roll < 0.75
                else "metric-revert"
                if roll < 0.9
                else "metric-late"
            )
            self.kinds[guid] = kind
            if kind != "plain":
                out.append((at + self.rng.uniform(2, 6), kind + ":1", guid))
                if kind.endswith("revert"):
                    out.append((at + self.rng.uniform(7, 12), kind + ":2", guid))
        return sorted(out, key=lambda x: x[0])

    def message(self, kind: str, guid: uuid.UUID, version: int) -> dict[str, Any] | None:
        # The day of the send instants, not the clock's: a load started before midnight UTC
        # whose rows are due after it wants them then, not a day early (due at once).
        today = self.day
        # A source deactivated for good never meets the threshold: a threshold row is due at
        # once, so it could be dispatched before the deactivation whatever the margin.
        low = self.kinds.get(guid) in {"deactivate", "metric-late"}
        base = {"ExpiresOn": today.isoformat(), "Booked": 50 if low else 95}
        if kind == "create":
            return self._source(guid, version, **base)
        name, _, step = kind.partition(":")
        removes = step == "1" or name == "metric-late"
        if removes and (min(self.send_at) - self.clock()).total_seconds() < self.margin:
            self.skipped_changes += 1
            return None
        if name == "date-revert":
            later = (today + timedelta(days=1)).isoformat()
            return self._source(
                guid, version, **{**base, "ExpiresOn": later if step == "1" else today.isoformat()}
            )
        if name in {"deactivate-revert", "deactivate"}:
            return self._source(guid, version, active=step != "1", **base)
        if name == "metric-revert":
            return self._source(guid, version, **{**base, "Booked": 50 if step == "1" else 95})
        return self._source(guid, version, **{**base, "Booked": 95})  # metric-late: met later

    def expected(self, until: datetime) -> tuple[dict[str, datetime], dict[str, str], int]:
        """SchedulerKey → ScheduledOn of every row the acknowledged sources must have
        dispatched by ``until``; keys an earlier state ensured that the newest does not
        (→ reason); and how many wanted rows are not due by ``until``."""
        providers = default_providers()
        by_source: dict[str, list[Acked]] = {}
        for a in self.acked_sources:
            by_source.setdefault(a.payload["SourceGuid"], []).append(a)
        expected: dict[str, datetime] = {}
        ever: dict[str, datetime] = {}
        final_all: set[str] = set()
        not_due = 0
        for acks in by_source.values():
            ordered = sorted(acks, key=lambda a: a.payload["Version"])
            final_keys: dict[str, datetime] = {}
            for i, a in enumerate(ordered):
                src = SourceEntityChanged.model_validate(a.payload)
                for setting in self.settings:
                    provider = providers.trigger(setting.trigger_type.value)
                    assert provider is not None
                    ev = provider.evaluate(TriggerInput(setting, src, "UTC", a.acked_at))
                    for c in ev.ensure:
                        ever.setdefault(c.key, c.scheduled_on)
                        if i == len(ordered) - 1:
                            final_keys[c.key] = c.scheduled_on
            final_all.update(final_keys)
            for key, on in final_keys.items():
                if on <= until:
                    expected[key] = on
                else:
                    not_due += 1
        forbidden = {
            k: "not due yet" if k in final_all else "superseded or deactivated"
            for k in ever
            if k not in expected
        }
        return expected, forbidden, not_due
