"""Profile input: person document states become the read-only projection of open columns.

The recipe's versioned-state applier does the batching, caching and transaction; this module
says what a document's key and fingerprint are (SQL in db/person_documents.py). PayloadCipher is not
in the contract, so it is dropped at parse time and can never be stored or logged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime

from db import person_documents as repo
from db.connector import Connection
from streams.contracts.profile import PersonDocumentChanged
from streams.input.applier import Origin, VersionedStateApplier, Written
from streams.runtime import Runtime
from streams.tables.cache import KeyCache


def fingerprint(message: PersonDocumentChanged) -> str:
    """Digest of every stored column except Version and OccurredAt (NumberMask included, so
    a changed mask is stored; the digest itself reveals nothing)."""
    parts = (
        message.owner_user_id,
        message.person_id,
        message.type,
        message.number_mask,
        message.expires_at,
        message.status.value,
        message.is_deleted,
    )
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


class PersonDocumentsWriter:
    def key(self, message: PersonDocumentChanged) -> str:
        return str(message.document_id)

    def fingerprint(self, message: PersonDocumentChanged) -> str:
        return fingerprint(message)

    async def write(
        self,
        conn: Connection,
        changed: Sequence[PersonDocumentChanged],
        unchanged: Sequence[PersonDocumentChanged],
        now: datetime,
        origins: Mapping[str, Origin],
        fingerprints: Mapping[str, str],
    ) -> Written[int]:
        # The stored rows decide about the states the cache thought unchanged or stale:
        # those the database can neither advance nor call stale are stored in full.
        probe = await repo.version_advance(
            conn, unchanged, [fingerprints[self.key(d)] for d in unchanged], now
        )
        settled = probe.advanced | probe.stale.keys()
        changed = [*changed, *(d for d in unchanged if d.document_id not in settled)]
        applied = await repo.upsert(
            conn, changed, [fingerprints[self.key(d)] for d in changed], now
        )
        return Written(
            applied={str(i) for i in applied},
            advanced={str(i) for i in probe.advanced},
            details=len(applied),
            stored={str(k): v for k, v in probe.stale.items()},
        )


class PersonDocumentsApplier(VersionedStateApplier[PersonDocumentChanged, int]):
    """Applies a batch of document states (newest Version per document wins)."""

    def __init__(self, runtime: Runtime, cache: KeyCache | None = None) -> None:
        super().__init__(runtime, PersonDocumentsWriter(), cache)
