"""Reminder and automation stream processor: Faust agents on Kafka, PostgreSQL as the ledger."""
