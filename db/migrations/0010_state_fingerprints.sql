-- The content fingerprint of each stored state, written with the state. The applier's
-- "unchanged" path only moves a stored Version forward when the stored row's fingerprint
-- equals the message's: a cache entry (lagging, leading or wrong) can then only choose
-- the cheaper statement, never decide what is stored. NULL (rows stored before this
-- column) never matches, so such a row takes the full write once.
ALTER TABLE calendar.events ADD COLUMN fingerprint text;

ALTER TABLE profile.person_documents ADD COLUMN fingerprint text;
