"""bench/cpu.py: CPU of a process tree from /proc, and the per-event arithmetic."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench.cpu import CpuSplit, Sample, own_cpu, per_event, split_text, tagged, tree_cpu
from bench.expiry_support import cpu_bound_text

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


@contextlib.contextmanager
def done_child(script: str) -> Iterator[int]:
    """A Python child running ``script``, its pid once it has printed ``done`` (it then waits
    on stdin, alive while the caller reads it); killed afterwards."""
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "done"
            yield child.pid
        finally:
            child.kill()


def test_a_live_child_and_a_reaped_grandchild_count_in_the_tree() -> None:
    # The child burns 0.3 s itself, starts a grandchild that burns 0.3 s and reaps it, then
    # waits on stdin so that it is still alive when the tree is read.
    script = (
        BURN
        + "import subprocess, sys\n"
        + f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"
        + "print('done', flush=True)\nsys.stdin.readline()\n"
    )
    with done_child(script) as pid:
        seconds = tree_cpu([pid])
        assert 0.55 <= seconds < 5.0, seconds


def test_a_gone_process_counts_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    assert tree_cpu([2**22 + 1]) == 0.0


def test_per_event_divides_each_source_and_keeps_missing_ones_missing() -> None:
    start = Sample(processes=1.0, postgres=2.0, statements_ms=None, wal=1_000)
    end = Sample(processes=1.5, postgres=2.2, statements_ms=50.0, wal=301_000)
    got = per_event(start, end, 1000)
    assert got.wal_bytes == pytest.approx(300.0)
    assert got.processes == pytest.approx(500.0)
    assert got.postgres == pytest.approx(200.0)
    assert got.statements is None
    assert "500 µs" in got.text("workers") and "n/a" in got.text("workers")


def test_the_tag_goes_after_the_first_keyword() -> None:
    # pg_stat_statements drops a comment in front of the statement's first keyword.
    assert tagged("SELECT count(*) FROM t") == "SELECT /* bench */ count(*) FROM t"


def test_a_cpu_split_gives_each_sources_seconds_in_the_window() -> None:
    clock = {"a": 1.0, "b": 5.0}
    split = CpuSplit({"a": lambda: clock["a"], "b": lambda: clock["b"], "gone": lambda: None})
    split.start()
    clock["a"], clock["b"] = 3.5, 5.25
    got = split.stop()
    assert got == {"a": pytest.approx(2.5), "b": pytest.approx(0.25), "gone": None}
    assert split_text(got) == "a 2.5 s, b 0.2 s, gone n/a"


def test_a_process_own_cpu_leaves_its_live_children_out() -> None:
    # The child burns 0.3 s, starts a grandchild that burns 0.3 s, says so and stays alive;
    # the child says "done" once it has heard that, then waits on stdin.
    kid = BURN + "import sys\nprint('burnt', flush=True)\nsys.stdin.readline()\n"
    script = (
        BURN
        + "import subprocess, sys\n"
        + f"kid = subprocess.Popen([sys.executable, '-c', {kid!r}], stdin=subprocess.PIPE, "
        + "stdout=subprocess.PIPE, text=True)\n"
        + "assert kid.stdout.readline().strip() == 'burnt'\n"
        + "print('done', flush=True)\nsys.stdin.readline()\nkid.kill()\n"
    )
    with done_child(script) as pid:
        own, tree = own_cpu(pid), tree_cpu([pid])
        assert 0.25 <= own < tree - 0.25, (own, tree)


def test_the_cpu_bound_of_a_run_is_its_cpu_over_the_cores() -> None:
    cores = os.cpu_count() or 1
    text = cpu_bound_text({"PostgreSQL": 6.0 * cores, "Kafka": None}, bare_seconds=4.0)
    assert f"at least 6.0 s on {cores} cores = 1.50x the bare statement's 4.0 s" in text
    assert "PostgreSQL" in text and "Kafka n/a" in text
