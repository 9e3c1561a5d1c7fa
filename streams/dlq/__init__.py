"""Dead-letter tooling: replaying a DLQ to its source topic (the writer is streams/agents/dlq.py)."""
