-- Document expiry: how far the markers ledger has been pruned. Prune deletes markers of
-- documents with ExpiresAt before a date and raises this horizon to it in the same
-- transaction; every scan, check and claim reads ExpiresAt from max(its own lower bound,
-- this horizon), so a replayed past day (or late owner work of an old slot) never reaches
-- documents whose markers are gone and never reminds them again. One row (the ledger is
-- one for every schedule); absent until the first prune.
CREATE TABLE profile.document_expiry_prune_horizon (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned_before date    NOT NULL
);
