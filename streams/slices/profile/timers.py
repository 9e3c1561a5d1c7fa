"""The profile slice's timer: document-expiry, cluster-once, daily at a low-load UTC hour:
a read-only scan of the window hands each owner to the per-owner worker (through the
internal owner-work topic, or inline)."""

from __future__ import annotations

from datetime import timedelta

from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.run import DocumentExpiryRun, ExpiryConfig
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import Fanout, InlineFanout, KafkaFanout
from streams.slices.slice import TimerContext
from streams.timers.schedule import Misfire, Mode, Schedule

DOCUMENT_EXPIRY = "document-expiry"
# 00:30 UTC: DaysLeft counts UTC dates, so just after midnight UTC every threshold crossed
# today is reminded about with the whole day ahead; it is 03:30 in Moscow (the investors'
# night) and the early morning in Europe. TIMER_DOCUMENT_EXPIRY_CRON overrides it.
DEFAULT_CRON = "30 0 * * *"


def install_timers(ctx: TimerContext) -> DocumentExpiryRun:
    """Registers document-expiry; returns its run (the /status section reads its last)."""
    registry, runtime = ctx.registry, ctx.runtime
    settings = runtime.settings
    metrics = runtime.metrics.family(DocumentExpiryMetrics)
    # Kafka fan-out: the owners go to whichever worker owns their partition (its own
    # producer, so the timer process needs no Faust app); inline: the run does each itself.
    fanout: Fanout = (
        KafkaFanout(settings)
        if settings.of(DocumentExpirySettings).timer_document_expiry_fanout == "kafka"
        else InlineFanout(OwnerWorker(runtime, metrics))
    )
    run = DocumentExpiryRun(
        runtime,
        fanout,
        ExpiryConfig.from_settings(settings, name=DOCUMENT_EXPIRY),
        metrics=metrics,
    )
    registry.register(
        Schedule(
            name=DOCUMENT_EXPIRY,
            cron=DEFAULT_CRON,
            handler=run,
            max_duration=timedelta(minutes=10),
            mode=Mode.CLUSTER_ONCE,
            # A worker that was down at 00:30 runs the missed day once when it is back.
            misfire=Misfire.COALESCE,
            settings_prefix="TIMER_DOCUMENT_EXPIRY_",
        )
    )
    return run
