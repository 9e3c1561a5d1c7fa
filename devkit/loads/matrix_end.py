"""The end of a fault matrix run: input spans, waiting until the workers are quiet, findings in
their logs, and why a worker is not ready (who holds each stalled partition, at which offsets)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg
from aiokafka.admin import AIOKafkaAdminClient

from devkit.loads.calendar_load import Acked
from devkit.loads.fault_timeline import PG_DOWN
from devkit.wait import NotWithin, eventually
from devkit.workers import WorkerProcess


def input_spans(acked: list[Acked], key: str) -> dict[str, tuple[datetime, datetime]]:
    """Per entity, from the acknowledgement of its first input to that of its last (the
    time its state was in flight; SLACK widens it by the time to apply it)."""
    out: dict[str, tuple[datetime, datetime]] = {}
    for a in acked:
        k = str(a.payload[key])
        lo, hi = out.get(k, (a.acked_at, a.acked_at))
        out[k] = (min(lo, a.acked_at), max(hi, a.acked_at))
    return out


async def wait_quiet(db: str, calendar_versions: dict[str, int], timeout: float) -> dict[str, int]:
    """Until every calendar Version is applied, nothing due is Pending in either ledger and
    the outbox is published (or the timeout passes); returns the last figures."""
    figures: dict[str, int] = {}

    async def probe() -> dict[str, int]:
        nonlocal figures
        try:
            conn = await asyncpg.connect(db, timeout=5)
            try:
                rows = await conn.fetch("SELECT event_id::text AS id, version FROM calendar.events")
                stored = {r["id"]: r["version"] for r in rows}
                figures = {
                    "events_behind": sum(
                        stored.get(k, -1) != v for k, v in calendar_versions.items()
                    ),
                    "due_pending": await conn.fetchval(
                        "SELECT count(*) FROM calendar.event_reminders "
                        "WHERE status = 'Pending' AND due_at < now()"
                    ),
                    "automation_due_open": await conn.fetchval(
                        "SELECT count(*) FROM automation.scheduler WHERE status_id = 'Processing' "
                        "OR (status_id = 'Pending' AND due_on < now() AND NOT is_on_support_hold)"
                    ),
                    "outbox_unpublished": await conn.fetchval(
                        "SELECT count(*) FROM ops.outbox WHERE published_at IS NULL"
                    ),
                }
            finally:
                await conn.close()
        except PG_DOWN as exc:
            figures = {"error": 1, **figures}
            print(f"quiesce: {exc!r}")
        return figures

    with contextlib.suppress(NotWithin):  # not quiet in time: the caller reports the figures
        await eventually(
            probe,
            timeout=timeout,
            what="the workers quiet",
            until=lambda f: not any(f.values()),
            interval=0.5,
        )
    return figures


def log_findings(workers: list[WorkerProcess]) -> list[str]:
    """Distinct ERROR/Traceback lines of the worker logs (identifiers only), most common first."""
    found: Counter[str] = Counter()
    for w in workers:
        try:
            text = w.log_path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "ERROR" in line or "Traceback" in line or "CRITICAL" in line:
                key = re.sub(r"\d+", "N", line.split("]", 1)[-1].strip())[:160]
                found[key] += 1
    return [f"{n:5d}x {line}" for line, n in found.most_common(12)]


async def first_failure(tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for ``tasks``; a fault that could not be injected ends the run at once."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]


async def settled(db: str, query: str, want: Callable[[Any], bool], timeout: float) -> None:
    conn = await asyncpg.connect(db)
    try:
        await eventually(
            lambda: conn.fetchval(query),
            timeout=timeout,
            what=f"{query} settled",
            until=want,
            interval=0.3,
        )
    finally:
        await conn.close()


STALL = re.compile(r"^(?P<topic>\S+):(?P<partition>\d+) ")


def worker_lines(worker: WorkerProcess, n: int = 12) -> list[str]:
    """The worker's last log lines that are not its timer process's cycles, and its last
    rebalance steps (a CI tail was all timer-process lines)."""
    try:
        text = worker.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ["<no log>"]
    own = [x for x in text if "[timer-process]" not in x and '"process": "timer-process"' not in x]
    steps = [x for x in own if "assigned partitions" in x or "Revoking" in x]
    return [*(f"rebalance: {x[:200]}" for x in steps[-4:]), *(x[:240] for x in own[-n:])]


async def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}
    finally:
        await admin.close()


async def explain_not_ready(workers: list[WorkerProcess], bootstrap: str, group: str) -> str:
    """Why workers are not ready: each one's /health, who holds each stalled partition with
    what committed offset and high watermark (its /status), the group's committed offset
    on the broker, and the worker's last own log lines."""
    lines: list[str] = []
    health: dict[str, Any] = {}
    status: dict[str, Any] = {}
    for w in workers:
        if w.proc is None or w.proc.poll() is not None:
            lines.append(f"{w.name}: not running (rc {w.proc.returncode if w.proc else None})")
            continue
        with contextlib.suppress(OSError, ValueError):
            health[w.name] = (await asyncio.to_thread(w.get, "/health"))[1]
            status[w.name] = (await asyncio.to_thread(w.get, "/status?format=json"))[1]
    stalled: set[tuple[str, int]] = set()
    for name, h in health.items():
        lines.append(f"{name} /health: {h}")
        for agent_stalls in (
            (h.get("stalled_partitions") or {}).values() if isinstance(h, dict) else ()
        ):
            for text in agent_stalls:
                m = STALL.match(text)
                if m:
                    stalled.add((m["topic"], int(m["partition"])))
    group_view: dict[tuple[str, int], int] = {}
    try:
        group_view = await group_offsets(bootstrap, group)
    except Exception as exc:  # a diagnostic must not hide the failure it explains
        lines.append(f"group offsets of {group}: {exc!r}")
    for topic, partition in sorted(stalled):
        where = f"{topic}:{partition}"
        lines.append(
            f"stalled {where}: committed in the group {group_view.get((topic, partition))}"
        )
        for name, st in status.items():
            for agent in st.get("agents", []) if isinstance(st, dict) else []:
                for part in agent.get("partitions", []):
                    if part["partition"] != where:
                        continue
                    mine = [x for x in agent.get("stalled", []) if x["partition"] == where]
                    lines.append(
                        f"  held by {name} ({agent['agent']}): committed {part['committed']} "
                        f"highwater {part['highwater']} stalled {mine}"
                    )
                    if mine and part["committed"] == part["highwater"]:
                        lines.append(
                            "  (nothing left to read: the lag is the stall check's own "
                            "position, behind the committed offset)"
                        )
    for w in workers:
        h = health.get(w.name)
        if h is not None and (not isinstance(h, dict) or h.get("status") != "ready"):
            lines.append(f"{w.name} last lines:")
            lines += [f"  {x}" for x in worker_lines(w)]
    return "\n".join(lines)


async def all_ready(
    workers: list[WorkerProcess], bootstrap: str, group: str, timeout: float
) -> None:
    try:
        await asyncio.gather(*(w.wait_ready(timeout=timeout) for w in workers))
    except AssertionError as exc:
        why = await explain_not_ready(workers, bootstrap, group)
        raise AssertionError(f"{str(exc).splitlines()[0]}\n{why}") from None
