"""The reference model of the automation slice (seed 003, docs/rules.md), from the rules alone:
which scheduler keys the delivered state wants, when each is due, and what the operators
decided. It never reads the product's tables; the machine compares the outbox with it.

The world: one business unit, one DateBased reminder setting (TriggerKey ExpiresOn, offsets in
days, a send time, maybe ImmediateNotification) and two sources. Zones without DST, so a local
send time is one fixed instant (the DST rule itself is pinned elsewhere).

Rules it follows (seed 003 unless said):
- State messages: the newest Version of an entity wins; an older or equal one changes nothing.
- A DateBased occurrence ``(target, offset)`` is due at SendTimeLocal on ``target - offset``
  in the BU's zone; the key identifies (setting, source, target, offset), the send time does
  not (a send-time change moves the same key).
- Ensure: "Row Completed → trả tọa độ, không gửi lại" — a key is sent at most once; only the
  support-retry key (the console's re-send) sends it again, once per operator request.
- An immediate notification (ImmediateNotification) is due at once, once per (setting, source,
  target date).
- A key is never handed over before its due time, in database (true) time.
- An operator's cancel is a decision: the cancelled key is not sent afterwards unless an
  operator re-sends it.
- A key the state wants continuously from a planning moment well before its day, and still
  wants at the end, is sent (exactly once) by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

BU = UUID(int=0xB07)
SETTING = UUID(int=0x5E7)
SOURCES = (UUID(int=0xA1), UUID(int=0xA2))
ZONES = ("UTC", "Asia/Ho_Chi_Minh")
IMMEDIATE = "immediate"

# (source guid, target date, offset days or "immediate")
Identity = tuple[str, str, str]


@dataclass(frozen=True)
class SettingState:
    offsets: tuple[int, ...]
    send_time: time
    active: bool
    immediate: bool


@dataclass(frozen=True)
class SourceState:
    active: bool
    expires: date | None


@dataclass(frozen=True)
class UnitState:
    zone: str


State = SettingState | SourceState | UnitState


def identity_of(key: str) -> Identity | None:
    """The identity a reminder SchedulerKey names (reminder:setting:type:source:trigger:target:x)."""
    parts = key.split(":")
    if len(parts) != 7 or parts[0] != "reminder":
        return None
    return (parts[3], parts[5], parts[6])


def local_instant(day: date, at: time, zone: str) -> datetime:
    return datetime.combine(day, at, tzinfo=ZoneInfo(zone)).astimezone(UTC)


@dataclass
class Model:
    # entity ("unit", "setting", "source:<guid>") -> (version, state) as delivered
    applied: dict[str, tuple[int, State]] = field(default_factory=dict)
    # identities the state wants continuously since a planning moment well before their day
    live: dict[Identity, bool] = field(default_factory=dict)
    # identity -> step of the last accepted cancel
    cancelled: dict[Identity, int] = field(default_factory=dict)
    # identity -> {request id: step first accepted}
    resends: dict[Identity, dict[int, int]] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)

    def deliver(self, entity: str, version: int, state: State) -> bool:
        """A state message arrives: applied when its Version is newer."""
        current = self.applied.get(entity)
        if current is not None and version <= current[0]:
            return False
        self.applied[entity] = (version, state)
        return True

    def state(self, entity: str) -> State | None:
        found = self.applied.get(entity)
        return None if found is None else found[1]

    def wanted(self) -> dict[Identity, datetime | None]:
        """Every identity the current state wants, with its due instant (None: at once)."""
        setting, unit = self.state("setting"), self.state("unit")
        if not isinstance(setting, SettingState) or not isinstance(unit, UnitState):
            return {}
        if not setting.active:
            return {}
        out: dict[Identity, datetime | None] = {}
        for guid in SOURCES:
            source = self.state(f"source:{guid}")
            if not isinstance(source, SourceState) or not source.active or not source.expires:
                continue
            target = source.expires
            for offset in setting.offsets:
                due = local_instant(target - timedelta(days=offset), setting.send_time, unit.zone)
                out[(str(guid), target.isoformat(), str(offset))] = due
            if setting.immediate:
                out[(str(guid), target.isoformat(), IMMEDIATE)] = None
        return out

    def due(self, ident: Identity) -> datetime | None:
        return self.wanted().get(ident)

    def planned(self, now: datetime, sources: set[str]) -> None:
        """A planning moment (an applied input of ``sources``' pairs): identities wanted now
        whose day is well ahead become obligations; those no longer wanted lose theirs."""
        wanted = self.wanted()
        unit = self.state("unit")
        zone = unit.zone if isinstance(unit, UnitState) else "UTC"
        today = now.astimezone(ZoneInfo(zone)).date()
        for ident in list(self.live):
            if ident not in wanted:
                self.live[ident] = False
        for ident in wanted:
            target = date.fromisoformat(ident[1])
            day = target if ident[2] == IMMEDIATE else target - timedelta(days=int(ident[2]))
            if ident[0] in sources and day > today + timedelta(days=1):
                self.live[ident] = True

    def obligations(self) -> set[Identity]:
        wanted = self.wanted()
        return {
            i for i, live in self.live.items() if live and i in wanted and i not in self.cancelled
        }

    def first_resend(self, ident: Identity) -> int | None:
        found = self.resends.get(ident)
        return min(found.values()) if found else None
