"""An input whose own work fails the same "database unavailable" way every time, on real
PostgreSQL: after ``same_failure_attempts`` identical failures, while the database answers a
probe, the message is dead-lettered with that reason and the partition moves on (the
messages beside it and after it are applied). A database that is down is retried instead.

The failure is PostgreSQL's own: a trigger cancels (SQLSTATE 57014, what statement_timeout
raises) every write of one setting, as a statement that times out on one input's work.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from db.connector import connection, ping
from devkit.harness.automation import make_runtime, setting_msg
from devkit.harness.automation_inputs import Inputs, unit_msg
from streams.contracts import REMINDER_SETTINGS
from streams.contracts.automation import ReminderSettingChanged
from streams.input.consumer import ContractConsumer
from streams.metrics import AgentMetrics
from streams.runtime import Runtime

pytestmark = pytest.mark.integration

ATTEMPTS = 3


@pytest.fixture
async def runtime(database_url: str) -> AsyncIterator[Runtime]:
    rt = make_runtime(database_url)
    yield rt
    await rt.close()


class Message:
    def __init__(self, offset: int, value: bytes) -> None:
        self.tp = "settings-0"
        self.topic = "settings"
        self.partition = 0
        self.offset = offset
        self.key = b"k"
        self.value = value
        self.headers: list[tuple[str, bytes]] = []
        self.timestamp = None


class Event:
    def __init__(self, offset: int, setting: ReminderSettingChanged) -> None:
        self.message = Message(offset, setting.to_json())


class Dlq:
    """The DLQ topic: what was sent, with its headers."""

    def __init__(self) -> None:
        self.sent: list[dict[str, bytes]] = []

    async def send(self, *, key: Any, value: Any, headers: Any) -> asyncio.Future[None]:
        self.sent.append(dict(headers))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def cancel_writes_of(pool: asyncpg.Pool, setting: uuid.UUID) -> None:
    await pool.execute(
        f"""
        CREATE FUNCTION pg_temp_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.setting_guid = '{setting}' THEN
                RAISE EXCEPTION 'canceling statement due to statement timeout'
                    USING ERRCODE = '57014';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER cancel_one BEFORE INSERT OR UPDATE ON automation.reminder_settings
            FOR EACH ROW EXECUTE FUNCTION pg_temp_cancel();
        """
    )


def consumer(runtime: Runtime, inputs: Inputs, dlq: Dlq, healthy: Any) -> ContractConsumer[Any]:
    async def no_sleep(_: float) -> None:
        return None

    return ContractConsumer(
        REMINDER_SETTINGS,
        inputs.appliers[ReminderSettingChanged],
        dlq,  # type: ignore[arg-type]
        AgentMetrics(CollectorRegistry()),
        sleep=no_sleep,
        same_failure_attempts=ATTEMPTS,
        healthy=healthy,
    )


async def stored(pool: asyncpg.Pool) -> set[uuid.UUID]:
    return {
        r["setting_guid"]
        for r in await pool.fetch("SELECT setting_guid FROM automation.reminder_settings")
    }


async def test_the_same_failure_while_the_database_answers_is_dead_lettered_and_the_rest_flows(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    inputs = Inputs(runtime)
    await inputs.send(unit_msg())
    bad, before, after, later = (uuid.uuid4() for _ in range(4))
    await cancel_writes_of(pool, bad)
    calls = []

    async def apply(batch: Any) -> Any:
        calls.append(len(batch))
        return await inputs.appliers[ReminderSettingChanged](batch)

    async def healthy() -> bool:
        async with connection(await runtime.pool(), timeout=5) as conn:
            await ping(conn, timeout=5)
        return True

    dlq = Dlq()
    loop = consumer(runtime, inputs, dlq, healthy)
    loop.apply = apply
    batch = [Event(i, setting_msg(g)) for i, g in enumerate((before, bad, after))]
    # Today's loop retries this batch forever: the timeout says so.
    await asyncio.wait_for(loop.handle_events(batch), timeout=30)  # type: ignore[arg-type]
    # The batch 3 times, then one by one: the bad one 3 times, the others once.
    assert calls == [3] * ATTEMPTS + [1] + [1] * ATTEMPTS + [1]
    assert await stored(pool) == {before, after}
    assert len(dlq.sent) == 1
    headers = dlq.sent[0]
    assert headers["dlq-source-offset"] == b"1"
    assert headers["dlq-error-kind"] == b"processing"
    assert headers["dlq-reason"].decode() == (
        f"the same failure {ATTEMPTS} times in a row while the database answered: "
        "DatabaseUnavailable [57014]: QueryCanceledError [57014]"
    )
    # The partition moves on: a later input is applied at once.
    await asyncio.wait_for(loop.handle_events([Event(3, setting_msg(later))]), timeout=30)  # type: ignore[arg-type]
    assert await stored(pool) == {before, after, later}


async def test_a_database_that_does_not_answer_is_retried_not_dead_lettered(
    runtime: Runtime, pool: asyncpg.Pool
) -> None:
    inputs = Inputs(runtime)
    await inputs.send(unit_msg())
    bad = uuid.uuid4()
    await cancel_writes_of(pool, bad)
    probes = []

    async def down() -> bool:
        probes.append(1)
        if len(probes) == 4:  # the "database" comes back: the write goes through
            await pool.execute("DROP TRIGGER cancel_one ON automation.reminder_settings")
        return False

    dlq = Dlq()
    loop = consumer(runtime, inputs, dlq, down)
    await asyncio.wait_for(loop.handle_events([Event(0, setting_msg(bad))]), timeout=30)  # type: ignore[arg-type]
    assert dlq.sent == [] and await stored(pool) == {bad}
    assert len(probes) == 4
