"""The worker's side of its timer process (streams/timer_process/supervisor.py) against a
real child process (tests/support/fake_timer_process.py): ready, wake-ups, snapshots that
join the worker's metrics, restarts with wake-ups kept, and stopping (or killing) it."""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devkit.wait import eventually
from streams.metrics import Metrics
from streams.timer_process.supervisor import TimerProcess

FAKE = "tests.support.fake_timer_process"  # run from the repository root, as pytest is


def supervisor(tmp_path: Path, *extra: str, stop_timeout: float = 10.0) -> TimerProcess:
    log = tmp_path / "wakes.log"
    log.touch()
    return TimerProcess(
        Metrics(),
        "test:1",
        ["fake"],
        command=[sys.executable, "-m", FAKE, str(log), *extra],
        ready_timeout=30,
        stop_timeout=stop_timeout,
    )


def wakes(tmp_path: Path) -> list[str]:
    return (tmp_path / "wakes.log").read_text().splitlines()


async def test_wakes_snapshots_restart_and_stop(tmp_path: Path) -> None:
    tp = supervisor(tmp_path)
    metrics = tp._metrics
    await tp.start()
    try:
        assert tp.ready and tp.pid is not None
        at = datetime(2030, 1, 1, tzinfo=UTC)
        tp.wake("fake", at)
        tp.wake("fake", None)
        await eventually(
            lambda: wakes(tmp_path), until=lambda w: len(w) == 2, timeout=10, what="2 wakes"
        )
        assert wakes(tmp_path) == [f"fake {at.isoformat()}", "fake None"]
        assert await tp.refresh()
        assert tp.timers == [{"name": "fake", "counts": {"wakes": 2}}]
        assert metrics.up._value.get() == 1

        first = tp.pid
        os.kill(first, signal.SIGKILL)
        await eventually(lambda: tp.ready, until=lambda r: not r, timeout=10, what="down")
        # Down: wake-ups are kept, the earliest per schedule, and sent once it is back.
        tp.wake("fake", datetime(2031, 1, 1, tzinfo=UTC))
        tp.wake("fake", at)
        assert not await tp.refresh()  # nobody to ask: keeps the last snapshot
        assert tp.timers[0]["counts"]["wakes"] == 2
        await eventually(lambda: tp.ready, until=bool, timeout=20, what="restarted")
        assert tp.pid != first
        assert metrics.restarts._value.get() == 1
        await eventually(
            lambda: wakes(tmp_path), until=lambda w: len(w) == 3, timeout=10, what="3 wakes"
        )
        assert wakes(tmp_path)[2] == f"fake {at.isoformat()}"
    finally:
        child = tp.pid
        await tp.stop()
    assert child is not None and not _alive(child)
    assert metrics.up._value.get() == 0


async def test_the_merged_registry_shows_the_childs_families(tmp_path: Path) -> None:
    parent = Metrics()
    tp = TimerProcess(
        parent,
        "test:1",
        ["fake"],
        command=[sys.executable, "-m", FAKE, str(tmp_path / "w.log")],
    )
    await tp.start()
    try:
        tp.wake("fake", None)
        await eventually(
            lambda: _refreshed(tp, parent),
            until=lambda v: v == 1,
            timeout=10,
            what="fake_wakes_total = 1 in the parent's registry",
        )
    finally:
        await tp.stop()


async def _refreshed(tp: TimerProcess, parent: Metrics) -> float | None:
    await tp.refresh()
    return parent.registry.get_sample_value("fake_wakes_total")


@pytest.mark.timeout(60)
async def test_a_child_that_ignores_stop_is_killed_after_the_timeout(tmp_path: Path) -> None:
    tp = supervisor(tmp_path, "stubborn", stop_timeout=1.0)
    await tp.start()
    child = tp.pid
    assert child is not None
    await tp.stop()
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
