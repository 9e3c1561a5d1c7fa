"""Document expiry reminders (seed 001).

- input: pin.profile.person-documents.v1 → the read-only projection of open columns
  (documents.py), with the profile-document-cache table in front of PostgreSQL (stream.py);
- timer: document-expiry, cluster-once, daily at a low-load UTC hour (timers.py, run.py): a
  read-only scan of the window hands each owner to the per-owner worker through the internal
  topic profile.document-expiry.owner-work (keyed by OwnerUserId; work.py);
- per-owner worker (owners.py): the owner's markers (insert-wins) + one
  DocumentExpiryReminderEvent in the outbox, with the profile-expiry-marks table (per-owner
  marks, verified before it is believed) in front of the ledger;
- metrics: the seed's profile_document_expiry_reminder* (metrics.py); demo.py: the demo
  workload; listings.py: its markers and runs in the operators' console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.contracts import DOCUMENT_EXPIRY_REMINDERS, PERSON_DOCUMENTS
from streams.slices.profile.listings import LISTINGS
from streams.slices.profile.metrics import DocumentExpiryMetrics
from streams.slices.profile.owners import OwnerWorker
from streams.slices.profile.run import DocumentExpiryRun, ExpiryConfig, ExpiryRunResult
from streams.slices.profile.settings import DocumentExpirySettings
from streams.slices.profile.timers import DEFAULT_CRON, DOCUMENT_EXPIRY, install_timers
from streams.slices.profile.work import OWNER_WORK, OwnerWork
from streams.slices.slice import Demo, Slice

if TYPE_CHECKING:
    from streams.slices.context import SliceContext


def install_stream(ctx: SliceContext, run: Any) -> None:
    from streams.slices.profile.stream import install_stream

    install_stream(ctx, run)


def load_demo() -> Demo:
    from streams.slices.profile import demo

    return demo


SLICE = Slice(
    name="profile",
    settings=DocumentExpirySettings,
    contracts=(PERSON_DOCUMENTS, DOCUMENT_EXPIRY_REMINDERS),
    internal_topics=(OWNER_WORK,),
    install_timers=install_timers,
    install_stream=install_stream,
    demo=load_demo,
    listings=LISTINGS,
)

__all__ = [
    "DEFAULT_CRON",
    "DOCUMENT_EXPIRY",
    "OWNER_WORK",
    "SLICE",
    "DocumentExpiryMetrics",
    "DocumentExpiryRun",
    "ExpiryConfig",
    "ExpiryRunResult",
    "OwnerWork",
    "OwnerWorker",
    "install_timers",
]
