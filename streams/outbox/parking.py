"""Which refused rows are parked (moved out of their lane), pure and clock-driven.

A row Kafka refuses for a reason that will not change by itself would hold its lane, and
every key hashed to that lane, forever. Such a row is parked instead: the relay moves it to
ops.outbox_parked with its reason, and the rows behind it flow. What counts as "will not
change", and after how long:

- ``too_large`` (the record is larger than the producer's OUTBOX_MAX_RECORD_BYTES or the
  topic's max.message.bytes): at once when the producer refused it before sending, else on
  its second refusal. The second refusal is the lane's probe, which sends the row alone: a
  batch of small rows that is too large together is never taken for one large row.
- ``unknown_topic`` (no metadata for the topic, a topic that does not exist with auto-create
  off) and ``unauthorized``: once the *topic* has been refused for ``topic_wait`` seconds
  (so the next rows of that topic, in any lane, are parked on their first refusal, not
  after a wait of their own), and only if Kafka acknowledged some other row since, so a
  Kafka that is down or slow parks nothing (a relay whose only rows are for that topic
  keeps retrying it). A row of the topic that Kafka acknowledges ends the topic's wait.
- ``rejected`` (corrupt record, invalid timestamp, a policy violation): on the second refusal.

Every other error (a producer that failed, a timeout, a broker failover) is retriable: the
row keeps the head of its lane and per-key order holds, as before.

A parked row is out of its key's order once it is retried: later rows of its key are
published meanwhile. ``retry`` re-sends it with its original ``outbox-id`` header (lower
than those of the rows that went out after it), so a consumer can tell.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from aiokafka import errors as kafka_errors

from streams.outbox.producer import TopicUnavailable

TOO_LARGE: tuple[type[BaseException], ...] = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordTooLargeError,
    kafka_errors.RecordListTooLargeError,
)
UNKNOWN_TOPIC: tuple[type[BaseException], ...] = (
    kafka_errors.UnknownTopicOrPartitionError,
    kafka_errors.InvalidTopicError,
    TopicUnavailable,
)
UNAUTHORIZED: tuple[type[BaseException], ...] = (kafka_errors.TopicAuthorizationFailedError,)
REJECTED: tuple[type[BaseException], ...] = (
    kafka_errors.CorruptRecordException,
    kafka_errors.InvalidTimestampError,
    kafka_errors.PolicyViolationError,
    kafka_errors.UnsupportedForMessageFormatError,
)
REASONS = ("too_large", "unknown_topic", "unauthorized", "rejected")


def park_reason(exc: BaseException) -> str | None:
    """The reason a row refused with ``exc`` may be parked, or None (retriable)."""
    if isinstance(exc, TOO_LARGE):
        return "too_large"
    if isinstance(exc, UNKNOWN_TOPIC):
        return "unknown_topic"
    if isinstance(exc, UNAUTHORIZED):
        return "unauthorized"
    if isinstance(exc, REJECTED):
        return "rejected"
    return None


def error_text(exc: BaseException) -> str:
    """What is stored and shown of the error: its class only (Kafka's texts carry no row
    values today, but nothing here depends on that)."""
    return type(exc).__name__


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused row of a pass: the first failed row of its lane."""

    outbox_id: int
    error: BaseException
    topic: str = ""
    before_send: bool = False
    """The producer refused it in ``send()`` (its own size check), nothing reached Kafka."""


@dataclass(frozen=True, slots=True)
class Park:
    outbox_id: int
    reason: str
    error: str
    refusals: int


@dataclass(slots=True)
class _Seen:
    first_at: float
    refusals: int


class ParkPolicy:
    """Remembers, per refused row, since when and how often it was refused (in this relay),
    and says which rows to park. ``topic_wait`` bounds the wait for a missing topic."""

    MAX_REMEMBERED = 10_000

    def __init__(self, topic_wait: float) -> None:
        self.topic_wait = topic_wait
        self._seen: dict[int, _Seen] = {}
        self._topic_since: dict[str, float] = {}
        self._answered_at: float | None = None

    def decide(
        self,
        refusals: list[Refusal],
        *,
        now: float,
        kafka_answered: bool,
        acked_topics: Collection[str] = (),
    ) -> list[Park]:
        """Count this pass's ``refusals`` (at monotonic ``now``) and return the rows to park.
        ``kafka_answered``: Kafka acknowledged some row in this pass (it is up), of
        ``acked_topics``."""
        if kafka_answered:
            self._answered_at = now
        for topic in acked_topics:
            self._topic_since.pop(topic, None)
        if len(self._seen) > self.MAX_REMEMBERED:  # rows another relay took over, say
            oldest = sorted(self._seen, key=lambda i: self._seen[i].first_at)
            self.forget(oldest[: len(oldest) // 2])
        parks: list[Park] = []
        for refusal in refusals:
            seen = self._seen.setdefault(refusal.outbox_id, _Seen(now, 0))
            seen.refusals += 1
            reason = park_reason(refusal.error)
            if reason is None:
                continue
            if reason in ("unknown_topic", "unauthorized"):
                since = self._topic_since.setdefault(refusal.topic, now)
                due = (
                    self._answered_at is not None
                    and self._answered_at >= since
                    and now - since >= self.topic_wait
                )
            else:
                due = refusal.before_send or seen.refusals >= 2
            if due:
                parks.append(
                    Park(refusal.outbox_id, reason, error_text(refusal.error), seen.refusals)
                )
        return parks

    def forget(self, outbox_ids: list[int]) -> None:
        """Rows that were parked or went through: nothing more to remember."""
        for outbox_id in outbox_ids:
            self._seen.pop(outbox_id, None)
