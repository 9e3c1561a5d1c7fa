-- Console actions are idempotent by a request id (streams/console/perform.py): the web form
-- carries one made when the page was rendered, a script sends its own, the CLI derives one
-- from the command. The action's transaction records it on its audit row; the same id again
-- returns that row's outcome and changes nothing. Unique, so two concurrent deliveries of one
-- request cannot both act: the second's transaction fails on this index and rolls back.
-- Rows written before (and the audit of actions outside the console's perform path) have none.
ALTER TABLE ops.console_audit
    ADD COLUMN request_id text CHECK (char_length(request_id) BETWEEN 1 AND 100);
