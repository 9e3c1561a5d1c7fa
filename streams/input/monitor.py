"""Faust's default sensor, without the per-event bookkeeping nobody here reads.

Faust's ``Monitor`` is called four times for every record (message in, stream event in and
out, message out) and keeps counters, per-stream and per-task tallies and a state dict per
event for Faust's own web pages, which this service does not serve (/status and /metrics
are its own, streams/web). About 3% of the worker's CPU at ingest rates. What Faust itself
reads back is kept: when each partition's stream last took an event (the consumer's "stream
idle" diagnostics), the read and committed offsets and the end offsets.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from faust.sensors.monitor import Monitor
from faust.types import TP, EventT, StreamT
from faust.types.tuples import Message


class LeanMonitor(Monitor):
    def on_message_in(self, tp: TP, offset: int, message: Message) -> None:
        self.tp_read_offsets[tp] = offset

    def on_stream_event_in(
        self, tp: TP, offset: int, stream: StreamT[Any], event: EventT[Any]
    ) -> dict[str, Any] | None:
        self.stream_inbound_time[tp] = monotonic()
        return None

    def on_stream_event_out(
        self,
        tp: TP,
        offset: int,
        stream: StreamT[Any],
        event: EventT[Any],
        state: dict[str, Any] | None = None,
    ) -> None:
        return None

    def on_message_out(self, tp: TP, offset: int, message: Message) -> None:
        return None
