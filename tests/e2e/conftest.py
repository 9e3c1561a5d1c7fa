"""E2E fixtures: a database and topics per module, and worker processes started as a user would."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATABASE_URL, _admin, forget_topics, with_database


@pytest.fixture(scope="module")
def module_database_url(template_database: str) -> Iterator[str]:
    name = f"m_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"'))
    yield with_database(DATABASE_URL, name)
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="module")
def module_topic_prefix() -> Iterator[str]:
    prefix = f"m{uuid.uuid4().hex[:10]}."
    yield prefix
    forget_topics(prefix)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")
