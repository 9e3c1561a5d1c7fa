"""Freeze a worker (SIGSTOP) at a chosen moment, seen from PostgreSQL.

A worker is a process and its children (its timer process runs the dispatcher and the
relay): all of them are found, watched and frozen together.

A worker's database sessions are found through its own sockets (``/proc/<pid>/fd`` →
``/proc/net/tcp``: the local ports of its connections to the PostgreSQL port, matched
with ``pg_stat_activity.client_port``), so nothing depends on what the product sets as
``application_name``. ``stop_when`` polls a condition on those sessions, stops the
process, and keeps the stop only if the condition still holds with the process frozen
(otherwise it continues it and tries again), so "stopped in the middle of X" is checked,
not hoped for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable

import asyncpg

from devkit.workers import process_tree


def process_state(pid: int) -> str:
    """The kernel's state letter of ``pid`` (R, S, T = stopped, Z, ...); '' when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def local_ports_to(pid: int, remote_port: int) -> set[int]:
    """Local TCP ports of ``pid``'s connections to ``remote_port``."""
    inodes = _socket_inodes(pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, remote, inode = parts[1], parts[2], parts[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def backend_pids(conn: asyncpg.Connection, os_pid: int, pg_port: int) -> list[int]:
    """PostgreSQL backend pids serving the process ``os_pid`` and its children (any database)."""
    ports = sorted({p for member in _tree(os_pid) for p in local_ports_to(member, pg_port)})
    if not ports:
        return []
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[])", ports
    )
    return [r["pid"] for r in rows]


Holding = Callable[[asyncpg.Connection, list[int]], Awaitable[list[int]]]
"""Given the worker's backend pids, those that are in the state we want to freeze."""


async def stop_when(
    conn: asyncpg.Connection,
    os_pid: int,
    pg_port: int,
    holding: Holding,
    *,
    timeout: float,
    settle: float = 1.0,
) -> list[int]:
    """SIGSTOP ``os_pid`` while ``holding`` names some of its backends; return those backends.

    After the stop, the holding backends must be ``idle in transaction`` (the frozen worker
    is inside a transaction, not between two) and still satisfy ``holding``.
    """
    deadline = time.monotonic() + timeout
    attempts = 0
    while time.monotonic() < deadline:
        pids = await backend_pids(conn, os_pid, pg_port)
        held = await holding(conn, pids) if pids else []
        if not held:
            await asyncio.sleep(0.002)
            continue
        attempts += 1
        members = _signal_tree(os_pid, signal.SIGSTOP)
        for _ in range(1000):  # the signal is delivered asynchronously
            if all(process_state(m) in {"T", "t", ""} for m in members):
                break
            await asyncio.sleep(0.001)
        settle_until = time.monotonic() + settle
        while time.monotonic() < settle_until:
            still = await holding(conn, held)
            idle = await conn.fetch(
                "SELECT pid FROM pg_stat_activity "
                "WHERE pid = ANY($1::int[]) AND state = 'idle in transaction'",
                still,
            )
            if idle:
                return [r["pid"] for r in idle]
            if not still:
                break
            await asyncio.sleep(0.01)
        _signal_tree(os_pid, signal.SIGCONT)  # it was between two steps: go on, try again
    raise AssertionError(f"never froze the worker in the wanted state ({attempts} tries)")


def cont(os_pid: int) -> None:
    """Continue a frozen worker (the process and its children)."""
    for member in _tree(os_pid):
        if process_state(member) in {"T", "t"}:
            os.kill(member, signal.SIGCONT)


def _tree(os_pid: int) -> list[int]:
    try:
        return process_tree(os_pid)
    except OSError:
        return [os_pid]


def _signal_tree(os_pid: int, sig: int) -> list[int]:
    members = _tree(os_pid)
    for member in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)
    return members
