"""A worker's own store failing is infrastructure, not input: the classifier, the value-free
description of a store error, and the cache's fall-back (reads) and hold (writes)."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from db.connector import DatabaseUnavailable, InputRejected
from streams import faults
from streams.input.consumer import infrastructure
from streams.metrics import AgentMetrics
from streams.tables.cache import KeyCache, LocalStorageError, describe

# What rocksdict raises for a full disk (a bare Exception carrying RocksDB's status).
NO_SPACE = Exception(
    "IO error: No space left on device: While appending to file: "
    "/data/reminders/v1/tables/calendar-event-cache-0.db/000004.log: No space left on device"
)


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (LocalStorageError("t", "write", "x"), "local_storage"),
        (_chained(RuntimeError("wrapped"), LocalStorageError("t", "read", "x")), "local_storage"),
        (DatabaseUnavailable("gone"), "database"),
        (ConnectionResetError(), "database"),
        (asyncpg.exceptions.DiskFullError("53100"), "database"),
        # Bad input, or a bug of ours: only these may reach the DLQ.
        (InputRejected("22P02"), None),
        (asyncpg.exceptions.InvalidTextRepresentationError("22P02"), None),
        (ValueError("bad"), None),
        (NO_SPACE, None),  # raw, it says nothing of where it came from: the cache names it
    ],
)
def test_infrastructure_faults_are_told_from_what_may_be_the_messages_fault(
    exc: BaseException, expected: str | None
) -> None:
    assert infrastructure(exc) == expected


def test_a_cycle_in_the_chain_of_causes_ends() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert infrastructure(a) is None


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (NO_SPACE, "Exception: IO error: No space left on device"),
        (OSError(errno.ENOSPC, "No space left on device", "/data/x"), "OSError ENOSPC"),
        (PermissionError(errno.EACCES, "Permission denied"), "PermissionError EACCES"),
        (Exception("Corruption: block checksum mismatch: in file /d/1.sst"), None),
        (RuntimeError(), "RuntimeError"),
    ],
)
def test_a_store_error_is_described_without_its_file_or_key(
    exc: BaseException, text: str | None
) -> None:
    described = describe(exc)
    assert "/d" not in described and "/data" not in described
    if text is not None:
        assert described == text
    else:
        assert described == "Exception: Corruption: block checksum mismatch"


class FailingTable(dict[str, Any]):
    """Stands in for the Faust table: refuses reads or writes as a full or broken disk does."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "calendar-event-cache"
        self.writes_fail = 0
        self.reads_fail = False

    def __setitem__(self, key: str, value: Any) -> None:
        if self.writes_fail:
            self.writes_fail -= 1
            raise NO_SPACE
        super().__setitem__(key, value)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if self.reads_fail:
            raise NO_SPACE
        return super().get(key, default)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Ev:
    class message:  # the event's message, as Faust's events carry it
        partition = 0


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_a_write_the_store_refuses_holds_the_caller_until_it_takes_it() -> None:
    registry, table, clock = CollectorRegistry(), FailingTable(), Clock()
    seen: list[dict[str, Any]] = []
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        clock.t += delay
        seen.append(cache.failing())

    cache = KeyCache(table, AgentMetrics(registry), sleep=sleep, clock=clock)  # type: ignore[arg-type]
    table.writes_fail = 3
    await cache.put_many([(Ev(), "k1", {"v": 1, "fp": "a"}), (Ev(), "k2", {"v": 2, "fp": "b"})])  # type: ignore[list-item]

    assert dict(table) == {"k1": {"v": 1, "fp": "a"}, "k2": {"v": 2, "fp": "b"}}
    assert delays == [0.2, 0.4, 0.8]  # backoff, doubling
    assert seen[0] == {
        "write": {
            "reason": "local_storage_error",
            "error": "Exception: IO error: No space left on device",
            "for_s": 0.2,
            "errors": 1,
        }
    }
    assert seen[-1]["write"]["errors"] == 3
    assert cache.failing() == {}
    name = "calendar-event-cache"
    assert (
        _sample(registry, "reminders_stream_local_storage_errors_total", table=name, op="write")
        == 3
    )
    assert _sample(registry, "reminders_stream_local_storage_failing", table=name) == 0


async def test_a_read_the_store_fails_is_a_miss_until_it_works_again() -> None:
    registry, table = CollectorRegistry(), FailingTable()
    cache = KeyCache(table, AgentMetrics(registry))  # type: ignore[arg-type]
    await cache.put_many([(Ev(), "k", {"v": 1, "fp": "a"})])  # type: ignore[list-item]
    table.reads_fail = True
    assert cache.lookup(Ev(), "k") is None  # type: ignore[arg-type]
    assert cache.peek("k") is None
    name = "calendar-event-cache"
    assert cache.failing()["read"]["errors"] == 2
    assert _sample(registry, "reminders_stream_local_storage_failing", table=name) == 1
    assert (cache.hits, cache.misses) == (0, 1)  # PostgreSQL was asked
    table.reads_fail = False
    assert cache.lookup(Ev(), "k") == {"v": 1, "fp": "a"}  # type: ignore[arg-type]
    assert cache.failing() == {}
    assert (
        _sample(registry, "reminders_stream_local_storage_errors_total", table=name, op="read") == 2
    )
    assert _sample(registry, "reminders_stream_local_storage_failing", table=name) == 0


def test_a_single_put_the_store_refuses_raises_a_local_storage_error() -> None:
    table = FailingTable()
    cache = KeyCache(table, AgentMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    table.writes_fail = 1
    with pytest.raises(LocalStorageError) as raised:
        cache.put(Ev(), "k", 1)  # type: ignore[arg-type]
    assert infrastructure(raised.value) == "local_storage"
    assert raised.value.table == "calendar-event-cache" and raised.value.op == "write"


def test_a_point_armed_while_a_file_exists_raises_on_every_pass_until_it_is_removed(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "disk-full"
    code = (
        "import sys\n"
        "from streams import faults\n"
        f"flag = {str(flag)!r}\n"
        "open(flag, 'w').close()\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        faults.hit('cache.store_write')\n"
        "    except faults.InjectedFault:\n"
        "        print('raised', flush=True)\n"
        "import os; os.remove(flag)\n"
        "faults.hit('cache.store_write'); print('passed', flush=True)\n"
    )
    env = {**os.environ, "STREAMS_FAULT_WHILE": f"cache.store_write:{flag}"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["raised", "raised", "passed"]


def test_a_while_point_needs_a_known_point_and_a_file() -> None:
    with pytest.raises(ValueError, match="STREAMS_FAULT_WHILE"):
        faults._parse_while("no.such.point:/tmp/x")
    with pytest.raises(ValueError, match="STREAMS_FAULT_WHILE"):
        faults._parse_while("cache.store_write")
    assert faults._parse_while("cache.store_write:/tmp/a:b") == ("cache.store_write", "/tmp/a:b")


STREAMS = Path(__file__).resolve().parents[2] / "streams"


def test_the_cache_is_the_only_door_to_the_local_store() -> None:
    """Its errors are named where they happen (LocalStorageError): code that reached the
    store another way would raise rocksdict's bare Exception, which the consumer can only
    take for a bug (and dead-letter)."""
    door = STREAMS / "tables" / "cache.py"
    # Faust's store internals, which only the cache calls (streams/faust_compat/stores.py).
    internals = STREAMS / "faust_compat" / "stores.py"
    reaching = re.compile(r"\brocksdict\b|faust\.stores|_db_for_partition|\.table\[|\.table\.get\(")
    accessors = re.compile(r"\b(partition_dbs?|write_batch|estimated_keys)\(")
    for path in STREAMS.rglob("*.py"):
        if path not in (door, internals):
            text = path.read_text()
            assert not reaching.search(text), f"{path.relative_to(STREAMS)} reaches the store"
            assert not accessors.search(text), f"{path.relative_to(STREAMS)} reaches the store"
            if ".Table(" in text:  # a table is made only to be wrapped in a KeyCache
                assert path.name == "context.py" and "KeyCache(table" in text, path
