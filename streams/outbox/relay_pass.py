"""One pass of the outbox relay: lock lanes, read, publish, mark, commit.

Protocol (see db/queries/outbox.sql). Rows of one key share a lane. In one READ COMMITTED
transaction a pass locks up to ``max_lanes_per_pass`` lanes that have work
(``pg_try_advisory_xact_lock``, skipping lanes another relay holds), THEN reads each lane's
oldest unpublished rows, produces them with an idempotent producer, awaits every
acknowledgement, marks the acknowledged rows published (with Kafka's partition and offset)
and commits, which releases the lanes. Reading after locking matters: the read then sees
all the previous holder of the lane committed, so no two relays publish a row twice. A
relay that dies before its commit leaves the rows unpublished; they go out again with the
same ``outbox-id`` header (at-least-once).

What can go wrong with Kafka, and what the relay does about it:

- Kafka refuses one record (too large, unknown topic): only that row's lane waits; it cools
  down, then is probed with its head row alone (streams/outbox/lanes.py). A row refused for
  a reason that will not change by itself (too large, a topic that stays unknown, not
  authorized) is parked: moved to ops.outbox_parked in the pass's transaction, so the rest of
  its lane goes on at once (streams/outbox/parking.py; ``python -m streams outbox``).
- The producer itself fails (closed, its sender task ended, fenced, out-of-order sequence,
  any other Kafka error that is not about the record): the rows acknowledged so far are
  marked, the producer is replaced and the loop backs off.
- Kafka does not answer (a broker failover, a silent network): after ``publish_timeout``
  the pass's sends are in doubt, since the idempotent producer retries them until their
  partition has a leader, and a row sent again from a new producer would land twice. So
  the pass goes on waiting, holding its lanes and keeping its session alive, up to
  ``in_doubt_timeout``. Only then does it roll back and abort the producer (nothing it
  still holds is delivered); a request that was already on the wire may still be written:
  a re-publish with the same ``outbox-id``, which at-least-once allows.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import db.outbox as repo
from db.connector import Connection
from streams import logs, tracing
from streams.clock import Clock
from streams.metrics import OutboxMetrics
from streams.outbox.config import PublishTimeout, RelayConfig, RelayResult
from streams.outbox.lanes import LaneCooldown
from streams.outbox.parking import Park, ParkPolicy
from streams.outbox.producer import ProducerSlot, producer_fault
from streams.outbox.publish import InDoubt, Sent, publish, publish_waiting

if TYPE_CHECKING:
    from datetime import datetime

log = logging.getLogger("streams.outbox.relay")


class RelayPass:
    """The pass of one relay: its lanes' cooldowns, its parking policy and the topics it
    found without metadata carry over from one pass to the next."""

    def __init__(
        self,
        *,
        name: str,
        config: RelayConfig,
        metrics: OutboxMetrics,
        clock: Clock,
        producers: ProducerSlot,
        lanes: LaneCooldown,
        parking: ParkPolicy,
    ) -> None:
        self.name = name
        self.config = config
        self._metrics = metrics
        self._clock = clock
        self._producers = producers
        self._lanes = lanes
        self._parking = parking
        # Topic -> (monotonic time until which it counts as unavailable, the lookup's error):
        # a topic found without metadata is not looked up again by every pass.
        self._unavailable: dict[str, tuple[float, BaseException]] = {}

    async def run(self, pool: Any) -> RelayResult:
        """One pass over up to ``max_lanes_per_pass`` lanes that have work and are not held by
        another relay. Raises ``PublishTimeout`` (rolled back) when Kafka does not answer in
        time and ``ProducerUnavailable`` when no producer can be started."""
        producer = await self._producers.ready()
        paused = self._lanes.paused(self._clock.monotonic())
        lanes: list[int] = []
        rows: list[repo.PendingRow] = []
        inflight: list[asyncio.Future[Any]] = []
        parks: list[Park] = []
        # The pass's span (streams/tracing), only for a pass with rows; linked to their traces.
        span: Any = None
        try:
            async with repo.lane_transaction(pool) as conn:
                lanes = await repo.lanes_lock(
                    conn, exclude=paused, limit=self.config.max_lanes_per_pass
                )
                if not lanes:
                    return RelayResult(lanes=0, published=0, failed=0, more=False)
                probing = self._lanes.probing(lanes)
                per_lane = max(1, math.ceil(self.config.batch_size / len(lanes)))
                rows = await repo.pending_get(conn, lanes, per_lane, probe=probing)
                if rows and tracing.enabled():
                    span = tracing.start(
                        "outbox.relay.pass",
                        links=tracing.links_of(r.headers.items() for r in rows),
                        relay=self.name,
                        lanes=len(lanes),
                        rows=len(rows),
                    )
                try:
                    sent = await publish_waiting(
                        publish(
                            producer,
                            rows,
                            metadata_bound=self.config.publish_timeout / 2,
                            relay=self.name,
                            inflight=inflight,
                            known_unavailable=self._known_unavailable(),
                        ),
                        publish_timeout=self.config.publish_timeout,
                        in_doubt_timeout=self.config.in_doubt_timeout,
                        keepalive=lambda: repo.pass_keepalive(conn),
                        on_in_doubt=lambda: self._in_doubt(lanes, rows),
                    )
                except InDoubt:
                    # Leaving the block rolls back: the lanes are free for any relay again.
                    raise PublishTimeout(
                        f"Kafka did not acknowledge {len(rows)} rows of {len(lanes)} lanes "
                        f"within {self.config.in_doubt_timeout:g}s"
                    ) from None
                published_at = self._clock.now()
                parks = self._parking.decide(
                    list(sent.refusals.values()),
                    now=self._clock.monotonic(),
                    kafka_answered=bool(sent.candidates),
                    acked_topics={r.topic for r in sent.candidates},
                )
                if parks:
                    await self._park(conn, parks, published_at)
                    # The parked rows left their lanes: what Kafka acknowledged behind them
                    # may be marked now.
                    sent.acked = sent.acked_without({p.outbox_id for p in parks})
                if sent.acked:
                    placed = [(r.id, *sent.placed.get(r.id, (None, None))) for r in sent.acked]
                    marked = await repo.published_mark(conn, placed, published_at)
                    if marked != len(sent.acked):  # cannot happen while lanes are locked
                        logs.event(
                            log,
                            logging.ERROR,
                            "outbox_mark_mismatch",
                            relay=self.name,
                            acked=len(sent.acked),
                            marked=marked,
                        )
        except BaseException as exc:
            tracing.fail(span, exc)
            tracing.end(span)
            if isinstance(exc, PublishTimeout):
                logs.event(
                    log,
                    logging.WARNING,
                    "outbox_publish_timeout",
                    relay=self.name,
                    lanes=len(lanes),
                    rows=len(rows),
                    timeout=self.config.in_doubt_timeout,
                )
            if isinstance(exc, PublishTimeout) or any(not f.done() for f in inflight):
                # Its rows go out again: nothing this producer still holds may land later.
                why = "publish_timeout" if isinstance(exc, PublishTimeout) else "pass_failed"
                if isinstance(exc, Exception):
                    await self._producers.replace(producer, why, None, abort=True)
                else:  # cancelled (a stop): do not hold the cancellation up
                    self._producers.retire(producer, why, None, abort=True)
            raise
        # Committed: the rows are published (or parked) for good.
        tracing.end(span, published=len(sent.acked) if rows else 0, parked=len(parks))
        self._observe(sent.acked, published_at)
        until = self._clock.monotonic() + self.config.publish_timeout
        for topic, error in sent.looked_up_unavailable.items():
            self._unavailable[topic] = (until, error)
        self._parking.forget([p.outbox_id for p in parks] + [r.id for r in sent.acked])
        # A lane whose only failed rows were parked is healthy again: the rest of it goes next.
        parked_ids = {p.outbox_id for p in parks}
        still_failed = {
            lane for lane, ids in sent.failed_ids.items() if any(i not in parked_ids for i in ids)
        }
        self._lanes.track(
            lanes,
            sent.refused_lanes & still_failed,
            sent.failed_lanes & still_failed,
            self._clock.monotonic(),
        )
        self._observe_parked(parks, rows)
        reason = producer_fault(producer)
        if reason is None and sent.producer_error is not None:
            reason = "fatal_error"
        if reason is not None:
            await self._producers.replace(producer, reason, sent.producer_error)
        result = RelayResult(
            lanes=len(lanes),
            published=len(sent.acked),
            failed=len(rows) - len(sent.acked),
            more=bool(parks) or self._more(lanes, rows, sent, per_lane, probing),
            producer_replaced=reason is not None,
            parked=len(parks),
        )
        logs.event(
            log,
            logging.DEBUG,
            "outbox_pass",
            relay=self.name,
            lanes=result.lanes,
            probes=len(probing),
            published=result.published,
            failed=result.failed,
            first_id=rows[0].id if rows else None,
            last_id=rows[-1].id if rows else None,
        )
        if sent.failed_lanes:
            # Passes with a refused lane or a failed producer (a pass that raises is counted
            # by the relay's loop).
            self._metrics.errors.inc()
        return result

    def _known_unavailable(self) -> dict[str, BaseException]:
        """Topics a pass found without metadata within the last ``publish_timeout``."""
        now = self._clock.monotonic()
        for topic in [t for t, (until, _) in self._unavailable.items() if until <= now]:
            del self._unavailable[topic]
        return {t: error for t, (_, error) in self._unavailable.items()}

    async def _park(self, conn: Connection, parks: Sequence[Park], parked_at: datetime) -> None:
        """Move ``parks`` out of their lanes (which this pass holds) to ops.outbox_parked."""
        requests = [repo.ParkRequest(p.outbox_id, p.reason, p.error, p.refusals) for p in parks]
        moved = await repo.parked_move(conn, requests, parked_at)
        if moved != len(parks):  # cannot happen while lanes are locked
            logs.event(
                log,
                logging.ERROR,
                "outbox_park_mismatch",
                relay=self.name,
                parks=len(parks),
                moved=moved,
            )

    def _observe_parked(self, parks: Sequence[Park], rows: Sequence[repo.PendingRow]) -> None:
        topic_of = {r.id: r.topic for r in rows}
        for park in parks:
            self._metrics.parked_total.labels(
                topic=topic_of[park.outbox_id], reason=park.reason
            ).inc()
            logs.event(
                log,
                logging.ERROR,
                "outbox_row_parked",
                relay=self.name,
                outbox_id=park.outbox_id,
                topic=topic_of[park.outbox_id],
                reason=park.reason,
                error=park.error,
                refusals=park.refusals,
            )

    def _in_doubt(self, lanes: Sequence[int], rows: Sequence[repo.PendingRow]) -> None:
        self._metrics.in_doubt.inc()
        logs.event(
            log,
            logging.WARNING,
            "outbox_publish_waiting",
            relay=self.name,
            lanes=len(lanes),
            rows=len(rows),
            after=self.config.publish_timeout,
        )

    def _more(
        self,
        lanes: Sequence[int],
        rows: Sequence[repo.PendingRow],
        sent: Sent,
        per_lane: int,
        probing: set[int],
    ) -> bool:
        """May some lane hold more rows? A full lane, a probe that went through (the rest of
        its lane follows), or every lane slot taken (other lanes may be waiting)."""
        per_lane_rows = Counter(r.lane for r in rows)
        if any(
            lane not in sent.failed_lanes and (n >= per_lane or lane in probing)
            for lane, n in per_lane_rows.items()
        ):
            return True
        return (
            self.config.max_lanes_per_pass < repo.LANES
            and len(lanes) == self.config.max_lanes_per_pass
        )

    def _observe(self, acked: Sequence[repo.PendingRow], published_at: datetime) -> None:
        for topic, count in Counter(r.topic for r in acked).items():
            self._metrics.published.labels(topic=topic).inc(count)
        for row in acked:
            self._metrics.lag.observe(max(0.0, (published_at - row.created_at).total_seconds()))
