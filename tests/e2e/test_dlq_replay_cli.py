"""``python -m streams dlq replay`` as an operator runs it: dry run, replay, re-run, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import asyncpg
import pytest

from devkit.kafka import produce, read_to_end
from devkit.workers import ROOT
from streams.kafka_admin import contract_topic_names, ensure_topics
from streams.settings import Settings

pytestmark = pytest.mark.e2e

EVENTS = "pin.calendar.events.v1"
SECRET = b'{"OwnerUserId": "do-not-print-me"'  # a value the command must never print


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "dlq", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(480)  # three CLI runs of up to 120 s + a 60 s read
def test_dry_run_then_replay_then_nothing_new(
    kafka_bootstrap: str, module_database_url: str
) -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}."
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=prefix)
    asyncio.run(ensure_topics(settings, contract_topic_names(settings)))
    env = {
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TOPIC_PREFIX": prefix,
        "APP_ID": f"{prefix}app",
        "DATABASE_URL": module_database_url,
    }
    src, dlq = prefix + EVENTS, prefix + EVENTS + ".dlq"

    def headers(offset: int, **extra: str) -> list[tuple[str, bytes]]:
        return [
            ("dlq-reason", b"value is not valid JSON"),
            ("dlq-error-kind", b"json"),
            ("dlq-source-topic", src.encode()),
            ("dlq-source-partition", b"1"),
            ("dlq-source-offset", str(offset).encode()),
            *[(k, v.encode()) for k, v in extra.items()],
        ]

    asyncio.run(
        produce(
            kafka_bootstrap,
            dlq,
            [
                ("e1", SECRET, headers(10)),
                ("e2", SECRET, headers(11)),
                ("e3", SECRET[:8], headers(12, **{"dlq-value-truncated": "true"})),
            ],
        )
    )

    dry = run(env, "replay", EVENTS, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would replay 2, skipped truncated 1" in dry.stdout
    assert dry.stdout.count("kind=json action=replay") == 2
    assert "action=skip:truncated" in dry.stdout
    assert "value is not valid JSON" in dry.stdout and src in dry.stdout
    assert "do-not-print-me" not in dry.stdout + dry.stderr

    real = run(env, "replay", EVENTS)
    assert real.returncode == 0, real.stderr
    assert "replayed 2, skipped truncated 1" in real.stdout
    assert "do-not-print-me" not in real.stdout + real.stderr
    # The command has exited: everything it sent is on the topic, and nothing else may be.
    out = asyncio.run(read_to_end(kafka_bootstrap, src))
    assert sorted((r.key, r.value, r.partition) for r in out) == [
        (b"e1", SECRET, 1),
        (b"e2", SECRET, 1),
    ]
    assert all(dict(r.headers).keys() == {"dlq-replayed-from"} for r in out)

    again = run(env, "replay", dlq)
    assert again.returncode == 0, again.stderr
    assert "replayed 0, skipped truncated 0" in again.stdout
    # One audit row per replay command that was not a dry run: its topic, counts and actor.
    audit = asyncio.run(_audit(module_database_url))
    assert [(a["target"], a["outcome"]) for a in audit] == [
        (f"{dlq}:all", "changed"),
        (f"{dlq}:all", "unchanged"),
    ]
    assert [json.loads(a["details"])["replayed"] for a in audit] == [2, 0]
    assert all(a["actor"] and a["action"] == "dlq-replay" for a in audit)


async def _audit(url: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return list(
            await conn.fetch(
                "SELECT actor, action, target, outcome, details::text AS details "
                "FROM ops.console_audit ORDER BY id"
            )
        )
    finally:
        await conn.close()


def test_unknown_topic_and_bad_since_exit_2_with_a_message(kafka_bootstrap: str) -> None:
    env = {"KAFKA_BOOTSTRAP": kafka_bootstrap, "TOPIC_PREFIX": f"c{uuid.uuid4().hex[:10]}."}
    unknown = run(env, "replay", "pin.nothing.v1")
    assert unknown.returncode == 2
    assert "unknown topic 'pin.nothing.v1'" in unknown.stderr and EVENTS in unknown.stderr
    bad = run(env, "replay", EVENTS, "--since", "2026-13-45")
    assert bad.returncode == 2 and "is not an ISO-8601 date-time" in bad.stderr
    missing = run(env, "replay", EVENTS)  # a prefix whose topics were never created
    assert missing.returncode == 2 and "does not exist" in missing.stderr
