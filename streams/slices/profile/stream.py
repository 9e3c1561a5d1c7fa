"""The profile slice's stream part: the person documents projection and the per-owner worker
(on the internal owner-work topic), each with its cache table, and the /status section."""

from __future__ import annotations

from typing import Any

from streams.console.activity import activity_of
from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, PERSON_DOCUMENTS
from streams.slices.context import SliceContext
from streams.slices.profile.documents import PersonDocumentsApplier
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.run import DocumentExpiryRun
from streams.slices.profile.work import OWNER_WORK, TopicContinuations


def install_stream(ctx: SliceContext, run: DocumentExpiryRun) -> None:
    runtime = ctx.runtime
    metrics = runtime.metrics.family(DocumentExpiryMetrics)
    marks = ctx.cache_table(
        "profile-expiry-marks",
        help="OwnerUserId -> {DocumentId: thresholds the ledger has marked}",
    )
    owners = OwnerWorker(runtime, metrics, marks, TopicContinuations(ctx.topics.input(OWNER_WORK)))
    documents = ctx.cache_table(
        "profile-document-cache", help="DocumentId -> last applied Version and fingerprint"
    )
    ctx.input(
        "profile-person-documents", PERSON_DOCUMENTS, PersonDocumentsApplier(runtime, documents)
    )
    ctx.input("profile-expiry-owners", OWNER_WORK, owners)
    activity = activity_of(runtime, DOCUMENT_EXPIRY_REMINDERS.name)

    async def section() -> dict[str, Any]:
        return {**status(run, owners), "activity": await activity()}

    ctx.status("document_expiry", section)


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
