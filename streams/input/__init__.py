"""The shared input loop every slice's agent runs: batch, decode, dead-letter bad messages
(streams/dlq/send.py), apply on one transaction, ack after the commit; the versioned-state
applier, the gap guard, per-partition progress and the lean sensor."""
