"""The input loop's rule for a failure that repeats: counted only while it is identical and
not contention, and raised as the input's own only when the database answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from db.connector import DatabaseUnavailable
from streams.contracts import TopicContract
from streams.contracts.base import Contract
from streams.input.consumer import ContractConsumer, RepeatedFailure, processing_reason
from streams.metrics import AgentMetrics


class Item(Contract):
    n: int


CONTRACT = TopicContract("in", Item, lambda m: str(m.n), "in")


def loop(
    failures: Sequence[BaseException], healthy: bool
) -> tuple[ContractConsumer[Any], list[int]]:
    calls: list[int] = []
    probes: list[int] = []

    async def apply(batch: Sequence[Any]) -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return "applied"

    async def no_sleep(_: float) -> None:
        return None

    async def probe() -> bool:
        probes.append(1)
        return healthy

    consumer = ContractConsumer(
        CONTRACT,
        apply,
        None,  # type: ignore[arg-type]
        AgentMetrics(CollectorRegistry()),
        sleep=no_sleep,
        same_failure_attempts=3,
        healthy=probe,
    )
    return consumer, probes


def cancelled() -> DatabaseUnavailable:
    return DatabaseUnavailable("QueryCanceledError [57014]", "57014")


async def test_the_same_failure_three_times_while_the_database_answers_is_the_inputs() -> None:
    consumer, probes = loop([cancelled()] * 3, healthy=True)
    with pytest.raises(RepeatedFailure) as raised:
        await consumer._apply_retrying([])
    assert probes == [1]
    assert processing_reason(raised.value) == (
        "the same failure 3 times in a row while the database answered: "
        "DatabaseUnavailable [57014]: QueryCanceledError [57014]"
    )


async def test_a_database_that_does_not_answer_is_retried() -> None:
    consumer, probes = loop([cancelled()] * 6, healthy=False)
    assert await consumer._apply_retrying([]) == "applied"
    assert len(probes) == 4  # from the third failure on, every time


async def test_different_failures_start_the_count_again() -> None:
    lost = DatabaseUnavailable("ConnectionDoesNotExistError", None)
    consumer, probes = loop([cancelled(), cancelled(), lost, cancelled(), cancelled()], True)
    assert await consumer._apply_retrying([]) == "applied"
    assert probes == []


@pytest.mark.parametrize("state", ["55P03", "40001", "40P01"])
async def test_contention_never_counts(state: str) -> None:
    consumer, probes = loop([DatabaseUnavailable("busy", state)] * 8, healthy=True)
    assert await consumer._apply_retrying([]) == "applied"
    assert probes == []


async def test_off_retries_forever() -> None:
    consumer, probes = loop([cancelled()] * 8, healthy=True)
    consumer.same_failure_attempts = 0
    assert await consumer._apply_retrying([]) == "applied"
    assert probes == []
