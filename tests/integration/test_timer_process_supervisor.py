"""The worker's side of its timer process (streams/timer_process/supervisor.py) against a
real child process (devkit/procs/fake_timer_process.py): ready, wake-ups, snapshots that
join the worker's metrics, restarts with wake-ups kept, and stopping (or killing) it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devkit.wait import eventually
from streams.metrics import Metrics
from streams.timer_process.supervisor import TimerProcess

FAKE = "devkit.procs.fake_timer_process"  # run from the repository root, as pytest is
STUCK = "devkit.procs.stuck_timer_process"


def supervisor(
    tmp_path: Path,
    *extra: str,
    stop_timeout: float = 10.0,
    stall_seconds: float | None = None,
    kill_after: float | None = None,
) -> TimerProcess:
    log = tmp_path / "wakes.log"
    log.touch()
    return TimerProcess(
        Metrics(),
        "test:1",
        ["fake"],
        command=[sys.executable, "-m", FAKE, str(log), *extra],
        ready_timeout=30,
        stop_timeout=stop_timeout,
        stall_seconds=stall_seconds,
        kill_after=kill_after,
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


@pytest.mark.timeout(90)
async def test_a_stopped_child_is_not_ready_within_the_bound_and_ready_again_on_sigcont(
    tmp_path: Path,
) -> None:
    stall = 1.5
    tp = supervisor(tmp_path, "beat", stall_seconds=stall, kill_after=600)
    metrics = tp._metrics
    await tp.start()
    try:
        child = tp.pid
        assert child is not None and tp.ready and not tp.stalled
        os.kill(child, signal.SIGSTOP)
        stopped = time.monotonic()
        await eventually(lambda: tp.ready, until=lambda r: not r, timeout=30, what="stalled")
        noticed = time.monotonic() - stopped
        # The bound plus one watchdog tick and the last beat interval; far below kill_after.
        assert noticed < stall + 2, noticed
        assert tp.stalled and tp.pid == child
        await eventually(
            lambda: metrics.up._value.get(), until=lambda v: v == 0, timeout=5, what="up = 0"
        )
        assert metrics.stalls._value.get() == 1
        os.kill(child, signal.SIGCONT)
        await eventually(lambda: tp.ready, until=bool, timeout=10, what="ready again")
        assert tp.pid == child and metrics.restarts._value.get() == 0
        assert metrics.up._value.get() == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(tp.pid or 0, signal.SIGCONT)
        await tp.stop()


@pytest.mark.timeout(90)
async def test_a_child_silent_past_kill_after_is_killed_and_started_again(tmp_path: Path) -> None:
    tp = supervisor(tmp_path, "beat", stall_seconds=1.0, kill_after=3.0)
    metrics = tp._metrics
    await tp.start()
    try:
        first = tp.pid
        assert first is not None
        os.kill(first, signal.SIGSTOP)
        await eventually(
            lambda: (tp.pid, tp.ready),
            until=lambda v: v[0] != first and v[1],
            timeout=40,
            what="a new child, ready",
        )
        assert not _alive(first)
        assert metrics.stall_kills._value.get() == 1
        assert metrics.restarts._value.get() == 1
    finally:
        await tp.stop()


@pytest.mark.timeout(90)
async def test_a_schedule_stuck_in_an_await_stalls_the_child_while_it_beats_on() -> None:
    """The registry's loop stops turning (a run swallows its cancellation) while the child's
    event loop and beat go on: the schedule's promised turn runs out, the child is stalled
    (not ready, /health names the schedule), then killed and started again."""
    from streams.web.health import timer_process_check

    stall = 1.5
    tp = TimerProcess(
        Metrics(),
        "test:1",
        ["stuck"],
        command=[sys.executable, "-m", STUCK],
        ready_timeout=30,
        stop_timeout=5,
        stall_seconds=stall,
        kill_after=6.0,
    )
    metrics = tp._metrics
    await tp.start()
    try:
        first = tp.pid
        # Beats carry the schedule's promise, renewed every turn (every second).
        await eventually(
            lambda: tp._due, until=lambda due: "stuck" in due, timeout=10, what="a promise"
        )
        assert tp.ready and not tp.stalled and metrics.stalls._value.get() == 0
        tp.wake("stuck", None)
        woken = time.monotonic()
        await eventually(lambda: tp.ready, until=lambda r: not r, timeout=30, what="stalled")
        noticed = time.monotonic() - woken
        what, late = tp.late
        assert what == "stuck" and late > stall, (what, late)
        assert tp.silent_for < 1.0  # still beating: only the schedule's loop is stuck
        print(
            f"\nstalled {noticed:.2f}s after the wake-up that got stuck ({what} late {late:.2f}s)"
        )
        # Max duration (0.5 s), the bound, a watchdog tick and a beat interval.
        assert noticed < 0.5 + stall + 2, noticed
        await eventually(
            lambda: metrics.stalls._value.get(), until=lambda n: n == 1, timeout=5, what="1 stall"
        )
        assert tp.pid == first
        assert timer_process_check(tp) == f"stalled: stuck late by {tp.late[1]:.0f}s"
        await eventually(
            lambda: (tp.pid, tp.ready),
            until=lambda v: v[0] != first and v[1],
            timeout=40,
            what="a new child, ready",
        )
        assert first is not None and not _alive(first)
        assert metrics.stall_kills._value.get() == 1 and metrics.restarts._value.get() == 1
    finally:
        await tp.stop()


@pytest.mark.timeout(120)
async def test_the_timer_process_stops_cleanly_when_its_parent_is_gone_before_it_is_ready(
    database_url: str, kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """A worker that dies while its child starts closes the child's stdout: the child's first
    message (ready) finds the pipe closed. It stops as when its stdin ends (exit 0), it does
    not crash with a traceback (exit 1)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TOPIC_PREFIX": topic_prefix,
        "WORKER_DATA_DIR": str(tmp_path),
    }
    # Its stdout is a pipe nobody reads any more: the parent's end, gone before "ready".
    read_end, write_end = os.pipe()
    os.close(read_end)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "streams.timer_process",
        "--worker-id",
        "test:1",
        stdin=asyncio.subprocess.PIPE,
        stdout=write_end,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    os.close(write_end)
    try:
        _, err = await asyncio.wait_for(child.communicate(), 90)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    text = err.decode(errors="replace")
    assert child.returncode == 0, text[-3000:]
    assert "action=timer_process_parent_gone" in text and "Traceback" not in text, text[-3000:]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
