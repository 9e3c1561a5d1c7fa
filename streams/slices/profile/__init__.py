"""Document expiry reminders (seed 001).

- input: pin.profile.person-documents.v1 → the read-only projection of open columns
  (documents.py), with the profile-document-cache table in front of PostgreSQL;
- timer: document-expiry, cluster-once, daily at a low-load UTC hour (run.py): a read-only
  scan of the window hands each owner to the per-owner worker through the internal topic
  profile.document-expiry.owner-work.v1 (keyed by OwnerUserId; work.py);
- per-owner worker (owners.py): the owner's markers (insert-wins) + one
  DocumentExpiryReminderEvent in the outbox, with the profile-expiry-marks table (per-owner
  marks, verified before it is believed) in front of the ledger;
- metrics: the seed's profile_document_expiry_reminder* (metrics.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from streams.contracts import PERSON_DOCUMENTS, TopicContract
from streams.slices.context import SliceContext
from streams.slices.profile.documents import PersonDocumentsApplier
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.run import DocumentExpiryRun, ExpiryConfig, ExpiryRunResult
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.work import (
    OWNER_WORK,
    Fanout,
    InlineFanout,
    KafkaFanout,
    OwnerWork,
    TopicContinuations,
)
from streams.timers.schedule import Misfire, Mode, Schedule

DOCUMENT_EXPIRY = "document-expiry"
# 00:30 UTC: DaysLeft counts UTC dates, so just after midnight UTC every threshold crossed
# today is reminded about with the whole day ahead; it is 03:30 in Moscow (the investors'
# night) and the early morning in Europe. TIMER_DOCUMENT_EXPIRY_CRON overrides it.
DEFAULT_CRON = "30 0 * * *"
INTERNAL_TOPICS: tuple[TopicContract[Any], ...] = (OWNER_WORK,)


def install(ctx: SliceContext) -> None:
    registry, runtime = ctx.registry, ctx.runtime
    settings = runtime.settings
    metrics = runtime.metrics.family(DocumentExpiryMetrics)
    marks = ctx.cache_table(
        "profile-expiry-marks",
        help="OwnerUserId -> {DocumentId: thresholds the ledger has marked}",
    )
    owners = OwnerWorker(runtime, metrics, marks, TopicContinuations(ctx.topics.input(OWNER_WORK)))
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

    documents = ctx.cache_table(
        "profile-document-cache", help="DocumentId -> last applied Version and fingerprint"
    )
    ctx.input(
        "profile-person-documents", PERSON_DOCUMENTS, PersonDocumentsApplier(runtime, documents)
    )
    ctx.input("profile-expiry-owners", OWNER_WORK, owners)
    ctx.status("document_expiry", lambda: status(run, owners))


def status(run: DocumentExpiryRun, owners: OwnerWorker) -> dict[str, Any]:
    t = owners.totals
    return {
        "fanout": "kafka" if run.fanout.waits else "inline",
        "thresholds": list(run.config.thresholds),
        "last_run": run.last.summary() if run.last is not None else None,
        "owners_here": {
            "owners": t.owners,
            "settled_by_cache": t.settled_by_cache,
            "ledger": t.ledger,
            "failed": t.failed,
            "notified": t.notified,
            "reminders_sent": t.sent,
            "cache_disagreements": t.disagreements,
        },
    }


__all__ = [
    "DEFAULT_CRON",
    "DOCUMENT_EXPIRY",
    "INTERNAL_TOPICS",
    "OWNER_WORK",
    "DocumentExpiryMetrics",
    "DocumentExpiryRun",
    "ExpiryConfig",
    "ExpiryRunResult",
    "OwnerWork",
    "OwnerWorker",
    "PersonDocumentsApplier",
    "install",
]
