"""Faust web views: health, Prometheus metrics, and JSON/HTML status of agents, tables, timers, outbox."""
