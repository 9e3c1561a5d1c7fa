-- Document expiry: the run's scan (person_documents_scan) reads the window by
-- (ExpiresAt, DocumentId) and needs each document's owner, status and deletion flag. With
-- them included in the seed's partial index the scan is an index-only scan: a million
-- documents no longer cost a heap page visit each (measured on 1,000,000 documents: 2.8-3.0 s
-- of statement time for the whole window before, 1.5 s after). Same name, key and predicate
-- as before (seed 001). An update that changes none of the included columns stays HOT as
-- before; archiving or deleting a document (status, is_deleted) now writes an index entry.
CREATE INDEX ix_person_documents_expires_at_covering
    ON profile.person_documents (expires_at, document_id)
    INCLUDE (owner_user_id, status, is_deleted)
    WHERE expires_at IS NOT NULL;
DROP INDEX profile.ix_person_documents_expires_at;
ALTER INDEX profile.ix_person_documents_expires_at_covering
    RENAME TO ix_person_documents_expires_at;
