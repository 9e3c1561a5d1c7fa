"""Tooling shared by the tests and the benchmarks (never imported by the service): worker
processes started as a user starts them, Kafka helpers, bulk seeding, waiting on a signal."""
