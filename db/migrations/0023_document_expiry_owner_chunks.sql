-- Document expiry: an owner's documents are claimed in chunks in (OwnerUserId, DocumentId)
-- keyset order, so the owner index carries the DocumentId too; a chunk of a million-document
-- owner is then one index range read, not a sort of all its documents.
CREATE INDEX ix_person_documents_owner_document
    ON profile.person_documents (owner_user_id, document_id) WHERE expires_at IS NOT NULL;
DROP INDEX profile.ix_person_documents_owner;
