"""E2E fixtures: a database and topics per module, worker processes started as a user would,
and a headless Chromium (selenium) for the operator pages."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from devkit import database
from devkit.browser import chrome
from devkit.tools import tool
from tests.conftest import DATABASE_URL, forget_topics, reachable


@pytest.fixture(scope="module")
def module_database_url(template_database: str) -> Iterator[str]:
    name = f"m_{uuid.uuid4().hex[:12]}"
    with reachable():
        url = asyncio.run(
            database.create_database(DATABASE_URL, name, template=template_database, timeout=10)
        )
    yield url
    with reachable():
        asyncio.run(database.drop_database(DATABASE_URL, name, timeout=10))


@pytest.fixture(scope="module")
def module_topic_prefix() -> Iterator[str]:
    prefix = f"m{uuid.uuid4().hex[:10]}."
    yield prefix
    forget_topics(prefix)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """Debian's chromium through chromedriver: missing in CI fails, elsewhere skips."""
    with chrome(tool("chromium"), tool("chromedriver"), width=1600, height=1400) as driver:
        yield driver
