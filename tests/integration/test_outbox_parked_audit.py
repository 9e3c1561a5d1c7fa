"""``outbox retry|drop`` of a parked row is audited in ops.console_audit like every console
action: who, which row, why, the outcome; a missing row is audited as not_found."""

from __future__ import annotations

import argparse

import asyncpg
import pytest

from streams.outbox.cli import _run
from streams.settings import Settings

pytestmark = pytest.mark.integration


async def _parked(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval(
            "INSERT INTO ops.outbox_parked (id, topic, key, payload, created_at, parked_at, "
            "reason, error, refusals) SELECT coalesce(max(id), 0) + 1, 'some.topic', 'k', "
            "'{}', now(), now(), 'unknown_topic', 'UnknownTopicOrPartitionError', 3 "
            "FROM ops.outbox_parked RETURNING id"
        )
    )


async def test_retry_and_drop_are_audited_with_actor_and_reason(
    database_url: str, pool: asyncpg.Pool
) -> None:
    settings = Settings(database_url=database_url)
    retried, dropped = await _parked(pool), await _parked(pool)
    for command, ident in (("retry", retried), ("drop", dropped), ("drop", 999_999)):
        args = argparse.Namespace(command=command, id=ident, reason="topic fixed", actor="alice")
        assert await _run(settings, args) == (1 if ident == 999_999 else 0)
    audit = await pool.fetch(
        "SELECT actor, action, listing, target, reason, outcome, details "
        "FROM ops.console_audit ORDER BY id"
    )
    assert [(r["action"], r["target"], r["outcome"]) for r in audit] == [
        ("outbox-retry", str(retried), "changed"),
        ("outbox-drop", str(dropped), "changed"),
        ("outbox-drop", "999999", "not_found"),
    ]
    assert {(r["actor"], r["listing"], r["reason"]) for r in audit} == {
        ("alice", "outbox", "topic fixed")
    }
    assert audit[1]["details"] == {"topic": "some.topic", "parked_reason": "unknown_topic"}
