"""The connection budget's arithmetic: pools derived from DB_MAX_CONNECTIONS_PER_WORKER."""

from __future__ import annotations

import pytest

from db.server import ConnectionLimits
from streams.connection_budget import plan, problem
from streams.settings import Settings


def test_the_default_budget_holds_the_read_pool() -> None:
    p = plan(Settings())
    assert (p.budget, p.processes, p.pool_size, p.read, p.listen, p.total) == (21, 2, 9, 1, 1, 20)
    assert p.describe() == "20 of 21 (2 pools of 9 + 1 read + 1 LISTEN)"
    # One more connection gives the pools of 10 a worker had before it had a read pool.
    assert plan(Settings(db_max_connections_per_worker=22)).pool_size == 10


@pytest.mark.parametrize(
    ("budget", "timer_process", "pool_max", "pool", "total"),
    [
        (12, True, 10, 5, 12),
        (13, True, 10, 5, 12),  # an odd connection left over is not used
        (4, True, 10, 1, 4),
        (12, False, 10, 10, 12),
        (40, True, 10, 10, 22),  # DB_POOL_MAX_SIZE still caps each pool
        (40, False, 4, 4, 6),
    ],
)
def test_pools_are_derived_from_the_budget(
    budget: int, timer_process: bool, pool_max: int, pool: int, total: int
) -> None:
    s = Settings(
        db_max_connections_per_worker=budget,
        worker_timer_process=timer_process,
        db_pool_max_size=pool_max,
    )
    p = plan(s)
    assert (p.pool_size, p.total) == (pool, total)
    assert p.total <= budget


def test_a_budget_that_leaves_a_process_no_pool_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"DB_MAX_CONNECTIONS_PER_WORKER=3 .*WEB_READ_POOL_SIZE"):
        plan(Settings(db_max_connections_per_worker=3))


def test_the_check_names_the_budget_and_the_server_settings() -> None:
    limits = ConnectionLimits(max_connections=100, superuser_reserved=3, reserved=2)
    assert limits.available == 95
    assert problem(Settings(db_max_connections_per_worker=95), limits) is None
    text = problem(Settings(db_max_connections_per_worker=96), limits)
    assert text is not None
    assert "DB_MAX_CONNECTIONS_PER_WORKER=96" in text
    assert (
        "max_connections=100 - superuser_reserved_connections=3 - reserved_connections=2 = 95"
        in text
    )
