"""Document expiry test helpers: wire-format person documents, the real applier and run handler
on a test database, and readers of the ledger and the outbox."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from unittest.mock import MagicMock

import asyncpg

from streams.clock import ManualClock
from streams.contracts import PERSON_DOCUMENTS, decode
from streams.contracts.profile import PersonDocumentChanged
from streams.input.consumer import Decoded
from streams.runtime import Runtime
from streams.settings import Settings
from streams.slices.profile.documents import PersonDocumentsApplier
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.run import DocumentExpiryRun, ExpiryConfig
from streams.slices.profile.work import Fanout, InlineFanout, OwnersWork, RunOrder
from streams.tables.cache import KeyCache

# A daily slot at the default cron time; its UTC date is what DaysLeft counts from.
SLOT = datetime(2026, 6, 10, 0, 30, tzinfo=UTC)
TODAY = SLOT.date()
REMINDER_TOPIC = "pin.profile.document-expiry-reminders.v1"
CIPHER = "CIPHER-7f3a-secret-payload"
MASK = "45** ****12"


def person_document(**overrides: Any) -> dict[str, Any]:
    """A valid pin.profile.person-documents.v1 payload (PascalCase); ExpiresAt may be given as
    a ``date`` or as ``DaysLeft`` relative to TODAY."""
    left = overrides.pop("DaysLeft", None)
    expires = overrides.pop("ExpiresAt", TODAY + timedelta(days=left) if left is not None else None)
    msg: dict[str, Any] = {
        "ContractVersion": 1,
        "DocumentId": str(uuid.uuid4()),
        "OwnerUserId": str(uuid.uuid4()),
        "PersonId": str(uuid.uuid4()),
        "Type": "InternationalPassport",
        "NumberMask": MASK,
        "ExpiresAt": expires.isoformat() if isinstance(expires, date) else expires,
        "Status": "Active",
        "IsDeleted": False,
        "Version": 1,
        "OccurredAt": (SLOT - timedelta(days=40)).isoformat(),
        "PayloadCipher": CIPHER,
    }
    msg.update(overrides)
    return msg


def parsed(msg: dict[str, Any]) -> PersonDocumentChanged:
    return decode(PERSON_DOCUMENTS, json.dumps(msg).encode())


def make_runtime(database_url: str, now: datetime = SLOT, **settings: Any) -> Runtime:
    return Runtime(Settings(database_url=database_url, **settings), clock=ManualClock(now))


class MemoryTable(dict[str, Any]):
    """Stands in for the Faust table under KeyCache (the table itself is Faust's; e2e tests
    run the real one): a named dict."""

    def __init__(self, name: str = "profile-expiry-marks") -> None:
        super().__init__()
        self.name = name


def memory_cache(runtime: Runtime) -> KeyCache:
    return KeyCache(MemoryTable(), runtime.metrics.agents)


def owners_work(order: RunOrder, owners: Sequence[uuid.UUID]) -> OwnersWork:
    """The work item the Kafka fan-out would send for ``owners`` of one run."""
    return OwnersWork(
        name=order.name,
        run_id=order.run_id,
        as_of=order.as_of,
        thresholds_days=list(order.thresholds),
        owner_user_ids=list(owners),
    )


class AgentFanout:
    """Hands each batch to the per-owner worker as its agent would (``apply`` with one event
    per work item; the event only routes cache writes to a changelog partition)."""

    waits = False

    def __init__(self, owners: OwnerWorker) -> None:
        self.owners = owners

    async def start(self) -> None:
        return None

    async def send(self, order: RunOrder, owners: Sequence[uuid.UUID]) -> None:
        # One owner per item here, so each owner's outcome is its own item's.
        await self.owners([Decoded(MagicMock(), owners_work(order, [o])) for o in owners])

    async def close(self) -> None:
        return None


class Harness:
    """The profile slice's parts on one test database, as the worker wires them."""

    def __init__(
        self,
        database_url: str,
        *,
        thresholds: Sequence[int] = (30, 7, 1, 0),
        batch_size: int = 500,
        now: datetime = SLOT,
        cache: bool = False,
        **settings: Any,
    ) -> None:
        self.runtime = make_runtime(database_url, now, **settings)
        self.metrics = self.runtime.metrics.family(DocumentExpiryMetrics)
        self.cache = memory_cache(self.runtime) if cache else None
        self.owners = OwnerWorker(self.runtime, self.metrics, self.cache)
        self.applier = PersonDocumentsApplier(self.runtime)
        self.config = ExpiryConfig(thresholds=tuple(thresholds), batch_size=batch_size)

    def run(self, fanout: Fanout | None = None, **config: Any) -> DocumentExpiryRun:
        """The run handler; by default inline, or as the agent does it when the harness has a
        cache."""
        cfg = ExpiryConfig(
            thresholds=config.pop("thresholds", self.config.thresholds),
            batch_size=config.pop("batch_size", self.config.batch_size),
            **config,
        )
        if fanout is None:
            fanout = (
                AgentFanout(self.owners) if self.cache is not None else InlineFanout(self.owners)
            )
        return DocumentExpiryRun(self.runtime, fanout, cfg, metrics=self.metrics)

    async def apply(self, *messages: dict[str, Any]) -> None:
        await self.applier([Decoded(MagicMock(), parsed(m)) for m in messages])

    async def close(self) -> None:
        await self.runtime.close()


async def marks(pool: asyncpg.Pool) -> set[tuple[str, int]]:
    rows = await pool.fetch(
        "SELECT document_id, threshold_days FROM profile.document_expiry_reminders"
    )
    return {(str(r["document_id"]), int(r["threshold_days"])) for r in rows}


async def reminder_events(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    """Payloads of the reminder events in the outbox, in insertion order, with their key and
    headers under ``_key`` / ``_headers``."""
    rows = await pool.fetch(
        "SELECT key, payload, headers FROM ops.outbox WHERE topic LIKE '%' || $1 ORDER BY id",
        REMINDER_TOPIC,
    )
    out = []
    for r in rows:
        body = json.loads(r["payload"])
        body["_key"] = r["key"]
        body["_headers"] = r["headers"]
        out.append(body)
    return out


def items(events: Sequence[dict[str, Any]]) -> set[tuple[str, int, int]]:
    """(DocumentId, ThresholdDays, DaysLeft) of every document in ``events``."""
    return {
        (d["DocumentId"], d["ThresholdDays"], d["DaysLeft"]) for e in events for d in e["Documents"]
    }


async def seed_documents(
    pool: asyncpg.Pool, owners: Sequence[uuid.UUID], per_owner: int, expires_at: date
) -> None:
    """``per_owner`` Active documents for each of ``owners`` expiring on ``expires_at``,
    written straight into the projection (as the applier would store them; fast for the
    tens of thousands a large owner needs)."""
    await pool.execute(
        """
        INSERT INTO profile.person_documents (document_id, owner_user_id, person_id, type,
            number_mask, expires_at, status, is_deleted, version, occurred_at, fingerprint)
        SELECT gen_random_uuid(), o, gen_random_uuid(), 'InternationalPassport', $4, $3,
               'Active', false, 1, $5, 'seeded'
        FROM unnest($1::uuid[]) AS o CROSS JOIN generate_series(1, $2)
        """,
        list(owners),
        per_owner,
        expires_at,
        MASK,
        SLOT - timedelta(days=40),
    )
