"""Faust's default sensor, without the per-event bookkeeping nobody here reads.

Faust's ``Monitor`` is called four times for every record (message in, stream event in and
out, message out) and keeps counters, per-stream and per-task tallies and a state dict per
event for Faust's own web pages, which this service does not serve (/status and /metrics
are its own, streams/web). About 3% of the worker's CPU at ingest rates. What Faust itself
reads back is kept: when each partition's stream last took an event (the consumer's "stream
idle" diagnostics), the read and committed offsets and the end offsets. Its rebalance hooks
are kept too, and also counted as Prometheus series (StreamMetrics).
"""

from __future__ import annotations

import time
from time import monotonic
from typing import Any

from faust.sensors.monitor import Monitor
from faust.types import TP, AppT, EventT, StreamT
from faust.types.tuples import Message

from streams.metrics import StreamMetrics


class LeanMonitor(Monitor):
    def __init__(self, metrics: StreamMetrics | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream_metrics = metrics
        self.wall_clock = time.time
        self._rebalance_started: float | None = None

    def on_rebalance_start(self, app: AppT) -> dict[Any, Any]:
        state = super().on_rebalance_start(app)
        self._rebalance_started = monotonic()
        if self.stream_metrics is not None:
            self.stream_metrics.rebalances.inc()
            self.stream_metrics.rebalancing.set(1)
        return state

    def on_rebalance_end(self, app: AppT, state: dict[Any, Any]) -> None:
        """Called once the rebalance is done, table recovery included."""
        super().on_rebalance_end(app, state)
        started, self._rebalance_started = self._rebalance_started, None
        if self.stream_metrics is not None:
            if started is not None:
                self.stream_metrics.rebalance_seconds.observe(monotonic() - started)
            self.stream_metrics.last_rebalance.set(self.wall_clock())
            self.stream_metrics.rebalancing.set(0)

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
