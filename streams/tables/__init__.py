"""Changelog-backed Faust tables: per-key caches in front of the PostgreSQL ledger (never the arbiter)."""
