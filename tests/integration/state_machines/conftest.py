"""The state machines' database (one per test, reset between examples) and their summary:
how many examples each machine ran."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from db.connector import create_pool
from devkit import database
from tests.conftest import DATABASE_URL, reachable
from tests.integration.state_machines.world import EXAMPLES, EXAMPLES_RUN, STEPS, Loop, Shared


@pytest.fixture
def shared(template_database: str) -> Iterator[Shared]:
    """A loop, a database copied from the template, an observer's pool and the workers'
    runtimes on that loop, for every example of one test."""
    loop = Loop()
    name = f"sm_{uuid.uuid4().hex[:10]}"
    with reachable():
        url = loop.run(database.create_database(DATABASE_URL, name, template=template_database))
    pool = loop.run(create_pool(url, min_size=1, max_size=2))
    # The injected faults and the time jumps log thousands of lines an example: not read here.
    quiet = logging.getLogger("streams")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    world = Shared.open(loop, url, pool)
    try:
        yield world
    finally:
        quiet.setLevel(level)
        world.close()
        loop.run(pool.close())
        loop.run(database.drop_database(DATABASE_URL, name))
        loop.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if EXAMPLES_RUN:
        terminalreporter.section("state machines")
        terminalreporter.write_line(f"up to {EXAMPLES} examples of up to {STEPS} steps each")
        for test, n in sorted(EXAMPLES_RUN.items()):
            terminalreporter.write_line(f"{test}: {n} examples run")
