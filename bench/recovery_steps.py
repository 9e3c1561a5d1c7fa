"""The recovery bench's timeline of a fault, read from the workers' JSON logs: when the group
noticed, the final generation joined and synced, the tables recovered and every input
partition consumed again (bench/recovery.py prints it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devkit.workers import WorkerProcess


@dataclass
class Fault:
    kind: str  # "kill" | "term"
    worker: str
    at: float  # wall clock (time.time())
    exited_after: float = 0.0  # SIGTERM -> the process gone


@dataclass
class Phase:
    name: str
    start: float
    end: float
    faults: list[Fault] = field(default_factory=list)


@dataclass(frozen=True)
class LogLine:
    at: float
    worker: str
    logger: str
    text: str
    fields: dict[str, Any]


def read_logs(workers: list[WorkerProcess]) -> list[LogLine]:
    """Every JSON line of the workers' logs (both processes), by time."""
    out: list[LogLine] = []
    for w in workers:
        try:
            lines = w.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for raw in lines:
            if not raw.startswith("{"):
                continue
            try:
                d = json.loads(raw)
                at = datetime.fromisoformat(d["ts"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            text = str(d.get("message") or d.get("action") or "")
            out.append(LogLine(at, w.name, str(d.get("logger", "")), text, d))
    out.sort(key=lambda line: line.at)
    return out


@dataclass
class Steps:
    """Seconds after a fault: the group noticed (first revocation), the final generation
    joined, its assignment synced, recovery done, every input partition consumed again."""

    noticed: float | None
    joined: float | None
    synced: float | None
    ready: float | None
    consumed: dict[int, float]
    generation: int | None

    @property
    def resumed(self) -> float | None:
        return max(self.consumed.values()) if self.consumed else None


def steps_after(lines: list[LogLine], fault: Fault, input_topic: str, partitions: int) -> Steps:
    """The steps after ``fault`` up to the first generation in which every input partition
    was consumed again (which may come after the next fault: then that fault's steps and
    this one's overlap)."""
    after = [line for line in lines if line.at >= fault.at]

    def rel(at: float | None) -> float | None:
        return None if at is None else at - fault.at

    by_generation: dict[int, dict[int, float]] = {}
    for x in after:
        f = x.fields
        if f.get("action") == "partition_first_record" and f.get("topic") == input_topic:
            gen = f.get("generation")
            if isinstance(gen, int):
                by_generation.setdefault(gen, {}).setdefault(int(f["partition"]), x.at)
    complete = sorted(g for g, parts in by_generation.items() if len(parts) >= partitions)
    noticed = next((x.at for x in after if x.text.startswith("Revoking previously")), None)
    if not complete:
        return Steps(rel(noticed), None, None, None, {}, None)
    generation = complete[0]
    consumed = {p: at - fault.at for p, at in by_generation[generation].items()}
    last = fault.at + max(consumed.values())
    window = [x for x in after if x.at <= last]
    joins = [
        x.at
        for x in window
        if x.text.startswith("Joined group") and _generation(x.text) == generation
    ]
    syncs = [
        x.at
        for x in window
        if x.text.startswith("Successfully synced group")
        and x.text.rstrip().endswith(f"generation {generation}")
    ]
    joined = max(joins, default=None)
    readies = [
        x.at
        for x in window
        if x.text.endswith("Worker ready") and (joined is None or x.at >= joined)
    ]
    return Steps(
        rel(noticed),
        rel(joined),
        rel(max(syncs, default=None)),
        rel(max(readies, default=None)),
        consumed,
        generation,
    )


def _generation(text: str) -> int:
    try:
        return int(text.split("(generation ", 1)[1].split(")", 1)[0])
    except (IndexError, ValueError):
        return -1
